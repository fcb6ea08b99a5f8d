"""The third layer, enforced by the kernel: the server confines itself with Linux Landlock.

    status = sandbox.confine(sandbox.Plan(read=[...], write=[...], bind=[8765], connect=[]))
    print(status.describe())   # "sandbox: on (Landlock ABI 7): ..." or "sandbox: unavailable (...)"

`code/serve.py` calls `confine` once start-up is done (configuration read, stores opened,
listener bound) and before any thread starts: a Landlock domain covers the thread that
asks and the threads it starts later, never threads already running. From then on the
process may read only what it still imports (the project's `code/`, the interpreter's
library folders, the system's shared libraries), read and write only its notes folders
and its state database's own files (the database, its `-wal` and `-shm`: never their
folder), bind only its own TCP port and connect only to its database's port. Everything
else of the filesystem answers EACCES, to every thread, for the rest of the process's
life; nothing can undo it (no_new_privs is set first). Landlock has no right for a
file's metadata, so a seccomp filter then refuses chmod, chown, utime and extended
attribute writes everywhere (EPERM). Before any of it, `unsafe_writes` refuses a
notes folder that would make the import path writable.

Landlock is reached through `ctypes` (the standard library): `prctl(PR_SET_NO_NEW_PRIVS)`,
then the syscalls landlock_create_ruleset, landlock_add_rule and landlock_restrict_self,
then prctl(PR_SET_SECCOMP) with a small BPF program.
Rights the running kernel's ABI lacks are masked out, so one plan works from ABI 1
(Linux 5.13: files only) to ABI 6 and later (TCP ports from 4, signal and abstract
socket scoping from 6). Elsewhere (another OS, an old kernel, Landlock disabled at boot)
`confine` changes nothing and says why. docs/security.md, "Confinement", says what this
stops and what it does not.
"""

from __future__ import annotations

import ctypes
import errno
import importlib.machinery
import os
import platform
import site
import stat
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["confine", "import_roots", "kernel_abi", "server_plan", "unsafe_writes"]

# Syscall numbers: the same on x86_64 and aarch64 (both use the unified table from 5.13).
SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
PR_SET_NO_NEW_PRIVS = 38
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2

# Filesystem rights (include/uapi/linux/landlock.h), with the ABI that introduced each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: rename or link across folders
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_FROM_ABI = 4
SCOPE_FROM_ABI = 6

# What a rule on a file (not a folder) may grant; the kernel refuses the rest with EINVAL.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_READ_FILE | FS_READ_DIR
# Read and write inside a folder: files and sub-folders made, changed, renamed and removed.
# Not granted anywhere: executing, device ioctls, and making devices, FIFOs, sockets or symlinks.
WRITE = READ | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_REFER | FS_TRUNCATE

# Metadata writes, which no Landlock right covers: refused by a seccomp filter (see `metadata_filter`).
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # the filter's check that numbers mean what it thinks
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 calls: the same arch token, numbers of their own
METADATA_SYSCALLS = {  # mode, owner, times and extended attributes, by path, descriptor or both
    "x86_64": {
        "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
        "fremovexattr": 199, "utimes": 235, "fchownat": 260, "futimesat": 261, "fchmodat": 268,
        "utimensat": 280, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469,
    },
    "aarch64": {  # the generic table: no chmod, chown, lchown, utime, utimes or futimesat at all
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88,
        "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469,
    },
}  # fmt: skip
METADATA_ERRNO = errno.EPERM  # what chmod and chown answer a caller without the right: EACCES stays Landlock's
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_RET_K = 0x06
SECCOMP_DATA_NR = 0  # offsets in struct seccomp_data
SECCOMP_DATA_ARCH = 4
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# Read-only everywhere: shared libraries a late import may load (libssl, libuuid, libpq, NSS).
SYSTEM_LIBRARY_FOLDERS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
LOADER_FILES = ("/etc/ld.so.cache",)
# Name resolution, read only where a database is reached by host name.
RESOLVER_FILES = (
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
)
# Device files: /dev/null is written when a stdio client hangs up; urandom is the fallback of os.urandom.
DEVICE_WRITE = ("/dev/null",)
DEVICE_READ = ("/dev/urandom",)
SQLITE_SIDE_FILES = ("-wal", "-shm")  # beside a WAL-mode database; its own files are granted, not its folder
SEARCH_INDEX_SUFFIX = (
    "-search"  # the folder store's text index beside its database (text_index.index_path), with its side files
)
# What Python imports a file as (a module, bytecode, an extension) or runs at start-up (a site folder's .pth).
IMPORT_SUFFIXES = (*importlib.machinery.all_suffixes(), ".pth")


