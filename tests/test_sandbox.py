"""The Landlock sandbox: a compromised server stays inside its folders and ports; no Landlock, no pretending."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any

from helpers import (
    legacy_client,
    procs,
    support,  # noqa: F401 - puts code/ on the import path
)
from helpers.support import accept, call, tps

import legacy
import main
import postgres_cluster
import sandbox
import serve
import text_index

PROBE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers", "sandbox_probe")
# What Landlock refuses (EACCES), then the metadata writes the seccomp filter refuses (EPERM).
LANDLOCK_ATTEMPTS = (
    "read-outside", "list-root", "write-outside", "symlink-out", "bind-other-port", "connect-test-port",
    "append-code", "create-code-sitecustomize", "create-state-sitecustomize",
)  # fmt: skip
METADATA_ATTEMPTS = ("chmod-outside", "chown-outside", "utime-outside", "setxattr-outside")
ATTEMPTS = LANDLOCK_ATTEMPTS + METADATA_ATTEMPTS
CONFINED = {
    **dict.fromkeys(LANDLOCK_ATTEMPTS, "denied(EACCES)"),
    **dict.fromkeys(METADATA_ATTEMPTS, f"denied({errno.errorcode[sandbox.METADATA_ERRNO]})"),
}
SECRET_TEXT = "not for the server\n"
SECURITY_DOC = os.path.join(support.ROOT, "docs", "security.md")
MAX_SYSTEMD_EXPOSURE = 25  # systemd-analyze's --threshold counts tenths: "2.5" on its 0-10 scale
KERNEL_ABI = sandbox.kernel_abi()


def skip_without_landlock(minimum: int = 1) -> None:
    """SkipTest with one line where this kernel lacks Landlock (or the ABI the test needs)."""
    if isinstance(KERNEL_ABI, str):
        raise unittest.SkipTest(f"Landlock {KERNEL_ABI}")
    if KERNEL_ABI < minimum:
        raise unittest.SkipTest(f"Landlock ABI {KERNEL_ABI} here; TCP rules need ABI {minimum}")


def skip_without_seccomp() -> None:
    """SkipTest with one line where this kernel has no seccomp filters (its status file has no Seccomp_filters)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as handle:
            if any(line.startswith("Seccomp_filters:") for line in handle):
                return
    except OSError:
        pass
    raise unittest.SkipTest("this kernel has no seccomp filters (no Seccomp_filters in /proc/self/status)")


def skip_unless_landlock_numbers() -> None:
    """SkipTest with one line where the simulated kernel's syscalls would not even be asked for."""
    if platform.system() != "Linux" or platform.machine() not in sandbox.SYSCALLS:
        raise unittest.SkipTest(f"Landlock syscall numbers are known for Linux on {', '.join(sandbox.SYSCALLS)} only")


def shown(folder: str) -> list[str]:
    """A notes folder's entries as a user sees them: hidden entries (the store's own) left out."""
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def folder_uri(path: str) -> str:
    return main.format_file_uri(tuple(part for part in path.split("/") if part))


def file_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def user_xattrs_work(path: str) -> bool:
    """True when the file system holding `path` keeps user extended attributes (the control run needs them)."""
    with open(path, "w", encoding="utf-8"):
        pass
    try:
        os.setxattr(path, "user.check", b"1")
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
        return False
    finally:
        os.unlink(path)
    return True


def probe_results(line: str) -> dict[str, str]:
    """`probe main: read-outside=denied(EACCES) ...` as {attempt: outcome}."""
    return dict(item.split("=", 1) for item in line.split(": ", 1)[1].split())


class FakeLibc:
    """libc for a kernel reporting `abi` (or failing with `error`); records every Landlock call instead of making it."""

    def __init__(self, abi: int = 0, error: int = 0) -> None:
        self.abi = abi
        self.error = error
        self.calls: list[tuple[Any, ...]] = []

    def syscall(self, number: Any, *args: Any) -> int:
        if self.error:
            ctypes.set_errno(self.error)
            return -1
        if number.value == 444 and args[0] is None:
            self.calls.append(("version",))
            return self.abi
        if number.value == 444:
            attr = args[0]._obj
            self.calls.append(("create", attr.handled_access_fs, attr.handled_access_net, attr.scoped, args[1].value))
            return os.open(os.devnull, os.O_RDONLY)  # a descriptor for confine to close
        if number.value == 445:
            rule = args[2]._obj
            if args[1].value == sandbox.LANDLOCK_RULE_PATH_BENEATH:
                self.calls.append(("path", os.readlink(f"/proc/self/fd/{rule.parent_fd}"), rule.allowed_access))
            else:
                self.calls.append(("port", rule.port, rule.allowed_access))
            return 0
        self.calls.append(("restrict", args[0].value > 0, args[1].value))
        return 0

    def prctl(self, option: Any, *args: Any) -> int:
        self.calls.append(("prctl", option.value, args[0].value))
        return 0

    def kinds(self) -> list[str]:
        return [call[0] for call in self.calls]


