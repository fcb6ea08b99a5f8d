"""The third layer, enforced by the kernel: the server confines itself with Linux Landlock.

    status = sandbox.confine(sandbox.Plan(read=[...], write=[...], bind=[8765], connect=[]))
    print(status.describe())   # "sandbox: on (Landlock ABI 7): ..." or "sandbox: unavailable (...)"

`code/serve.py` calls `confine` once start-up is done (configuration read, stores opened,
listener bound) and before any thread starts: a Landlock domain covers the thread that
asks and the threads it starts later, never threads already running. From then on the
process may read only what it still imports (the project's `code/`, the interpreter's
library folders, the system's shared libraries), read and write only its notes folders
and its state database's folder, bind only its own TCP port and connect only to its
database's port. Everything else of the filesystem answers EACCES, to every thread, for
the rest of the process's life; nothing can undo it (no_new_privs is set first).

Landlock is reached through `ctypes` (the standard library): `prctl(PR_SET_NO_NEW_PRIVS)`,
then the syscalls landlock_create_ruleset, landlock_add_rule and landlock_restrict_self.
Rights the running kernel's ABI lacks are masked out, so one plan works from ABI 1
(Linux 5.13: files only) to ABI 6 and later (TCP ports from 4, signal and abstract
socket scoping from 6). Elsewhere (another OS, an old kernel, Landlock disabled at boot)
`confine` changes nothing and says why. docs/security.md, "Confinement", says what this
stops and what it does not.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["confine", "kernel_abi", "server_plan"]

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

# Read-only everywhere: shared libraries a late import may load (libssl, libuuid, libpq, NSS).
SYSTEM_LIBRARY_FOLDERS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
LOADER_FILES = ("/etc/ld.so.cache",)
# Name resolution, read only where a database is reached by host name.
RESOLVER_FILES = ("/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services")
# Device files: /dev/null is written when a stdio client hangs up; urandom is the fallback of os.urandom.
DEVICE_WRITE = ("/dev/null",)
DEVICE_READ = ("/dev/urandom",)


@dataclass
class Plan:
    """What the confined process may still reach: (label, path) pairs per access, and TCP ports."""

    read: list[tuple[str, str]] = field(default_factory=list)
    write: list[tuple[str, str]] = field(default_factory=list)
    bind: list[int] = field(default_factory=list)
    connect: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Status:
    """The outcome of `confine`: on (with the ABI and what stays allowed), off, or unavailable and why."""

    on: bool
    reason: str  # why not, when not on: "unavailable (...)" or "not applied (...)"
    abi: int = 0
    allowed: str = ""

    def describe(self) -> str:
        """One start-up line for the operator; names no secret (paths are counted by kind)."""
        if self.on:
            return f"sandbox: on (Landlock ABI {self.abi}): {self.allowed}"
        return f"sandbox: {self.reason}; serving unconfined"


def off(reason: str) -> Status:
    """A Status for a process that was not confined, and why."""
    return Status(False, reason)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class Failed(Exception):
    """A Landlock call failed; str() is one line naming the call and the errno."""

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
    try:
        restrict(plan, libc, SYSCALLS[machine or platform.machine()], abi)
    except Failed as exc:
        return off(f"not applied ({exc})")
    return Status(True, "", abi, summary(plan, abi))


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1  # no /proc: nothing to count with


def restrict(plan: Plan, libc: Any, numbers: tuple[int, int, int], abi: int) -> None:
    """Build the ruleset for `plan` with the rights `abi` knows, then restrict the calling thread; Failed if a call fails."""
    create, add_rule, restrict = numbers
    fs_mask = FS_BY_ABI[max(v for v in FS_BY_ABI if v <= abi)]
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= NET_FROM_ABI else 0
    attr = _RulesetAttr(fs_mask, net, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= SCOPE_FROM_ABI else 0)
    # The struct grew with the ABI: pass only the fields this kernel knows.
    size = 24 if abi >= SCOPE_FROM_ABI else 16 if abi >= NET_FROM_ABI else 8
    ruleset = _syscall(libc, "landlock_create_ruleset", create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for rights, entries in ((READ, plan.read), (WRITE, plan.write)):
            for _, path in entries:
                _add_path(libc, add_rule, ruleset, path, rights & fs_mask)
        if net:
            for rights, ports in ((NET_BIND_TCP, plan.bind), (NET_CONNECT_TCP, plan.connect)):
                for port in sorted(set(ports)):
                    rule = ctypes.byref(_NetPortAttr(rights, port))
                    kind = ctypes.c_int(LANDLOCK_RULE_NET_PORT)
                    _syscall(libc, f"landlock_add_rule port {port}", add_rule, ctypes.c_int(ruleset), kind, rule, ctypes.c_uint32(0))
        # Without no_new_privs an unprivileged process may not restrict itself, and a
        # set-uid program it executed could otherwise shed the domain's limits.
        no_new_privs = (ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), *[ctypes.c_ulong(0)] * 3)
        _check(libc.prctl(*no_new_privs), "prctl(PR_SET_NO_NEW_PRIVS)")
        _syscall(libc, "landlock_restrict_self", restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


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


def summary(plan: Plan, abi: int) -> str:
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
    real = [os.path.realpath(path) for path in paths if os.path.exists(path)]
    kept = [p for p in dict.fromkeys(real) if not any(q != p and (p + "/").startswith(q.rstrip("/") + "/") for q in real)]
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
        plan.write.append(("state folder", os.path.dirname(os.path.abspath(state_database))))
    if database_url:
        hosts, ports = postgres_endpoints(database_url)
        plan.connect += ports
        if any(host and not host.startswith("/") for host in hosts):
            plan.read += [("file", path) for path in RESOLVER_FILES]
        plan.read += [("file", path) for path in libpq_files()]
    return plan


def postgres_endpoints(url: str, environ: Mapping[str, str] = os.environ) -> tuple[list[str], list[int]]:
    """The hosts (names or socket folders) and TCP ports a postgresql:// URL connects to (PGHOST, PGPORT if it names none)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    parts = urlsplit(url)
    query = parse_qs(parts.query)
    netloc = parts.netloc.rpartition("@")[2]
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