class Plan:
    """What the confined process may still reach: (label, path) pairs per access, and TCP ports."""

    # Plain classes, not dataclasses: `dataclasses` (and the `inspect` it loads) cost every
    # server process about 6 ms of start-up for these two records.
    __slots__ = ("read", "write", "bind", "connect")

    def __init__(
        self,
        read: list[tuple[str, str]] | None = None,
        write: list[tuple[str, str]] | None = None,
        bind: list[int] | None = None,
        connect: list[int] | None = None,
    ) -> None:
        self.read = [] if read is None else read
        self.write = [] if write is None else write
        self.bind = [] if bind is None else bind
        self.connect = [] if connect is None else connect


class Status(NamedTuple):
    """The outcome of `confine`: on (with the ABI and what stays allowed), off, or unavailable and why."""

    on: bool
    reason: str  # why not, when not on: "unavailable (...)" or "not applied (...)"
    abi: int = 0
    allowed: str = ""
    unfiltered: str = ""  # when on: why metadata writes are not filtered ("" when they are)

    @property
    def complete(self) -> bool:
        """True when both Landlock and the metadata filter are in place (what --sandbox require asks)."""
        return self.on and not self.unfiltered

    def describe(self) -> str:
        """One start-up line for the operator; names no secret (paths are counted by kind)."""
        if self.on:
            return f"sandbox: on (Landlock ABI {self.abi}): {self.allowed}"
        return f"sandbox: {self.reason}; serving unconfined"


def off(reason: str) -> Status:
    """A Status for a process that was not confined, and why."""
    return Status(False, reason)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class Failed(Exception):
    """A Landlock or seccomp call failed; str() is one line naming the call and the errno."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what} failed: {errno.errorcode.get(code, code)}")
        self.errno = code


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        raise Failed(what, ctypes.get_errno())
    return result


def _syscall(libc: Any, what: str, number: int, *args: Any) -> int:
    return _check(libc.syscall(ctypes.c_long(number), *args), what)


def abi_version(libc: Any, numbers: tuple[int, int, int]) -> int:
    """The running kernel's Landlock ABI, or Failed naming why there is none (ENOSYS, EOPNOTSUPP)."""
    version = ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    return _syscall(libc, "landlock_create_ruleset", numbers[0], None, ctypes.c_size_t(0), version)


def unavailable_reason(exc: Failed) -> str:
    """The operator's words for a kernel that has no usable Landlock."""
    if exc.errno == errno.ENOSYS:
        return "unavailable (this kernel has no Landlock: ENOSYS)"
    if exc.errno == errno.EOPNOTSUPP:
        return "unavailable (Landlock is disabled at boot: EOPNOTSUPP; add landlock to the lsm= kernel parameter)"
    return f"unavailable ({exc})"


def kernel_abi(libc: Any = None, machine: str | None = None, system: str | None = None) -> int | str:
    """The running kernel's Landlock ABI version, or the reason there is none ("unavailable (...)")."""
    system = system or platform.system()
    machine = machine or platform.machine()
    if system != "Linux":
        return f"unavailable (Landlock is Linux-only; this is {system})"
    numbers = SYSCALLS.get(machine)
    if numbers is None:
        return f"unavailable (no Landlock syscall numbers known for {machine})"
    try:
        return abi_version(libc or _libc(), numbers)
    except Failed as exc:
        return unavailable_reason(exc)


def confine(plan: Plan, libc: Any = None, machine: str | None = None, system: str | None = None) -> Status:
    """Restrict this process (and every thread it starts later) to `plan`; the Status says whether it did.

    `libc`, `machine` and `system` default to the running ones (tests inject a kernel without Landlock).
    Refuses (Status off) if another thread already runs: it would stay unconfined.
    """
    abi = kernel_abi(libc, machine, system)
    if isinstance(abi, str):
        return off(abi)
    libc = libc or _libc()
    threads = _thread_count()
    if threads > 1:
        # A thread already running would keep every right: refuse rather than pretend.
        return off(f"not applied ({threads} threads already running; it covers only threads started after it)")
    machine = machine or platform.machine()
    try:
        restrict(plan, libc, SYSCALLS[machine], abi)
    except Failed as exc:
        return off(f"not applied ({exc})")
    # After Landlock, so that a kernel refusing the filter still leaves the files confined.
    try:
        filter_metadata(libc, machine)
    except Failed as exc:
        return Status(True, "", abi, summary(plan, abi, str(exc)), str(exc))
    return Status(True, "", abi, summary(plan, abi))


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1  # no /proc: nothing to count with