class NoLandlockTests(unittest.TestCase):
    """Kernels without Landlock: nothing is changed, the reason is named, and `--sandbox require` refuses."""

    def test_a_kernel_without_the_syscalls_is_left_unconfined_and_named_enosys(self) -> None:
        libc = FakeLibc(error=errno.ENOSYS)
        status = sandbox.confine(sandbox.Plan(), libc, machine="x86_64", system="Linux")
        self.assertFalse(status.on)
        self.assertEqual(
            status.describe(), "sandbox: unavailable (this kernel has no Landlock: ENOSYS); serving unconfined"
        )
        self.assertEqual(libc.calls, [])  # no prctl, no ruleset: the process is as it was

    def test_landlock_disabled_at_boot_is_told_apart_from_a_kernel_without_it(self) -> None:
        status = sandbox.confine(sandbox.Plan(), FakeLibc(error=errno.EOPNOTSUPP), machine="aarch64", system="Linux")
        self.assertFalse(status.on)
        self.assertIn("disabled at boot: EOPNOTSUPP", status.describe())

    def test_other_systems_and_machines_make_no_syscall(self) -> None:
        libc = FakeLibc(abi=7)
        self.assertIn("Linux-only; this is Darwin", sandbox.confine(sandbox.Plan(), libc, system="Darwin").describe())
        self.assertIn(
            "for riscv64", sandbox.confine(sandbox.Plan(), libc, machine="riscv64", system="Linux").describe()
        )
        self.assertEqual(libc.calls, [])

    def test_require_on_a_kernel_without_landlock_exits_2_with_one_line_before_opening_the_store(self) -> None:
        skip_unless_landlock_numbers()
        folder = self.enterContext(tempfile.TemporaryDirectory())
        db = os.path.join(folder, "notes.db")
        env = procs.server_env(NOTES_MCP_SECRET=procs.SECRET, PYTHONPATH=PROBE_DIR, NOTES_MCP_TEST_NO_LANDLOCK="1")
        proc = procs.Process(self, ["--stdio", "--db", db, "--sandbox", "require"], env)
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        self.assertEqual(
            proc.stderr_lines,
            ["notes-mcp: sandbox: required, but unavailable (this kernel has no Landlock: ENOSYS); not serving"],
        )
        self.assertFalse(os.path.exists(db))

    def test_by_default_a_kernel_without_landlock_serves_unconfined_and_says_so(self) -> None:
        skip_unless_landlock_numbers()
        env = procs.server_env(NOTES_MCP_SECRET=procs.SECRET, PYTHONPATH=PROBE_DIR, NOTES_MCP_TEST_NO_LANDLOCK="1")
        server = procs.StdioServer(self, env=env)
        first = server.exchange(call(tps()))["result"]
        self.assertEqual(first["resultType"], "input_required")
        self.assertTrue(server.wait_for_line("sandbox: "))  # stderr is drained by its own thread
        self.assertIn(
            "notes-mcp: sandbox: unavailable (this kernel has no Landlock: ENOSYS); serving unconfined",
            server.stderr_lines,
        )

    def test_require_and_no_sandbox_cannot_be_combined(self) -> None:
        proc = procs.Process(
            self, ["--stdio", "--sandbox", "require", "--no-sandbox"], procs.server_env(NOTES_MCP_SECRET=procs.SECRET)
        )
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        self.assertIn("not allowed with argument", proc.stderr_text())


class RulesetTests(unittest.TestCase):
    """What confine asks of the kernel, per ABI version, recorded by a fake libc."""

    def setUp(self) -> None:
        folder = self.enterContext(tempfile.TemporaryDirectory())
        self.notes = os.path.join(folder, "notes")
        os.mkdir(self.notes)
        self.plan = sandbox.Plan(
            read=[("code folder", os.path.dirname(sandbox.__file__)), ("file", "/etc/absent-here")],
            write=[("notes folder", self.notes), ("device", os.devnull)],
            bind=[8765],
            connect=[5432],
        )

    def confined(self, abi: int) -> FakeLibc:
        libc = FakeLibc(abi=abi)
        sandbox.restrict(self.plan, libc, sandbox.SYSCALLS["x86_64"], abi)
        return libc

    def test_rights_a_kernel_lacks_are_masked_and_the_struct_is_the_size_it_knows(self) -> None:
        expected = {  # abi: (handled fs rights, net, scoped, struct size)
            1: ((1 << 13) - 1, 0, 0, 8),
            2: (((1 << 13) - 1) | sandbox.FS_REFER, 0, 0, 8),
            3: (((1 << 13) - 1) | sandbox.FS_REFER | sandbox.FS_TRUNCATE, 0, 0, 8),
            4: ((1 << 15) - 1, 3, 0, 16),
            5: ((1 << 16) - 1, 3, 0, 16),
            6: ((1 << 16) - 1, 3, 3, 24),
            7: ((1 << 16) - 1, 3, 3, 24),
        }
        for abi, (fs, net, scoped, size) in expected.items():
            with self.subTest(abi=abi):
                self.assertEqual(self.confined(abi).calls[0], ("create", fs, net, scoped, size))

    def test_folders_get_their_rights_files_only_file_rights_and_absent_paths_no_rule(self) -> None:
        rules = [call for call in self.confined(7).calls if call[0] == "path"]
        self.assertEqual(
            rules,
            [
                ("path", os.path.dirname(sandbox.__file__), sandbox.FS_READ_FILE | sandbox.FS_READ_DIR),
                ("path", self.notes, sandbox.WRITE),
                ("path", os.devnull, sandbox.FS_READ_FILE | sandbox.FS_WRITE_FILE | sandbox.FS_TRUNCATE),
            ],
        )
        self.assertFalse(
            sandbox.WRITE & (sandbox.FS_EXECUTE | sandbox.FS_MAKE_SYM | sandbox.FS_MAKE_SOCK | sandbox.FS_IOCTL_DEV)
        )

    def test_ports_are_ruled_only_from_abi_4_and_no_new_privs_comes_before_restrict(self) -> None:
        self.assertEqual(self.confined(3).kinds(), ["create", "path", "path", "path", "prctl", "restrict"])
        calls = self.confined(4).calls
        self.assertIn(("port", 8765, sandbox.NET_BIND_TCP), calls)
        self.assertIn(("port", 5432, sandbox.NET_CONNECT_TCP), calls)
        self.assertEqual(calls[-2:], [("prctl", sandbox.PR_SET_NO_NEW_PRIVS, 1), ("restrict", True, 0)])

    def test_a_thread_already_running_stops_confinement_before_any_rule(self) -> None:
        release = threading.Event()
        thread = threading.Thread(target=release.wait)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(release.set)
        libc = FakeLibc(abi=7)
        status = sandbox.confine(self.plan, libc, machine="x86_64", system="Linux")
        self.assertFalse(status.on)
        self.assertIn("threads already running", status.describe())
        self.assertEqual(libc.kinds(), ["version"])

    def test_the_database_url_names_the_ports_to_connect_to(self) -> None:
        endpoints = sandbox.postgres_endpoints
        self.assertEqual(endpoints("postgresql://u:pw@db1:5433,[::1]:6000/notes", {}), (["db1", "::1"], [5433, 6000]))
        self.assertEqual(endpoints("postgresql:///notes?host=%2Frun%2Fpg&port=5444", {}), (["/run/pg"], [5444]))
        self.assertEqual(endpoints("postgresql://db/notes", {}), (["db"], [5432]))
        self.assertEqual(endpoints("postgresql:///notes", {}), (["/var/run/postgresql", "/tmp"], [5432]))
        self.assertEqual(
            endpoints("postgresql:///notes", {"PGPORT": "6543", "PGHOST": "pg.internal"}), (["pg.internal"], [6543])
        )

    def test_the_state_database_is_granted_as_its_own_files_and_its_folder_not_at_all(self) -> None:
        db = os.path.join(os.path.dirname(self.notes), "notes.db")
        for path in sandbox.state_files(db, search_index=True):
            with open(path, "w", encoding="utf-8"):
                pass
        plan = sandbox.server_plan(support.CODE, [self.notes], db, None, None, [])
        self.assertEqual(
            plan.write,
            [
                ("device", os.devnull),
                ("notes folder", self.notes),
                ("state file", db),
                ("state file", db + "-wal"),
                ("state file", db + "-shm"),
                # the folder store's text index beside it (text_index.index_path), as three files of its own
                ("state file", db + "-search"),
                ("state file", db + "-search-wal"),
                ("state file", db + "-search-shm"),
            ],
        )
        self.assertNotIn(os.path.dirname(db), [path for _, path in plan.read + plan.write])
        libc = FakeLibc(abi=7)
        sandbox.restrict(plan, libc, sandbox.SYSCALLS["x86_64"], 7)
        file_rights = sandbox.FS_READ_FILE | sandbox.FS_WRITE_FILE | sandbox.FS_TRUNCATE
        self.assertEqual(
            [call for call in libc.calls if call[0] == "path" and call[1].startswith(db)],
            [("path", p, file_rights) for p in sandbox.state_files(db, search_index=True)],
        )
        self.assertIn("6 state files", sandbox.summary(plan, 7))
        self.assertEqual(
            sandbox.state_files(db), [db, db + "-wal", db + "-shm"]
        )  # without notes folders: no text index
        self.assertEqual(text_index.index_path(db), db + sandbox.SEARCH_INDEX_SUFFIX)

    def test_a_rule_the_kernel_refuses_leaves_the_process_unconfined_and_names_the_call(self) -> None:
        # In a fresh single-threaded process (confine refuses in this one, which runs threads).
        script = (
            "import ctypes, errno, sys\n"
            f"sys.path[:0] = [{support.CODE!r}, {os.path.dirname(os.path.abspath(__file__))!r}]\n"
            "import sandbox, test_sandbox\n"
            "class Refusing(test_sandbox.FakeLibc):\n"
            "    def syscall(self, number, *args):\n"
            "        if number.value == 445:\n"
            "            ctypes.set_errno(errno.EINVAL)\n"
            "            return -1\n"
            "        return super().syscall(number, *args)\n"
            "libc = Refusing(abi=7)\n"
            "status = sandbox.confine(sandbox.Plan(read=[('code folder', sys.path[0])]), libc, machine='x86_64', "
            "system='Linux')\n"
            "print(status.describe()); print([call[0] for call in libc.calls])\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=procs.GUARD)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(
            done.stdout.splitlines(),
            ["sandbox: not applied (landlock_add_rule failed: EINVAL); serving unconfined", "['version', 'create']"],
        )


