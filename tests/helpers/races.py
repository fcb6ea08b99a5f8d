"""An attacker's tools against the folder store: renameat2(RENAME_EXCHANGE) and a thread that keeps exchanging two
files."""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import select
import struct
import tempfile
import threading
from typing import Any
from unittest import mock

from helpers import support  # noqa: F401 - puts code/ on the import path
from helpers.sql_stores import SCRATCH

import audit
import folder_paths
import folder_trash
import main
import sqlite_store
from markdown_store import MarkdownNotesStore

RENAME_EXCHANGE = 2  # linux/fs.h: swap the two names atomically

_LIBC = ctypes.CDLL(None, use_errno=True)
_RENAMEAT2 = getattr(_LIBC, "renameat2", None)
if _RENAMEAT2 is not None:
    _RENAMEAT2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)


def exchange(first: str, second: str) -> None:
    """Swap the files at two absolute paths in one step (renameat2 RENAME_EXCHANGE); OSError when refused."""
    if _RENAMEAT2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not in this C library")
    if _RENAMEAT2(-100, os.fsencode(first), -100, os.fsencode(second), RENAME_EXCHANGE) != 0:  # -100: AT_FDCWD
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def unavailable() -> str | None:
    """Why RENAME_EXCHANGE cannot be used here (one line), or None when it can."""
    with tempfile.TemporaryDirectory() as folder:
        a, b = os.path.join(folder, "a"), os.path.join(folder, "b")
        for path in (a, b):
            open(path, "w").close()
        try:
            exchange(a, b)
        except OSError as exc:
            return f"renameat2(RENAME_EXCHANGE) is unavailable here: {exc.strerror or exc}"
    return None


IN_CLOSE_NOWRITE, IN_OPEN = 0x10, 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class Exchanger(threading.Thread):
    """Exchanges two files once, timed by inotify: at the `nth` opening of their folder after the first file was read.

    The deletion reads the note (its re-check), then opens the folder again to re-stat
    and move it: the 1st opening after the read is the re-stat's, the later ones come
    between the re-stat and the move, where the exchange makes the move take the wrong file.
    """

    def __init__(self, folder: str, first: str, second: str, nth: int) -> None:
        super().__init__(daemon=True)
        self.first, self.second, self.nth = os.path.join(folder, first), os.path.join(folder, second), nth
        self.watched = os.fsencode(first)
        self.halt = threading.Event()
        self.exchanged = False
        self.fd = _LIBC.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0 or _LIBC.inotify_add_watch(self.fd, os.fsencode(folder), IN_OPEN | IN_CLOSE_NOWRITE) < 0:
            raise OSError(ctypes.get_errno(), "inotify")

    def run(self) -> None:
        read, opened = False, 0
        try:
            while not self.halt.is_set():
                if not select.select([self.fd], [], [], 0.05)[0]:
                    continue  # only so that stop() is heard; nothing is timed by it
                data = os.read(self.fd, 65536)
                for offset in _offsets(data):
                    _, mask, _, size = _EVENT.unpack_from(data, offset)
                    name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
                    if name == self.watched and mask & IN_CLOSE_NOWRITE:
                        read = True
                    elif read and not name and mask & IN_OPEN:
                        opened += 1
                        if opened == self.nth:
                            try:
                                exchange(self.first, self.second)
                                self.exchanged = True
                            except OSError:
                                pass  # already moved: too late
                            return
        finally:
            os.close(self.fd)

    def stop(self) -> None:
        """Stop (if it has not fired) and wait for the thread."""
        self.halt.set()
        self.join()


def _offsets(data: bytes) -> list[int]:
    found, offset = [], 0
    while offset + _EVENT.size <= len(data):
        found.append(offset)
        offset += _EVENT.size + _EVENT.unpack_from(data, offset)[3]
    return found


CONFIRMED = "# TPS report 2025\n"
DECOY = "# decoy (another file the attacker may write)\n"

# How one try ended.
DELETED = "deleted the confirmed note"
REFUSED = "refused before the move (the re-check saw the other file)"
PUT_BACK = "refused after the move (the other file arrived in the trash and was put back)"
WRONG = "trashed another file"


def race(tries: int, check: bool = True) -> collections.Counter[str]:
    """Run `tries` confirmed deletions, each raced by an Exchanger; how each ended. `check=False` skips the arrival
    check."""
    outcomes: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="exchange-race-", dir=SCRATCH) as base:
        notes = os.path.join(base, "notes")
        os.makedirs(notes)
        nonces = sqlite_store.open_ledger(os.path.join(base, "nonces.db"), clock=lambda: 1_000_000.0)
        store = MarkdownNotesStore([notes], nonces, retention=audit.Retention(), watch=False)
        workspace = tuple(p for p in notes.split("/") if p)
        trash = os.path.join(notes, folder_trash.TRASH_DIR)
        put_back = folder_trash.put_back
        returned: list[str] = []

        def counted(*args: object) -> None:
            returned.append("")
            put_back(*args)  # type: ignore[arg-type]

        patches: list[Any] = [mock.patch.object(folder_trash, "put_back", counted)]  # each patches another function
        if not check:
            patches.append(mock.patch.object(folder_trash, "same_file", lambda info, seen: True))
        for patch in patches:
            patch.start()
        folder = os.open(notes, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for k in range(tries):
                name = f"tps-{k}.md"
                chosen, decoy = os.path.join(notes, name), os.path.join(notes, f"decoy-{k}.txt")
                for path, text in ((chosen, CONFIRMED), (decoy, DECOY)):
                    with open(path, "w", encoding="utf-8") as handle:
                        handle.write(text)
                confirmed = os.stat(chosen).st_ino
                decoy_ino = os.stat(decoy).st_ino
                loaded = folder_paths.load_note(folder, name, workspace, (name,))  # what the form showed
                assert loaded is not None
                note = loaded[0]
                returned.clear()
                # The exchange lands at the 1st..4th opening of the folder after the re-check's read.
                attacker = Exchanger(notes, name, f"decoy-{k}.txt", 1 + k % 4)
                attacker.start()
                try:
                    outcome = store.consume("alice", f"n{k}", 1_000_060.0, (note.id, note.version), lambda live: True)
                finally:
                    attacker.stop()
                trashed = (
                    {os.stat(os.path.join(trash, entry)).st_ino for entry in os.listdir(trash)}
                    if os.path.isdir(trash)
                    else set()
                )
                kept = {os.stat(os.path.join(notes, entry)).st_ino for entry in os.listdir(notes)}
                if trashed - {confirmed} or decoy_ino not in kept:
                    outcomes[WRONG] += 1
                elif outcome is main.Settlement.DELETED:
                    outcomes[DELETED] += 1
                else:
                    outcomes[PUT_BACK if returned else REFUSED] += 1
                for folder_path in (notes, trash):
                    for entry in os.listdir(folder_path) if os.path.isdir(folder_path) else ():
                        if entry != folder_trash.TRASH_DIR:
                            os.unlink(os.path.join(folder_path, entry))
        finally:
            os.close(folder)
            for patch in patches:
                patch.stop()
            store.close()
    return outcomes