def restrict(plan: Plan, libc: Any, numbers: tuple[int, int, int], abi: int) -> None:
    """Build the ruleset for `plan` with the rights `abi` knows, then restrict the calling thread; Failed if a call
    fails."""
    create, add_rule, restrict = numbers
    fs_mask = FS_BY_ABI[max(v for v in FS_BY_ABI if v <= abi)]
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= NET_FROM_ABI else 0
    attr = _RulesetAttr(fs_mask, net, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= SCOPE_FROM_ABI else 0)
    # The struct grew with the ABI: pass only the fields this kernel knows.
    size = 24 if abi >= SCOPE_FROM_ABI else 16 if abi >= NET_FROM_ABI else 8
    ruleset = _syscall(
        libc, "landlock_create_ruleset", create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    try:
        for rights, entries in ((READ, plan.read), (WRITE, plan.write)):
            for _, path in entries:
                _add_path(libc, add_rule, ruleset, path, rights & fs_mask)
        if net:
            for rights, ports in ((NET_BIND_TCP, plan.bind), (NET_CONNECT_TCP, plan.connect)):
                for port in sorted(set(ports)):
                    rule = ctypes.byref(_NetPortAttr(rights, port))
                    kind = ctypes.c_int(LANDLOCK_RULE_NET_PORT)
                    _syscall(
                        libc,
                        f"landlock_add_rule port {port}",
                        add_rule,
                        ctypes.c_int(ruleset),
                        kind,
                        rule,
                        ctypes.c_uint32(0),
                    )
        # Without no_new_privs an unprivileged process may not restrict itself, and a
        # set-uid program it executed could otherwise shed the domain's limits.
        no_new_privs = (ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), *[ctypes.c_ulong(0)] * 3)
        _check(libc.prctl(*no_new_privs), "prctl(PR_SET_NO_NEW_PRIVS)")
        _syscall(libc, "landlock_restrict_self", restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def metadata_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The BPF program, as (code, jt, jf, k) rows: metadata writes answer EPERM, other calls pass, a foreign ABI is
    killed."""
    # Landlock checks opening, creating, renaming and removing, never chmod, chown,
    # utime or setxattr: without this, a compromised server could make any file its user
    # owns readable by all (0600 -> 0666), give it away, back-date it, or tag it, even
    # where it cannot read a byte. The stores need none of these once started (SQLite's
    # fchmod and fchown of a new -wal or -shm happen before confinement, and it ignores
    # their failure anyway), so every variant is refused, descriptors included.
    numbers = sorted(METADATA_SYSCALLS[machine].values())
    program = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH[machine]),
        # A call made through another ABI (32-bit int 0x80 on x86_64) has other numbers.
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
    ]
    if machine == "x86_64":
        program += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    # Each comparison jumps over the ones after it and the ALLOW to the ERRNO return.
    program += [(BPF_JEQ_K, len(numbers) - i, 0, number) for i, number in enumerate(numbers)]
    program += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | METADATA_ERRNO)]
    return program


def filter_metadata(libc: Any, machine: str) -> None:
    """Install `metadata_filter(machine)` on the calling thread (and the threads it starts); Failed if refused.

    Needs no_new_privs, which `restrict` set: nothing undoes the filter either.
    """
    rows = metadata_filter(machine)
    table = (_SockFilter * len(rows))(*(_SockFilter(*row) for row in rows))
    program = _SockFprog(len(rows), table)
    arguments = (
        ctypes.c_int(PR_SET_SECCOMP),
        ctypes.c_ulong(SECCOMP_MODE_FILTER),
        ctypes.byref(program),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    _check(libc.prctl(*arguments), "prctl(PR_SET_SECCOMP)")


def _add_path(libc: Any, add_rule: int, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent here (/lib64 on some systems): nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        rule = ctypes.byref(_PathBeneathAttr(rights, fd))
        kind = ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH)
        _syscall(libc, "landlock_add_rule", add_rule, ctypes.c_int(ruleset), kind, rule, ctypes.c_uint32(0))
    finally:
        os.close(fd)


def summary(plan: Plan, abi: int, unfiltered: str = "") -> str:
    """What stays allowed, counted by kind (no path is printed: a folder name can be private)."""

    def counted(entries: list[tuple[str, str]]) -> str:
        kinds: dict[str, int] = {}
        for label, path in entries:
            if os.path.exists(path):
                kinds[label] = kinds.get(label, 0) + 1
        return ", ".join(f"{count} {label}{'s' if count > 1 else ''}" for label, count in kinds.items()) or "nothing"

    def ports(values: list[int]) -> str:
        return " ".join(str(p) for p in sorted(set(values))) or "none"

    text = f"read-only {counted(plan.read)}; read-write {counted(plan.write)}; nothing else of the filesystem"
    if unfiltered:
        text += f"; chmod, chown, utime and xattr writes NOT filtered ({unfiltered})"
    else:
        text += "; no chmod, chown, utime or xattr writes"
    if abi >= NET_FROM_ABI:
        text += f"; TCP bind {ports(plan.bind)}, connect {ports(plan.connect)}"
    else:
        text += "; TCP unrestricted (network rules need ABI 4)"
    return text


# =====================================================================================
# The server's plan
# =====================================================================================


def import_folders() -> list[str]:
    """Folders the interpreter imports from: its library paths, sys.path, and the folders of loaded shared objects."""
    found: list[str] = []
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        found.append(paths[key])
    found += [entry for entry in sys.path if entry and os.path.isabs(entry)]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and ".so" in os.path.basename(parts[5]):
                    found.append(os.path.dirname(parts[5]))
    except OSError:
        pass
    return found


def outermost(paths: Iterable[str]) -> list[str]:
    """The existing paths among `paths` that lie inside no other one (a rule on a folder covers all below it)."""
    real = [os.path.realpath(path) for path in dict.fromkeys(paths) if os.path.exists(path)]  # each path resolved once
    kept = [
        p for p in dict.fromkeys(real) if not any(q != p and (p + "/").startswith(q.rstrip("/") + "/") for q in real)
    ]
    return kept


def server_plan(
    code_folder: str,
    notes_folders: Iterable[str],
    state_database: str | None,
    database_url: str | None,
    config_file: str | None,
    bind: Iterable[int],
) -> Plan:
    """The plan for this server: what it imports, its folders and database, its listener's port."""
    plan = Plan(bind=list(bind))
    plan.read.append(("code folder", code_folder))
    plan.read += [("library folder", path) for path in outermost([*import_folders(), *SYSTEM_LIBRARY_FOLDERS])]
    plan.read += [("file", path) for path in LOADER_FILES]
    plan.read += [("device", path) for path in DEVICE_READ]
    if config_file:
        plan.read.append(("config file", os.path.abspath(config_file)))
    plan.write += [("device", path) for path in DEVICE_WRITE]
    plan.write += [("notes folder", path) for path in outermost(notes_folders)]
    if state_database:
        # The files, never their folder: a writable folder beside the code (`--db notes.db`
        # run from the checkout) let the server append to code/serve.py and create a
        # sitecustomize.py that its next start would run. SQLite needs no new file here:
        # open_store created the -wal and -shm, and WAL mode uses no -journal.
        plan.write += [("state file", path) for path in state_files(state_database, search_index=bool(notes_folders))]
    if database_url:
        hosts, ports = postgres_endpoints(database_url)
        plan.connect += ports
        if any(host and not host.startswith("/") for host in hosts):
            plan.read += [("file", path) for path in RESOLVER_FILES]
        plan.read += [("file", path) for path in libpq_files()]
    return plan


def state_files(database: str, search_index: bool = False) -> list[str]:
    """The SQLite database's own files, the only ones in its folder the confined server may write; with the folder
    store's text index's too."""
    path = os.path.abspath(database)
    index = path + SEARCH_INDEX_SUFFIX
    files = [path, *(path + suffix for suffix in SQLITE_SIDE_FILES)]
    return files + [index, *(index + suffix for suffix in SQLITE_SIDE_FILES)] if search_index else files


def import_roots(code_folder: str) -> list[str]:
    """Every folder the interpreter imports or loads from, now or at its next start, resolved (absent ones too)."""
    roots = [code_folder, *import_folders(), *SYSTEM_LIBRARY_FOLDERS]
    roots += [os.getcwd() if entry == "" else entry for entry in sys.path if entry == "" or os.path.isabs(entry)]
    roots += [os.path.dirname(path) for path in _module_files()]
    roots.append(site.getusersitepackages())  # read at the next start, once it exists, .pth files and all
    return list(dict.fromkeys(os.path.realpath(root) for root in dict.fromkeys(roots)))  # each folder resolved once


def _module_files() -> list[str]:
    return [
        path
        for module in list(sys.modules.values())
        if isinstance(path := getattr(module, "__file__", None), str) and os.path.isabs(path)
    ]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def unsafe_writes(notes_folders: Iterable[str], state_database: str | None, roots: Iterable[str]) -> str | None:
    """One line naming what the plan would make writable on the import path (`roots`), or None when nothing.

    The sandbox keeps the import path read-only; a notes folder is writable as a whole,
    so one that is, holds or lies inside an import folder (`--notes-dir .` in the
    checkout, a PYTHONPATH folder, a home folder holding a virtual environment) is
    refused rather than narrowed. The state database's files are granted one by one, so
    only a file that Python would import (`store.py` on sys.path) is refused.
    """
    roots = list(roots)
    for folder in notes_folders:
        real = os.path.realpath(folder)
        for root in roots:
            relation = (
                "is"
                if real == root
                else f"lies inside {root},"
                if _inside(real, root)
                else f"holds {root},"
                if _inside(root, real)
                else ""
            )
            if relation:
                return (
                    f"sandbox: notes folder {real} {relation} a folder Python imports from; notes folders stay "
                    "writable, so the server could rewrite its own code: keep notes apart from code (or --no-sandbox)"
                )
    for path in state_files(state_database, search_index=bool(notes_folders)) if state_database else []:
        real = os.path.realpath(path)
        if real in roots or (
            real.endswith(IMPORT_SUFFIXES) and any(_inside(os.path.dirname(real), root) for root in roots)
        ):
            return (
                f"sandbox: database file {real} is on Python's import path; the server could rewrite code it runs:"
                " rename or move it (or --no-sandbox)"
            )
    return None


def postgres_endpoints(url: str, environ: Mapping[str, str] = os.environ) -> tuple[list[str], list[int]]:
    """The hosts (names or socket folders) and TCP ports a postgresql:// URL connects to (PGHOST, PGPORT if it names
    none)."""
    from urllib.parse import parse_qs, unquote

    # Split by hand, not with urlsplit: libpq takes several hosts with an IPv6 literal
    # among them ("db1:5433,[::1]:6000"), which Python's stricter urlsplit refuses.
    rest = url.partition("://")[2].partition("#")[0]
    authority, _, query_text = rest.partition("?")
    query = parse_qs(query_text)
    netloc = authority.partition("/")[0].rpartition("@")[2]
    hosts: list[str] = []
    ports: list[int] = []
    for item in filter(None, netloc.split(",")):
        if item.startswith("["):  # an IPv6 literal, [::1]:5432
            host, _, rest = item[1:].partition("]")
            port = rest[1:]
        else:
            host, _, port = item.partition(":")
        hosts.append(unquote(host))
        if port.isdigit():
            ports.append(int(port))
    for value in query.get("host", []) + query.get("hostaddr", []):
        hosts += [unquote(h) for h in value.split(",")]
    for value in query.get("port", []):
        ports += [int(p) for p in value.split(",") if p.isdigit()]
    if not ports:
        env_port = environ.get("PGPORT", "")
        ports.append(int(env_port) if env_port.isdigit() else 5432)
    if not hosts:
        hosts = [h for h in environ.get("PGHOST", "").split(",") if h] or ["/var/run/postgresql", "/tmp"]
    return hosts, ports


def libpq_files() -> list[str]:
    """libpq's per-user files a reconnection may read: password file, service file, TLS certificates."""
    home = os.path.expanduser("~")
    return [
        os.environ.get("PGPASSFILE") or os.path.join(home, ".pgpass"),
        os.environ.get("PGSERVICEFILE") or os.path.join(home, ".pg_service.conf"),
        os.path.join(home, ".postgresql"),
    ]