# The kernel's BPF opcodes and arch tokens, spelled out here independently of code/sandbox.py.
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x00 | 0x00 | 0x20, 0x05 | 0x10, 0x05 | 0x30, 0x06
ARCH_TOKENS = {"x86_64": 0x80000000 | 0x40000000 | 62, "aarch64": 0x80000000 | 0x40000000 | 183, "i386": 0x40000000 | 3}
SYSCALL_HEADERS = {
    "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
    "aarch64": "/usr/include/asm-generic/unistd.h",
}


def run_filter(program: list[tuple[int, int, int, int]], arch: int, number: int) -> int:
    """What `program` returns for syscall `number` made through `arch`: a BPF interpreter for the four instructions it
    may use."""
    data = {0: number, 4: arch}  # struct seccomp_data: nr, then arch
    pc = accumulator = 0
    while True:
        code, jt, jf, k = program[pc]
        if code == BPF_LD_W_ABS:
            accumulator, pc = data[k], pc + 1
        elif code in (BPF_JEQ_K, BPF_JGE_K):
            taken = accumulator == k if code == BPF_JEQ_K else accumulator >= k
            pc += 1 + (jt if taken else jf)
        elif code == BPF_RET_K:
            return k
        else:
            raise AssertionError(f"instruction {code:#x} at {pc}")


