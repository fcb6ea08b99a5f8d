"""A confirmed update of a folder note keeps its mode, owner, group and extended attributes, or is refused saying why;
sandbox on and off.

The new version is created with the note's own mode in the open call, so no chmod is
needed; what the umask, the owner or the sandbox's filter would change is refused with
one line and nothing changed. The matrix (note x sandbox -> result) is in docs/tools.md.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import tempfile
import unittest
from typing import Any
from unittest import mock

from helpers import procs, support

import folder_bodies
import main
import notes_tools
import sandbox
from test_notes_tools import accept, tools_call

OTHER_ID = 12345  # a user and a group the server does not run as
TEXT = "# {name}\nfirst\n"
NO_XATTRS = "this file system keeps no user extended attributes"
BASIC = ("private", "readonly", "plain", "group", "foreign")
NEW = "# {name}\nsecond\n"


def xattrs_work(folder: str) -> bool:
    """True when the file system holding `folder` keeps user extended attributes."""
    probe = os.path.join(folder, ".xattr-probe")
    with open(probe, "w", encoding="utf-8"):
        pass
    try:
        os.setxattr(probe, "user.probe", b"1")
    except OSError as exc:
        if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        return False
    finally:
        os.unlink(probe)
    return True


def state(path: str) -> tuple[int, int, int, bytes, dict[str, bytes]]:
    """(mode, owner, group, bytes, user extended attributes) of a file."""
    info = os.lstat(path)
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        names = [n for n in os.listxattr(path) if n.startswith("user.")]
    except OSError:
        names = []
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, data, {n: os.getxattr(path, n) for n in names}


class Notes:
    """A notes folder holding one note per case: its mode, its owner and group, an extended attribute."""

    CASES = {  # name -> (mode, uid or None for the server's, gid or None, xattr)
        "private": (0o600, None, None, False),
        "readonly": (0o444, None, None, False),
        "plain": (0o644, None, None, False),
        "group": (0o640, None, OTHER_ID, False),
        "foreign": (0o644, OTHER_ID, None, False),
        "tagged": (0o644, None, None, True),
        "umask": (0o644, None, None, False),  # updated by a server started with umask 077
    }

    def __init__(self, test: Any, cases: tuple[str, ...], shared: bool = False) -> None:
        """The folder with `cases`, removed at `test`'s clean-up; a `shared` one (a class's) leaves out the note with an
        extended attribute where the file system keeps none (its tests skip), where a test's own skips the test."""
        tmp = tempfile.TemporaryDirectory(prefix="md-perm-", dir=support.DISK)  # a disk: tmpfs keeps no user xattrs
        test.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.folder = os.path.join(self.dir, "Notes")
        os.makedirs(self.folder)
        if any(self.CASES[c][3] for c in cases) and not xattrs_work(self.folder):
            if not shared:
                test.skipTest(NO_XATTRS)
            cases = tuple(c for c in cases if not self.CASES[c][3])
        self.cases = cases
        for name in self.cases:
            mode, uid, gid, tagged = self.CASES[name]
            path = self.path(name)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(TEXT.format(name=name))
            if tagged:
                os.setxattr(path, "user.tag", b"blue")
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
            os.chmod(path, mode)
        self.uri = main.format_file_uri(tuple(p for p in self.folder.split("/") if p))

    def path(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.md")

    def trashed(self) -> dict[str, int]:
        """Each trashed copy's note name and mode."""
        trash = os.path.join(self.folder, ".trash")
        names = os.listdir(trash) if os.path.isdir(trash) else []
        return {
            name.rsplit("-", 1)[1][: -len(".md")]: stat.S_IMODE(os.lstat(os.path.join(trash, name)).st_mode)
            for name in names
        }


class PermissionMatrix(unittest.TestCase):
    """A real server, sandbox on and off: a confirmed update of each note; what it became, or the refusal.

    The class shares a folder and its server for each sandbox setting: each test updates only
    its own notes of it. The umask tests start a server of their own, under that umask.
    """

    matrix: dict[tuple[str, str], str] = {}
    serve = procs.SERVE  # the server under test
    shared: dict[bool, tuple[Notes, procs.HttpServer]] = {}

    def start(self, notes: Notes, confined: bool, scope: Any) -> procs.HttpServer:
        """A server over `notes`' folder, sandbox on or off, stopped at `scope`'s clean-up."""
        if confined and isinstance(sandbox.kernel_abi(), str):
            self.skipTest(f"Landlock {sandbox.kernel_abi()}")
        env = procs.server_env(
            NOTES_MCP_TOKEN=procs.TOKEN, NOTES_MCP_SECRET=procs.SECRET, XDG_STATE_HOME=os.path.join(notes.dir, "state")
        )
        flags = ["--notes-dir", notes.folder, "--db", os.path.join(notes.dir, "notes.db"), "--notes-tools"]
        return procs.HttpServer(scope, *flags, *(() if confined else ("--no-sandbox",)), env=env, serve=self.serve)

    def served(self, confined: bool) -> tuple[Notes, procs.HttpServer]:
        """The class's folder (every note but the umask one) and its server, sandbox on or off; a dead one replaced."""
        cls = type(self)
        found = cls.shared.get(confined)
        if found is None or found[1].proc.poll() is not None:
            if not cls.shared:
                cls.addClassCleanup(cls.shared.clear)
            scope = procs.ClassScope(cls)
            notes = Notes(scope, (*BASIC, "tagged"), shared=True)
            found = cls.shared[confined] = (notes, self.start(notes, confined, scope))
        return found

    def update_each(
        self, notes: Notes, confined: bool, cases: tuple[str, ...], server: procs.HttpServer | None = None
    ) -> dict[str, dict[str, Any]]:
        """Update each of `cases` on `server` (or on a new server of this test's over `notes`)."""
        if server is None:
            server = self.start(notes, confined, self)
        self.assertTrue(server.wait_for_line("sandbox: "), server.stderr_text())
        said = next(line for line in server.stderr_lines if "sandbox: " in line)
        self.assertTrue(said.startswith("notes-mcp: sandbox: on" if confined else "notes-mcp: sandbox: off"), said)
        conn = server.connect(self)

        def call(message: dict[str, Any]) -> dict[str, Any]:
            _, _, body = procs.post(conn, message, procs.mcp_headers(message, procs.TOKEN))
            return json.loads(body)["result"]

        done: dict[str, dict[str, Any]] = {}
        for name in cases:
            before = state(notes.path(name))
            read = call(tools_call("notes_read", {"workspaceUri": notes.uri, "noteId": f"{name}.md"}))[
                "structuredContent"
            ]
            args = {
                "workspaceUri": notes.uri,
                "noteId": f"{name}.md",
                "body": NEW.format(name=name),
                "version": read["version"],
            }
            form = call(tools_call("notes_update", args))
            result = call(
                tools_call(
                    "notes_update",
                    args,
                    requestState=form["requestState"],
                    inputResponses=accept(notes_tools.UPDATE_KEY),
                )
            )
            done[name] = {
                "before": before,
                "after": state(notes.path(name)),
                "error": result["content"][0]["text"] if result["isError"] else None,
            }
        trashed = notes.trashed()
        sandboxed = "on" if confined else "off"
        for name, seen in done.items():
            mode, uid, gid, _, attributes = seen["after"]
            seen["trash"] = trashed.get(name)
            self.matrix[(name, sandboxed)] = (
                f"refused: {seen['error']}"
                if seen["error"]
                else f"{mode:04o} uid {uid} gid {gid} xattrs {sorted(attributes) or 'none'}; trash copy "
                f"{seen['trash']:04o}"
            )
        return done

    def assert_kept(self, seen: dict[str, Any], name: str) -> None:
        """Updated, with the mode, owner, group and attributes it had; the trash copy has its mode."""
        self.assertIsNone(seen["error"])
        before, after = seen["before"], seen["after"]
        self.assertEqual(after[3], NEW.format(name=name).encode())
        self.assertEqual((after[0], after[1], after[2], after[4]), (before[0], before[1], before[2], before[4]))
        self.assertEqual(seen["trash"], before[0])

    def assert_refused(self, seen: dict[str, Any], line: str) -> None:
        """Refused with `line`; the note as it was, byte for byte, with its mode, owner and group; nothing in the
        trash."""
        self.assertEqual(seen["error"], line)
        self.assertEqual(seen["after"], seen["before"])
        self.assertIsNone(seen["trash"])

    def shared_update(self, confined: bool, cases: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Update `cases` in the class's folder through its server, sandbox on or off."""
        notes, server = self.served(confined)
        if not set(cases) <= set(notes.cases):
            self.skipTest(NO_XATTRS)
        return self.update_each(notes, confined, cases, server)

    def test_without_the_sandbox_mode_group_and_attributes_are_kept_and_another_owner_is_refused(self) -> None:
        done = self.shared_update(False, BASIC)
        for name in ("private", "readonly", "plain", "group"):
            with self.subTest(note=name):
                self.assert_kept(done[name], name)
        self.assert_refused(done["foreign"], folder_bodies.NOT_OWNER.format(owner=OTHER_ID, me=os.geteuid()))

    def test_inside_the_sandbox_the_mode_is_kept_without_chmod_and_what_it_cannot_keep_is_refused(self) -> None:
        done = self.shared_update(True, BASIC)
        for name in ("private", "readonly", "plain"):
            with self.subTest(note=name):
                self.assert_kept(done[name], name)
        self.assert_refused(done["foreign"], folder_bodies.NOT_OWNER.format(owner=OTHER_ID, me=os.geteuid()))
        self.assert_refused(done["group"], folder_bodies.GROUP_CHANGED.format(got=os.getegid(), group=OTHER_ID))

    def test_without_the_sandbox_extended_attributes_are_copied_to_the_new_version(self) -> None:
        self.assert_kept(self.shared_update(False, ("tagged",))["tagged"], "tagged")

    def test_inside_the_sandbox_a_note_with_extended_attributes_is_refused_naming_them(self) -> None:
        done = self.shared_update(True, ("tagged",))
        self.assert_refused(done["tagged"], folder_bodies.XATTRS_UNKEPT.format(names="user.tag"))

    def with_umask(self, confined: bool) -> dict[str, dict[str, Any]]:
        """The server started with umask 077 (what the systemd unit sets); a 0644 note updated."""
        notes = Notes(self, ("umask",))
        old = os.umask(0o077)  # the server inherits it; the test process is single-threaded here
        try:
            return self.update_each(notes, confined, notes.cases)
        finally:
            os.umask(old)

    def test_inside_the_sandbox_a_umask_that_takes_the_note_s_bits_is_refused_and_changes_nothing(self) -> None:
        self.assert_refused(
            self.with_umask(confined=True)["umask"], folder_bodies.MODE_NARROWED.format(mode=0o644, got=0o600)
        )

    def test_without_the_sandbox_a_umask_that_takes_the_note_s_bits_is_made_good_on_the_new_file(self) -> None:
        self.assert_kept(self.with_umask(confined=False)["umask"], "umask")

    @classmethod
    def tearDownClass(cls) -> None:
        if os.environ.get("NOTES_MCP_PERMISSION_MATRIX"):
            for (name, confined), result in sorted(cls.matrix.items()):
                print(f"| {name} | {confined} | {result} |", file=sys.stderr)


class WithoutChmod(unittest.TestCase):
    """In process: the new version gets its mode from the open call alone."""

    def test_a_new_version_is_created_with_the_note_s_mode_and_no_chmod_is_made(self) -> None:
        notes = Notes(self, ("private", "readonly"))
        import folder_paths

        root = folder_paths.Root(folder_paths.root_path(notes.folder), os.path.realpath(notes.folder))
        self.addCleanup(root.close)
        fd = folder_paths.open_below(root, ())
        assert fd is not None
        self.addCleanup(os.close, fd)
        calls: list[str] = []
        with (
            mock.patch.object(os, "fchmod", lambda *a: calls.append("fchmod")),
            mock.patch.object(os, "chmod", lambda *a, **k: calls.append("chmod")),
        ):
            for name in notes.cases:
                loaded = folder_bodies.load(fd, f"{name}.md")
                assert loaded is not None
                old = TEXT.format(name=name).encode()
                done = folder_bodies.replace(
                    root, fd, f"{name}.md", loaded.facts, old, NEW.format(name=name).encode(), f"kept-{name}.md"
                )
                self.assertIsInstance(done, tuple)
        self.assertEqual(calls, [])
        self.assertEqual([state(notes.path(name))[0] for name in notes.cases], [0o600, 0o444])
        self.assertEqual(notes.trashed(), {"private": 0o600, "readonly": 0o444})


if __name__ == "__main__":
    unittest.main()