class MetadataFilterTests(unittest.TestCase):
    """The seccomp program that refuses chmod, chown, utime and xattr writes, read by an interpreter, and its
    installation."""

    def test_every_metadata_write_answers_eperm_and_every_other_call_passes(self) -> None:
        for machine, calls in sandbox.METADATA_SYSCALLS.items():
            program = sandbox.metadata_filter(machine)
            with self.subTest(machine=machine):
                refused = {
                    number for number in range(600) if run_filter(program, ARCH_TOKENS[machine], number) != 0x7FFF0000
                }
                self.assertEqual(refused, set(calls.values()))
                self.assertEqual(
                    {run_filter(program, ARCH_TOKENS[machine], number) for number in refused},
                    {0x00050000 | errno.EPERM},
                )
        # What the stores need once confined passes: inotify_add_watch, the Landlock calls, openat, fsync.
        for machine, numbers in {"x86_64": (254, 444, 446, 257, 74), "aarch64": (27, 444, 446, 56, 82)}.items():
            for number in numbers:
                self.assertEqual(run_filter(sandbox.metadata_filter(machine), ARCH_TOKENS[machine], number), 0x7FFF0000)

    def test_a_call_through_another_abi_kills_the_process(self) -> None:
        x86, arm = sandbox.metadata_filter("x86_64"), sandbox.metadata_filter("aarch64")
        kill = 0x80000000
        self.assertEqual(run_filter(x86, ARCH_TOKENS["i386"], 15), kill)  # chmod through int 0x80
        self.assertEqual(run_filter(x86, ARCH_TOKENS["x86_64"], 0x40000000 | 90), kill)  # chmod through x32
        self.assertEqual(
            run_filter(x86, ARCH_TOKENS["x86_64"], 0x40000000 - 1), 0x7FFF0000
        )  # just below x32: an ordinary number
        self.assertEqual(run_filter(arm, ARCH_TOKENS["x86_64"], 1), kill)

    def test_the_syscall_numbers_match_this_systems_headers_where_it_has_them(self) -> None:
        checked = 0
        for machine, header in SYSCALL_HEADERS.items():
            if not os.path.exists(header):
                continue
            with open(header, encoding="utf-8") as handle:
                defined = {
                    name: int(number)
                    for name, number in re.findall(r"^#define __NR_(\w+)\s+(\d+)$", handle.read(), re.MULTILINE)
                }
            for name, number in sandbox.METADATA_SYSCALLS[machine].items():
                if name in defined:  # headers older than the kernel lack fchmodat2 and the *xattrat calls
                    self.assertEqual((name, number), (name, defined[name]))
                    checked += 1
        if not checked:
            self.skipTest("no Linux syscall headers here (/usr/include/asm-generic/unistd.h)")

    def confine_in_a_fresh_process(self, refuse_seccomp: bool) -> list[str]:
        """confine() with a recording fake libc in a single-threaded process: its start-up line, then the calls made."""
        script = (
            "import ctypes, errno, sys\n"
            f"sys.path[:0] = [{support.CODE!r}, {os.path.dirname(os.path.abspath(__file__))!r}]\n"
            "import sandbox, test_sandbox\n"
            "class Libc(test_sandbox.FakeLibc):\n"
            "    def prctl(self, option, *args):\n"
            f"        if {refuse_seccomp!r} and option.value == sandbox.PR_SET_SECCOMP:\n"
            "            ctypes.set_errno(errno.EINVAL)\n"
            "            return -1\n"
            "        return super().prctl(option, *args)\n"
            "libc = Libc(abi=7)\n"
            f"status = sandbox.confine(sandbox.Plan(read=[('code folder', {support.CODE!r})]), libc, "
            "machine='x86_64', system='Linux')\n"
            "print(status.describe()); print(status.complete); print([call[:2] for call in libc.calls])\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=procs.GUARD)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def test_the_filter_follows_landlock_and_a_refused_filter_is_named_without_undoing_landlock(self) -> None:
        line, complete, calls = self.confine_in_a_fresh_process(refuse_seccomp=False)
        self.assertIn("; no chmod, chown, utime or xattr writes;", line)
        self.assertEqual(complete, "True")
        self.assertEqual(
            calls,
            str(
                [
                    ("version",),
                    ("create", 65535),
                    ("path", support.CODE),
                    ("prctl", 38),
                    ("restrict", True),
                    ("prctl", 22),
                ]
            ),
        )
        line, complete, _ = self.confine_in_a_fresh_process(refuse_seccomp=True)
        self.assertTrue(line.startswith("sandbox: on (Landlock ABI 7): "), line)
        self.assertIn(
            "; chmod, chown, utime and xattr writes NOT filtered (prctl(PR_SET_SECCOMP) failed: EINVAL);", line
        )
        self.assertEqual(complete, "False")


class ImportPathTests(unittest.TestCase):
    """Nothing Python imports is left writable: notes folders on the import path are refused, the database granted file
    by file."""

    def setUp(self) -> None:
        self.top = os.path.realpath(self.enterContext(tempfile.TemporaryDirectory(prefix="import-path-")))
        self.notes = os.path.join(self.top, "project", "Notes")
        os.makedirs(self.notes)
        with open(os.path.join(self.notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        self.state = os.path.join(self.top, "state")

    def start(self, *args: str, **env: str) -> procs.Process:
        proc = procs.Process(
            self, ["--stdio", *args], procs.server_env(NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=self.state, **env)
        )
        proc.wait()
        return proc

    def test_notes_folders_and_databases_are_compared_with_import_folders_by_path_components(self) -> None:
        lib = os.path.join(self.top, "lib")
        bundle = os.path.join(self.top, "bundle.zip")
        roots = [lib, bundle]
        folders = {
            lib: "is",
            os.path.join(lib, "pkg"): "lies inside",
            self.top: "holds",
            lib + "-notes": None,
            self.notes: None,
        }
        for folder, relation in folders.items():
            with self.subTest(folder=folder):
                line = sandbox.unsafe_writes([folder], None, roots)
                if relation is None:
                    self.assertIsNone(line)
                else:
                    named = "is" if relation == "is" else f"{relation} {lib},"
                    self.assertTrue(
                        line
                        and line.startswith(f"sandbox: notes folder {folder} {named} a folder Python imports from;"),
                        line,
                    )
        databases = {
            os.path.join(lib, "store.py"): True,  # `import store` would read it
            os.path.join(lib, "sub", "hook.pth"): True,
            bundle: True,  # a zip archive on sys.path
            os.path.join(lib, "notes.db"): False,  # no name Python imports
            os.path.join(self.top, "store.py"): False,  # not on the import path
        }
        for database, refused in databases.items():
            with self.subTest(database=database):
                line = sandbox.unsafe_writes([], database, roots)
                self.assertEqual(line is not None, refused, line)
                if refused and line is not None:
                    self.assertTrue(
                        line.startswith(f"sandbox: database file {database} is on Python's import path"), line
                    )

    def test_a_notes_folder_that_is_holds_or_lies_inside_an_import_folder_is_refused_before_anything_is_created(
        self,
    ) -> None:
        cases = {  # (notes folder, PYTHONPATH): (relation, the import folder named)
            (self.notes, self.notes): ("is", self.notes),
            (self.notes, os.path.join(self.notes, "lib")): ("holds", os.path.join(self.notes, "lib")),
            (self.notes, os.path.dirname(self.notes)): ("lies inside", os.path.dirname(self.notes)),
            (support.ROOT, ""): ("holds", support.CODE),  # `--notes-dir .` in the checkout
        }
        for (folder, path), (relation, root) in cases.items():
            with self.subTest(folder=folder, path=path):
                proc = self.start("--notes-dir", folder, PYTHONPATH=path)
                self.assertEqual(proc.wait(), serve.EXIT_USAGE)
                self.assertEqual(len(proc.stderr_lines), 1, proc.stderr_text())
                named = "is" if relation == "is" else f"{relation} {os.path.realpath(root)},"
                self.assertTrue(
                    proc.stderr_lines[0].startswith(
                        f"notes-mcp: sandbox: notes folder {os.path.realpath(folder)} {named} a folder Python "
                        "imports from; "
                    ),
                    proc.stderr_lines[0],
                )
                self.assertFalse(os.path.exists(self.state))  # no confirmation database created
        self.assertEqual(os.listdir(self.notes), ["tps.md"])

    def test_without_landlock_the_same_folder_is_refused_and_with_no_sandbox_it_is_served(self) -> None:
        skip_unless_landlock_numbers()
        proc = self.start(
            "--notes-dir",
            self.notes,
            PYTHONPATH=os.pathsep.join([PROBE_DIR, self.notes]),
            NOTES_MCP_TEST_NO_LANDLOCK="1",
        )
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        self.assertIn(" is ", proc.stderr_text())
        proc = self.start("--notes-dir", self.notes, "--no-sandbox", PYTHONPATH=self.notes)
        self.assertEqual(proc.wait(), 0, proc.stderr_text())  # stdin at its end: served, then a clean exit
        self.assertIn("notes-mcp: sandbox: off (--no-sandbox); serving unconfined", proc.stderr_lines)

    def test_a_database_python_would_import_is_refused_before_it_is_created(self) -> None:
        lib = os.path.join(self.top, "lib")
        os.mkdir(lib)
        proc = self.start("--db", os.path.join(lib, "store.py"), PYTHONPATH=lib)
        self.assertEqual(proc.wait(), serve.EXIT_USAGE)
        self.assertEqual(len(proc.stderr_lines), 1, proc.stderr_text())
        self.assertIn(
            f"sandbox: database file {os.path.join(lib, 'store.py')} is on Python's import path", proc.stderr_lines[0]
        )
        self.assertEqual(os.listdir(lib), [])


class CompromisedServerTests(unittest.TestCase):
    """Code running inside the server after start-up (sitecustomize, tests/helpers/sandbox_probe) tries to escape."""

    def setUp(self) -> None:
        # On a disk: the control run sets a user extended attribute, which this kernel's tmpfs does not keep.
        folder = self.enterContext(tempfile.TemporaryDirectory(prefix="sandbox-", dir=support.DISK))
        self.notes = os.path.join(folder, "Notes")
        self.outside = os.path.join(folder, "outside")
        os.makedirs(self.notes)
        os.makedirs(self.outside)
        for name, text in (("tps.md", "# TPS report\n"), ("list.md", "# Shopping\n")):
            with open(os.path.join(self.notes, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        self.secret = os.path.join(self.outside, "secret.txt")
        with open(self.secret, "w", encoding="utf-8") as handle:
            handle.write(SECRET_TEXT)
        os.chmod(self.secret, 0o600)
        self.secret_before = os.stat(self.secret)
        self.xattrs = user_xattrs_work(os.path.join(folder, "xattr-check"))
        self.link = os.path.join(self.notes, "escape")
        os.symlink(self.secret, self.link)
        # The server runs from a checkout of its own with its database in the checkout's top
        # folder, which is also on PYTHONPATH: the layout that once left code/ writable.
        self.checkout = os.path.join(folder, "checkout")
        self.code = os.path.join(self.checkout, "code")
        # With its bytecode: the copy's modules are the same files (mtimes kept), so each server loads them
        # instead of compiling every module from source again (a sandboxed one cannot write __pycache__).
        shutil.copytree(support.CODE, self.code)
        self.serve = os.path.join(self.code, "serve.py")
        self.code_before = {
            name: file_bytes(os.path.join(self.code, name)) for name in os.listdir(self.code) if name.endswith(".py")
        }
        self.args = ["--notes-dir", self.notes, "--db", os.path.join(self.checkout, "notes.db")]
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        spec = {
            "secret": self.secret, "outside": self.outside, "link": self.link, "port": listener.getsockname()[1],
            "code": self.code, "state": self.checkout,
        }  # fmt: skip
        self.env = procs.server_env(
            NOTES_MCP_TOKEN=procs.TOKEN,
            NOTES_MCP_SECRET=procs.SECRET,
            XDG_STATE_HOME=os.path.join(folder, "state"),
            PYTHONPATH=os.pathsep.join([PROBE_DIR, self.checkout]),
            NOTES_MCP_TEST_PROBE=json.dumps(spec),
        )

    def probe_line(self, server: procs.Process, where: str) -> dict[str, str]:
        prefix = f"probe {where}: "
        self.assertTrue(server.wait_for_line(prefix), server.stderr_text())
        return probe_results(next(line for line in server.stderr_lines if line.startswith(prefix)))

    def http_probe(self, *flags: str) -> tuple[procs.HttpServer, dict[str, str], dict[str, str]]:
        """Serve the notes folder over HTTP, probe the main thread and a worker, then delete tps.md; the probes'
        results."""
        server = procs.HttpServer(self, *self.args, *flags, env=self.env, serve=self.serve)
        # The sandbox line ends the start-up block: signalled before it, the probe could
        # print in the middle of a start-up line and its own line would not start it.
        self.assertTrue(server.wait_for_line("sandbox: "), server.stderr_text())
        os.kill(server.proc.pid, signal.SIGUSR1)
        in_main = self.probe_line(server, "main")
        args = tps(workspace=folder_uri(self.notes))
        conn = server.connect(self)
        # The first tools/call waits on the folder store, so the engine hands it to a worker thread.
        _, _, body = procs.post(conn, call(args))
        first = json.loads(body)["result"]
        in_worker = self.probe_line(server, "worker")
        retry = call(args, id=2, requestState=first["requestState"], inputResponses=accept("tps.md"))
        _, _, body = procs.post(conn, retry)
        self.assertEqual(json.loads(body)["result"]["structuredContent"], {"deleted": True, "noteId": "tps.md"})
        self.assertEqual(shown(self.notes), ["escape", "list.md"])
        return server, in_main, in_worker

    def assert_nothing_changed(self) -> None:
        """The code, the checkout's top folder and the file outside are as setUp left them."""
        self.assertEqual(
            {name: file_bytes(os.path.join(self.code, name)) for name in self.code_before}, self.code_before
        )
        self.assertNotIn("sitecustomize.py", os.listdir(self.code))
        # The database's own files, and nothing created beside them.
        self.assertEqual(
            sorted(os.listdir(self.checkout)),
            [
                "code",
                "notes.db",
                "notes.db-search",
                "notes.db-search-shm",
                "notes.db-search-wal",
                "notes.db-shm",
                "notes.db-wal",
            ],
        )
        self.assertEqual(os.listdir(self.outside), ["secret.txt"])  # nothing written outside
        with open(self.secret, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), SECRET_TEXT)
        after = os.stat(self.secret)
        self.assertEqual((stat.S_IMODE(after.st_mode), after.st_mtime_ns), (0o600, self.secret_before.st_mtime_ns))
        self.assertEqual(os.listxattr(self.secret), [])

    def test_inside_the_sandbox_every_escape_fails_in_the_main_thread_and_a_worker_and_the_deletion_completes(
        self,
    ) -> None:
        skip_without_landlock(sandbox.NET_FROM_ABI)
        skip_without_seccomp()
        server, in_main, in_worker = self.http_probe()
        self.assertEqual(in_main, CONFINED)
        self.assertEqual(in_worker, CONFINED)
        line = next(
            line
            for line in server.stderr_lines
            if line.startswith(f"notes-mcp: sandbox: on (Landlock ABI {KERNEL_ABI}): ")
        )
        self.assertIn("read-write 1 device, 1 notes folder, 6 state files;", line)
        self.assertIn("; no chmod, chown, utime or xattr writes;", line)
        server.proc.terminate()
        self.assertEqual(server.wait(), 0)  # graceful shutdown works inside the sandbox
        self.assertNotIn("Traceback", server.stderr_text())
        self.assert_nothing_changed()

    def test_with_no_sandbox_the_same_probe_escapes_so_the_test_above_can_fail(self) -> None:
        server, in_main, in_worker = self.http_probe("--no-sandbox")
        allowed = dict.fromkeys(ATTEMPTS, "allowed")
        if not self.xattrs:
            allowed["setxattr-outside"] = "denied(EOPNOTSUPP)"  # this file system keeps no user xattrs
        self.assertEqual(in_main, allowed)
        self.assertEqual(in_worker, allowed)
        self.assertIn("notes-mcp: sandbox: off (--no-sandbox); serving unconfined", server.stderr_lines)
        self.assertEqual(sorted(os.listdir(self.outside)), ["secret.txt", "written-by-main", "written-by-worker"])
        appended = "# appended by the probe in main\n# appended by the probe in worker\n"
        self.assertEqual(file_bytes(self.serve), self.code_before["serve.py"] + appended.encode())
        for folder in (self.code, self.checkout):
            self.assertEqual(file_bytes(os.path.join(folder, "sitecustomize.py")), appended.encode())
        after = os.stat(self.secret)
        self.assertEqual((stat.S_IMODE(after.st_mode), after.st_mtime_ns), (0o666, 0))
        self.assertEqual(os.listxattr(self.secret), ["user.probe"] if self.xattrs else [])

    def test_every_serving_mode_is_confined_so_no_thread_started_before_the_sandbox(self) -> None:
        # A thread started before confinement (a store's background thread, say) would make
        # confine refuse; in auto mode the server would then serve unconfined, so say it here.
        skip_without_landlock()
        modes = {
            "stdio": procs.StdioServer(self, "--notes-dir", self.notes, env=self.env),
            "stdio --publish": procs.StdioServer(self, "--notes-dir", self.notes, "--publish", env=self.env),
            "http --publish": procs.HttpServer(self, "--notes-dir", self.notes, "--publish", env=self.env),
        }
        for mode, server in modes.items():
            with self.subTest(mode=mode):
                self.assertTrue(server.wait_for_line("sandbox: "), server.stderr_text())
                self.assertIn("notes-mcp: sandbox: on (Landlock ABI", server.stderr_text())

    def test_the_legacy_adapter_is_imported_after_confinement_and_serves(self) -> None:
        skip_without_landlock()
        server = procs.StdioServer(self, "--notes-dir", self.notes, env=self.env)
        self.assertTrue(server.wait_for_line("sandbox: on"), server.stderr_text())
        self.assertEqual(
            legacy_client.LegacyClient(server).initialize()["protocolVersion"], legacy.LATEST_LEGACY_VERSION
        )
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        self.assertNotIn("Traceback", server.stderr_text())

    def test_on_stdio_the_sandbox_binds_no_port_and_still_deletes(self) -> None:
        skip_without_landlock(sandbox.NET_FROM_ABI)
        skip_without_seccomp()
        server = procs.StdioServer(self, *self.args, env=self.env, serve=self.serve)
        args = tps(workspace=folder_uri(self.notes))
        first = server.exchange(call(args))["result"]  # served: the sandbox is in place
        os.kill(server.proc.pid, signal.SIGUSR1)
        self.assertEqual(self.probe_line(server, "main"), CONFINED)
        self.assertIn("TCP bind none, connect none", server.stderr_text())
        done = server.exchange(call(args, id=2, requestState=first["requestState"], inputResponses=accept("tps.md")))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "tps.md"})
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        self.assert_nothing_changed()

    def test_a_kernel_refusing_the_metadata_filter_is_named_and_require_then_refuses_to_serve(self) -> None:
        skip_without_landlock()
        env = {**self.env, "NOTES_MCP_TEST_NO_SECCOMP": "1"}
        server = procs.StdioServer(self, *self.args, env=env, serve=self.serve)
        self.assertTrue(server.wait_for_line("sandbox: on"), server.stderr_text())
        self.assertIn(
            "; chmod, chown, utime and xattr writes NOT filtered (prctl(PR_SET_SECCOMP) failed: EINVAL);",
            server.stderr_text(),
        )
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        required = procs.StdioServer(self, *self.args, "--sandbox", "require", env=env, serve=self.serve)
        self.assertEqual(required.wait(), serve.EXIT_USAGE)
        self.assertEqual(
            [line for line in required.stderr_lines if "sandbox" in line],
            [
                "notes-mcp: sandbox: required, but the metadata filter failed: prctl(PR_SET_SECCOMP) failed: EINVAL; "
                "not serving"
            ],
        )
        self.assertEqual(shown(self.notes), ["escape", "list.md", "tps.md"])


class SqliteAndMountsTests(unittest.TestCase):
    """SQLite's -wal and -shm beside the database, and a notes folder on another mount, inside the sandbox."""

    def test_notes_on_another_mount_and_confirmations_in_sqlite_wal_survive_confinement_and_shutdown(self) -> None:
        skip_without_landlock()
        state = self.enterContext(tempfile.TemporaryDirectory(prefix="sandbox-state-", dir=support.DISK))
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(state).st_dev:
            self.skipTest("no /dev/shm mount apart from the temporary folder's")
        notes = self.enterContext(tempfile.TemporaryDirectory(prefix="sandbox-notes-", dir="/dev/shm"))
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        db = os.path.join(state, "confirmations.db")
        config = procs.write_config(self, {
            "principals": {"alice": {"token": procs.TOKEN, "workspaces": [], "notesDirs": [notes]}},
            "stdioPrincipal": "alice",
            "db": db,
        })  # fmt: skip
        server = procs.StdioServer(self, "--config", config, env=procs.server_env(NOTES_MCP_SECRET=procs.SECRET))
        args = tps(workspace=folder_uri(notes))
        first = server.exchange(call(args))["result"]
        done = server.exchange(call(args, id=2, requestState=first["requestState"], inputResponses=accept("tps.md")))
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "tps.md"})
        self.assertEqual(shown(notes), [])
        self.assertTrue(os.path.exists(db + "-wal") and os.path.exists(db + "-shm"))  # written inside the sandbox
        self.assertTrue(server.wait_for_line("sandbox: "))  # stderr is drained by its own thread
        self.assertIn("read-write 1 device, 1 notes folder, 6 state files", server.stderr_text())
        server.close_stdin()
        self.assertEqual(server.wait(), 0)
        self.assertNotIn("Traceback", server.stderr_text())
        # The folder is not writable, so the last close could not remove the -wal and -shm,
        # and nothing else was created; it checkpointed and emptied the log: the database
        # file alone (a naive backup) holds the deletion.
        self.assertEqual(
            sorted(os.listdir(state)),
            [
                "confirmations.db",
                "confirmations.db-search",
                "confirmations.db-search-shm",
                "confirmations.db-search-wal",
                "confirmations.db-shm",
                "confirmations.db-wal",
            ],
        )
        self.assertEqual(os.path.getsize(db + "-wal"), 0)  # emptied: no old page of the deleted note left
        copy = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "copy.db")
        shutil.copyfile(db, copy)
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            self.assertEqual(conn.execute("SELECT outcome, note_id FROM audit").fetchall(), [("deleted", "tps.md")])

    def test_a_sort_that_outgrows_the_cache_works_inside_the_sandbox(self) -> None:
        skip_without_landlock()
        state = self.enterContext(tempfile.TemporaryDirectory(prefix="sandbox-sort-"))
        # In a fresh single-threaded process: confinement lasts as long as the process.
        script = (
            "import sys\n"
            f"sys.path.insert(0, {support.CODE!r})\n"
            "import sandbox, sqlite_store\n"
            f"db = {os.path.join(state, 'sort.db')!r}\n"
            "conn = sqlite_store._connect(db, 1000)\n"
            "conn.execute('CREATE TABLE t (a TEXT)')\n"
            'conn.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) "\n'
            "             \"INSERT INTO t SELECT printf('%.200d', i) FROM n\")\n"
            f"status = sandbox.confine(sandbox.server_plan({support.CODE!r}, [], db, None, None, []))\n"
            "conn.execute('PRAGMA cache_size = 1')  # every sort spills\n"
            "print(status.on, len(conn.execute('SELECT a FROM t ORDER BY a DESC').fetchall()))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=procs.GUARD)
        self.assertEqual((done.stdout, done.stderr), ("True 5000\n", ""))
        self.assertEqual(os.listdir(state), ["sort.db"])


def free_port() -> int:
    """A TCP port nothing listens on right now (for the PostgreSQL cluster's TCP listener)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresInsideTests(unittest.TestCase):
    """A confined server on PostgreSQL, over the Unix socket and over TCP, reconnecting after its connection is cut."""

    cluster: postgres_cluster.Cluster

    @classmethod
    def setUpClass(cls) -> None:
        skip_without_landlock(sandbox.NET_FROM_ABI)
        cls.cluster = postgres_cluster.start_or_skip(tcp_port=free_port())
        cls.addClassCleanup(cls.cluster.destroy)

    def backends(self, database: str) -> set[int]:
        with self.cluster.admin() as admin:
            rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
        return {row[0] for row in rows}

    def deletes_and_reconnects(self, url: str, database: str) -> None:
        server = procs.HttpServer(self, "--db", url)
        # The sandbox line ends the start-up block, after the "listening on" line the start waits for.
        self.assertTrue(server.wait_for_line("sandbox: on"), server.stderr_text())
        self.assertIn(
            f"connect {self.cluster.tcp_port}", next(line for line in server.stderr_lines if "sandbox: on" in line)
        )
        conn = server.connect(self)
        first = json.loads(procs.post(conn, call(tps()))[2])["result"]
        before = self.backends(database)
        with self.cluster.admin() as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (database,))
        retry = call(tps(), id=2, requestState=first["requestState"], inputResponses=accept("note-14"))
        # The first call after the cut may meet the dead connection (isError, nothing consumed); the next reconnects.
        for _ in range(2):
            result = json.loads(procs.post(conn, retry)[2])["result"]
            if not result.get("isError"):
                break
        self.assertEqual(result["structuredContent"], {"deleted": True, "noteId": "note-14"})
        after = self.backends(database)
        self.assertTrue(after and not after & before, (before, after))  # a new connection, made inside the sandbox
        self.assertNotIn("Traceback", server.stderr_text())

    def test_over_the_unix_socket(self) -> None:
        url = self.cluster.new_database()
        self.deletes_and_reconnects(url, url.split("?")[0].rsplit("/", 1)[1])

    def test_over_tcp(self) -> None:
        database = self.cluster.new_database().split("?")[0].rsplit("/", 1)[1]
        self.deletes_and_reconnects(self.cluster.tcp_url(database), database)


def recipe(kind: str, first: str) -> str:
    """The body of docs/security.md's ```kind block whose text starts with `first`."""
    with open(SECURITY_DOC, encoding="utf-8") as handle:
        text = handle.read()
    for body in re.findall(r"^```" + kind + r"\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        if body.startswith(first):
            return body
    raise AssertionError(f"docs/security.md has no ```{kind} block starting with {first!r}")


def descendant_running(pid: int, program: str) -> int:
    """The pid of a descendant of `pid` running `program` (bwrap runs the server as a grandchild)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    for child, parent in parents.items():
        ancestor = parent
        while ancestor not in (pid, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == pid:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as handle:
                    if handle.read().split(b"\0")[0] == os.fsencode(program):
                        return child
            except OSError:
                continue
    raise AssertionError(f"no process under {pid} runs {program}")


class OuterLayerTests(unittest.TestCase):
    """The operator recipes of docs/security.md: the bwrap command line is started, the systemd unit checked."""

    def test_the_bwrap_command_line_serves_a_deletion_and_the_probe_inside_sees_nothing_outside(self) -> None:
        if shutil.which("bwrap") is None:
            self.skipTest("bwrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
        skip_without_landlock(sandbox.NET_FROM_ABI)  # the recipe says --sandbox require
        folder = self.enterContext(tempfile.TemporaryDirectory(prefix="bwrap-"))
        notes, state, outside = (os.path.join(folder, name) for name in ("notes", "state", "outside"))
        for path in (notes, state, outside):
            os.mkdir(path)
        with open(os.path.join(notes, "tps.md"), "w", encoding="utf-8") as handle:
            handle.write("# TPS report\n")
        secret = os.path.join(outside, "secret.txt")
        with open(secret, "w", encoding="utf-8") as handle:
            handle.write(SECRET_TEXT)
        os.symlink(secret, os.path.join(notes, "escape"))
        listener = self.enterContext(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        spec = {
            "secret": secret, "outside": outside, "link": "/data/notes/escape", "port": listener.getsockname()[1],
            "code": "/app/code", "state": "/data/state/notes-mcp",
        }  # fmt: skip
        # The documented command, plus (test only) the probe's folder bound in and put on PYTHONPATH.
        command = recipe("sh", "bwrap ").replace(
            '"$PYTHON" ',
            '--ro-bind "$PROBE" /probe --setenv PYTHONPATH /probe --setenv NOTES_MCP_TEST_PROBE "$PROBE_SPEC" '
            '"$PYTHON" ',
            1,
        )
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "APP": support.ROOT,
            "NOTES": notes,
            "STATE": state,
            "PYTHON": os.path.realpath(sys.executable),
            "PYTHON_PREFIX": sys.base_prefix,
            "NOTES_MCP_SECRET": procs.SECRET,
            "PROBE": PROBE_DIR,
            "PROBE_SPEC": json.dumps(spec),
        }
        proc = subprocess.Popen(
            ["sh", "-c", "exec " + command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        guard = threading.Timer(procs.GUARD, proc.kill)  # a failure guard only: a hung server must not hang the suite
        guard.start()
        self.addCleanup(guard.cancel)

        def exchange(message: dict[str, Any]) -> dict[str, Any]:
            proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            return json.loads(proc.stdout.readline())  # type: ignore[union-attr]

        args = tps(workspace="file:///data/notes")
        first = exchange(call(args))["result"]
        os.kill(descendant_running(proc.pid, env["PYTHON"]), signal.SIGUSR1)
        done = exchange(call(args, id=2, requestState=first["requestState"], inputResponses=accept("tps.md")))
        proc.stdin.close()  # type: ignore[union-attr]
        stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
        self.assertEqual(proc.wait(), 0, stderr)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
        self.assertEqual(done["result"]["structuredContent"], {"deleted": True, "noteId": "tps.md"})
        self.assertEqual(shown(notes), ["escape"])
        self.assertIn("notes-mcp: sandbox: on (Landlock ABI", stderr)
        results = probe_results(next(line for line in stderr.splitlines() if line.startswith("probe main: ")))
        self.assertEqual(set(results), set(ATTEMPTS))
        self.assertNotIn("allowed", results.values())
        # Outside the bound folders nothing even exists for the process: the outer layer alone hides it.
        self.assertEqual(results["read-outside"], "denied(ENOENT)")
        self.assertEqual(results["symlink-out"], "denied(ENOENT)")
        self.assertEqual(os.listdir(outside), ["secret.txt"])

    def test_the_systemd_unit_verifies_and_its_exposure_is_at_most_2_5(self) -> None:
        tool = shutil.which("systemd-analyze")
        if tool is None:
            self.skipTest("systemd-analyze is not installed")
        folder = self.enterContext(tempfile.TemporaryDirectory(prefix="unit-"))
        unit = os.path.join(folder, "notes-mcp.service")
        with open(unit, "w", encoding="utf-8") as handle:
            handle.write(recipe("ini", "[Unit]"))
        verify = subprocess.run([tool, "verify", unit], capture_output=True, text=True, timeout=procs.GUARD)
        self.assertEqual((verify.returncode, verify.stderr), (0, ""))
        security = subprocess.run(
            [tool, "security", "--offline=true", f"--threshold={MAX_SYSTEMD_EXPOSURE}", unit],
            capture_output=True,
            text=True,
            timeout=procs.GUARD,
        )
        self.assertEqual(security.returncode, 0, security.stdout[-500:] + security.stderr)
        self.assertIn("Overall exposure level for notes-mcp.service", security.stdout)
        self.assertIn("✓ NoNewPrivileges=", security.stdout)


if __name__ == "__main__":
    unittest.main()
