"""The notes store over real folders of Markdown files, with containment enforced by the OS.

Exercise four of the lesson: point the server at a notes vault on disk. Each configured
folder is a root; a note is a regular `*.md` file inside a root (sub-folders included).

    nonces = sqlite_store.open_store("nonces.db", clock=time.time)
    store = MarkdownNotesStore(["/home/alice/Notes"], nonces)
    server = frame.notes_server(keys=[key], notes=store, policy=AuthorizationPolicy({"alice": ["file:///home/alice/Notes"]}))

A note is:
  - id:       its path relative to its root, components joined by "/". A component is
              spelled as it is (`2025/TPS report.md`, `会議/議事録.md`) when it is in NFC
              form and every character is printable; otherwise it is percent-encoded
              whole as in a file URI (`Cafe%CC%81.md`). No plain name contains "%", so
              each id names exactly one path, and a name renders as only one id: two
              names that look alike (NFC and NFD) get visibly different ids. Ids are
              unique within a root; roots are disjoint (a root inside another is dropped),
              and a confirmation names (id, version) where the version binds the full URI.
  - title:    the first `# heading` in the first TITLE_SCAN_BYTES bytes (a UTF-8 byte-order
              mark before it is ignored), else the file name without `.md`.
  - uri:      file:// URI of the configured root's path plus the relative components.
  - revision: a digest of the file's (device, inode, size, mtime_ns, ctime_ns), so
              Note.version binds the path, the title and the exact file the user was shown.

Nothing is resolved by string. The root path comes from the operator and is trusted;
every component below it is opened with O_NOFOLLOW relative to its parent's descriptor,
every entry is examined with lstat semantics, and a file is moved into the folder's
`.trash` with renameat2(parent_fd, name, trash_fd, ..., RENAME_NOREPLACE) (or, in
"unlink" mode, unlinked with unlinkat) after re-checking it is the same regular file.
Hidden names (leading ".") and names a file URI cannot spell are skipped, so the trash is
never walked. The nonce is claimed, with a pending audit entry, in the SQLite store's
transaction before the move (see `MarkdownNotesStore.consume`).
Standard library only.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import hashlib
import math
import os
import re
import secrets
import stat
import threading
import time
import unicodedata
from array import array
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote

import audit
import change_watch
import main
import frame
import stores
import sqlite_store
import title_index

TITLE_SCAN_BYTES = 4096  # bytes read from the top of a note to find its `# heading`
MAX_WALK_DEPTH = 16  # sub-folder levels below a notes folder that are indexed
MAX_WALK_ENTRIES = 1_000_000  # directory entries one notes folder may hold, sub-folders included; beyond it lookups fail, saying so
MAX_WATCHED_FOLDERS = 65_536  # folders watched per notes folder; past it (or the kernel's limit) the index rescans instead
RESCAN_SECONDS = 2.0  # without change notification: the longest a lookup relies on the last rescan
RESCAN_COST_FACTOR = 10  # ... unless a rescan took longer than 1/RESCAN_COST_FACTOR of that: then this many times its length
COMPACT_AFTER = 4096  # dropped title slots tolerated (or as many as live ones) before the slot table is rebuilt
NOTE_SUFFIX = ".md"
TRASH_DIR = ".trash"  # in each notes folder; hidden, so never walked or offered, and no id can name it
NAME_MAX = 255  # bytes in one file name (Linux, macOS)
EMPTY_INTERVAL_SECONDS = 3600.0  # an instance lists its trash folders for expired notes at most this often

# Names of letters, digits, `-`, `_`, `.`, `~` and spaces, at most NAME_MAX: format_file_uri
# and parse_file_uri give them back as they are, so plain() need not spell the URI out.
_SIMPLE_NAME = re.compile(r"[A-Za-z0-9_~ -][A-Za-z0-9._~ -]{0,%d}\Z" % (NAME_MAX - 1))

# Why an entry was not served, as the start-up report counts them (MarkdownNotesStore.describe).
SKIP_SYMLINK = "symlinks"
SKIP_HIDDEN = "hidden names"
SKIP_NAME = "names with % or \\ or another character a file URI cannot spell"
SKIP_SPECIAL = "FIFOs, sockets or devices"
SKIP_UNREADABLE = "unreadable files"
SKIP_UNUSABLE = "notes whose id or URI is too long"
SKIP_FOLDER = "unreadable folders"
SKIP_DEEP = f"folders deeper than {MAX_WALK_DEPTH} levels"

# O_NOFOLLOW: a symlink as the final component fails (ELOOP) instead of being followed.
# O_NONBLOCK: a file swapped for a FIFO after lstat cannot hang the open.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class StoreRefused(stores.StoreUnavailable):
    """The OS refused to delete the confirmed file: the confirmation was rolled back, nothing deleted."""

    def __init__(self) -> None:
        super().__init__("The chosen note could not be deleted (the folder does not allow it); nothing was deleted.")


class TrashRefused(stores.StoreUnavailable):
    """The notes folder's trash is a link, not a folder, or was replaced during the move: nothing deleted."""

    def __init__(self) -> None:
        super().__init__(f"The notes folder's trash ({TRASH_DIR}) is not a plain folder; nothing was deleted.")


class FolderTooLarge(stores.StoreUnavailable):
    """A listing met more entries than it may examine: it fails rather than offer a partial list."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"That notes folder holds more than {limit:,} entries; serve a smaller folder (a sub-folder) instead.")


class MarkdownNotesStore:
    """stores.NotesStore over Markdown folders; nonces in an SQLite store's consumed_nonces table."""

    def __init__(
        self,
        roots: Iterable[str],
        nonces: sqlite_store.SqliteNotesStore,
        max_walk_entries: int = MAX_WALK_ENTRIES,
        retention: audit.Retention | None = None,
        *,
        watch: bool = True,
        max_watches: int = MAX_WATCHED_FOLDERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Each root as the operator wrote it (its URI) and the folder it names, resolved once,
        # here: a folder reached through a symlink (macOS's /tmp, a vault linked into another
        # folder) is served at the written path, and re-pointing the link later changes nothing.
        real: dict[main.Path, str] = {}
        for root in roots:
            path = root_path(root)
            real.setdefault(path, os.path.realpath("/" + "/".join(path)))
        # Disjoint roots: a file inside two roots would have two ids and could be offered twice.
        # A root the outer root's walk reaches through real folders is dropped; one reached
        # through a symlink is its own root (the outer walk never follows the link).
        self.roots = tuple(sorted(p for p in real if not any(q != p and main.is_within(p, q) and same_folder(real[q], p[len(q) :], real[p]) for q in real)))
        self.real = {root: real[root] for root in self.roots}
        self.nonces = nonces
        self.max_walk_entries = max_walk_entries
        self.described: dict[main.Path, int] = {}  # root -> notes counted by the last describe(), until count() takes it
        # One title index per root, built at its first lookup. No thread is started:
        # change events are drained at each lookup (a sandbox may confine the process
        # after construction, and it must be applied before any thread exists).
        self.indexes = {
            root: FolderIndex(root, self.real[root], limit=max_walk_entries, watch=watch, max_watches=max_watches, clock=clock)
            for root in self.roots
        }
        self.retention = retention or nonces.retention
        nonces.retention = self.retention  # the confirmations database prunes the audit with the same bounds
        self._emptied_at = -math.inf  # when this instance last emptied its trash folders (store clock)
        try:
            self.recover()
        except stores.StoreUnavailable:
            pass  # the database is busy now: the next listing (or start) completes what a crash left

    def workspace_uris(self) -> list[str]:
        """The roots as canonical file URIs (what the policy must grant)."""
        return [main.format_file_uri(root) for root in self.roots]

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes in the folder `workspace` names, found through the root's title index and re-read live."""
        root = self._root_of(workspace)
        if root is None:
            return []
        # The workspace itself is opened as the deletion will open it: a symlinked folder
        # named in the URI, or one that is gone, lists nothing.
        fd = open_below(self.real[root], workspace[len(root) :])
        if fd is None:
            return []
        os.close(fd)
        return self.indexes[root].candidates(workspace, title)

    def _root_of(self, workspace: main.Path) -> main.Path | None:
        """The innermost root holding `workspace`: a vault linked into another root is served from its own root."""
        return max((root for root in self.roots if main.is_within(workspace, root)), key=len, default=None)

    def count(self, workspace: main.Path) -> int:
        """How many notes a listing of `workspace` would offer, counted without opening one (the start-up report)."""
        if workspace in self.described:
            return self.described.pop(workspace)  # counted by describe() just before: one walk, not two
        survey = self._survey(workspace)
        return 0 if survey is None else survey.surveyed

    def describe(self) -> list[str]:
        """Start-up report lines: how the title index learns of changes; each folder as resolved, with what it skipped."""
        modes = sorted({index.mode() for index in self.indexes.values()})
        lines = [f"Markdown folders ({len(self.roots)}): title index kept per file, built at the first lookup; " + "; ".join(modes)]
        for root in self.roots:
            written = "/" + "/".join(root)
            shown = written if self.real[root] == written else f"{written} (resolved at start-up to {self.real[root]})"
            try:
                survey = self._survey(root)
            except stores.StoreUnavailable as exc:  # FolderTooLarge: every call would say the same
                lines.append(f"folder {shown}: {exc}")
                continue
            if survey is None:
                lines.append(f"folder {shown}: cannot be opened")
                continue
            self.described[root] = survey.surveyed  # for the report's workspace line, once (count())
            skipped = "; ".join(f"{reason}: {count}" for reason, count in sorted(survey.skipped.items()))
            lines.append(f"folder {shown}: {survey.surveyed} note{'' if survey.surveyed == 1 else 's'}; skipped {skipped or 'nothing'}")
        return lines

    def _survey(self, workspace: main.Path) -> Survey | None:
        """The finished survey of the folder `workspace` names, or None when no root holds it or it cannot be opened."""
        root = self._root_of(workspace)
        if root is None:
            return None
        fd = open_below(self.real[root], workspace[len(root) :])
        if fd is None:
            return None
        survey = Survey(root, self.max_walk_entries)
        try:
            survey.folder(fd, workspace[len(root) :], 0)
        finally:
            os.close(fd)
        return survey

    def is_consumed(self, nonce: str) -> bool:
        """True when this confirmation was consumed by any instance sharing the nonce database."""
        return self.nonces.is_consumed(nonce)

    def close(self) -> None:
        """Stop watching the folders and close the nonce database (checkpointing it); later calls do nothing."""
        for index in self.indexes.values():
            index.close()
        self.nonces.close()

    @property
    def deletion(self) -> str:
        """What a deletion does here, as the form says it (trash and its days, or gone for good)."""
        return self.retention.said

    def settle(self, notes: object, principal: str, nonce: str, expires_at: float,
               target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        """The lesson's atomic step (main.MemoryReplayStore.settle): this store holds the notes and the nonces, so `notes` is itself."""
        return self.consume(principal, nonce, expires_at, target, recheck)

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """Claim and re-check in one transaction with a pending audit entry; COMMIT; move (or unlink); complete.

        The claim and the entry saying which file goes where are committed before the
        file is touched, so every crash leaves a record that `recover()` completes when
        a store is next opened: the file is in the trash (deleted), or was never moved
        (interrupted; the confirmation stays used, the note stays). A file the OS
        refuses to move releases the claim and the entry: the user may answer again.
        """
        chosen: list[tuple[main.Path, main.Path, tuple[int, ...], str]] = []
        settlement, entry = self.nonces.consume_with(
            principal, nonce, expires_at, lambda record: self._check(target, recheck, record, chosen)
        )
        if settlement is main.Settlement.DELETED:
            assert entry is not None  # a claim that settled always wrote its entry
            self.nonces.stage("committed")
            ((root, rel, seen, trash_name),) = chosen
            try:
                moved = self._move(root, rel, seen, trash_name)
            except stores.StoreUnavailable:
                self.nonces.release(nonce, entry)
                raise
            self.nonces.stage("moved")
            self.nonces.complete_audit(entry, audit.DELETED if moved else audit.REFUSED, audit.PENDING)
            settlement = main.Settlement.DELETED if moved else main.Settlement.CHANGED
        # Listing a trash costs time in proportion to what it holds: not on every call.
        now = self.nonces.now()
        if not now - self._emptied_at < EMPTY_INTERVAL_SECONDS:
            self._emptied_at = now
            self.empty_trash()
        return settlement

    def _check(
        self,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
        record: sqlite_store.Record,
        chosen: list[tuple[main.Path, main.Path, tuple[int, ...], str]],
    ) -> main.Settlement:
        """Inside the claim transaction: re-walk, re-read and re-check; DELETED (pending), CHANGED or CONSUMED."""
        if target is None:
            return main.Settlement.CONSUMED
        note_id, version = target
        rel = id_path(note_id)
        for root in self.roots if rel is not None else ():
            fd = open_below(self.real[root], rel[:-1])
            if fd is None:
                continue
            try:
                loaded = load_note(fd, rel[-1], root, rel)
            finally:
                os.close(fd)
            # The version binds path, title, inode, size, mtime and ctime: a file replaced by
            # another with the same name, edited, or renamed here from elsewhere fails it.
            if loaded is None or loaded[0].version != version or not recheck(loaded[0]):
                continue
            note, info = loaded
            trash_name = trash_name_for(rel[-1], self.nonces.now()) if self.retention.trash else ""
            chosen.append((root, rel, facts(info), trash_name))
            record(main.Settlement.DELETED, audit.Facts(note.id, note.title, note.uri, trash_name or None), pending=True)
            return main.Settlement.DELETED
        record(main.Settlement.CHANGED, audit.Facts(note_id))
        return main.Settlement.CHANGED

    def _move(self, root: main.Path, rel: main.Path, seen: tuple[int, ...], trash_name: str) -> bool:
        """Move (or unlink) rel[-1] if it is still the file the user confirmed; False when it is not."""
        fd = open_below(self.real[root], rel[:-1])
        if fd is None:
            return False
        name = rel[-1]
        try:
            try:
                now = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                return False
            # Re-stat just before the move: an entry swapped for a symlink or another file
            # since the read is refused. Neither renameat nor unlinkat follows a symlink.
            if not stat.S_ISREG(now.st_mode) or facts(now) != seen:
                return False
            if trash_name:
                return move_to_trash(self.real[root], fd, name, trash_name)
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return False  # removed by someone else since the re-stat: CHANGED, as for any vanished note
            except OSError:
                # EPERM/EACCES/EROFS (an append-only folder, a read-only mount): the claim is
                # released, so the user may retry once the folder allows it.
                raise StoreRefused() from None
            return True
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- the trash and the audit

    def locate(self, uri: str | None) -> tuple[main.Path, main.Path] | None:
        """(root, path below it) of a note URI inside one of the roots, or None."""
        try:
            path = main.parse_file_uri(uri)
        except main.ScopeError:
            return None
        root = next((root for root in self.roots if len(path) > len(root) and main.is_within(path, root)), None)
        return None if root is None else (root, path[len(root) :])

    def recover(self) -> None:
        """Complete pending entries a stopped server left: deleted if the move happened, else interrupted."""
        now = self.nonces.now()
        for entry in self.nonces.audit_entries(outcome=audit.PENDING):
            located = self.locate(entry["uri"])
            done = located is not None and (
                in_trash(self.real[located[0]], str(entry["trash"])) if entry["trash"] else not present(self.real[located[0]], located[1])
            )
            if done:
                self.nonces.complete_audit(entry["id"], audit.DELETED, audit.PENDING)
            elif now - float(entry["at"]) >= audit.PENDING_GRACE_SECONDS:  # not another instance's move in flight
                self.nonces.complete_audit(entry["id"], audit.INTERRUPTED, audit.PENDING)

    def empty_trash(self) -> None:
        """Unlink up to PRUNE_BATCH trashed files older than the retention, in each root's trash only."""
        cutoff = self.nonces.now() - self.retention.trash_seconds
        budget = audit.PRUNE_BATCH
        for root in self.roots:
            trash = open_trash(self.real[root], create=False)
            if trash is None:
                continue
            try:
                budget = empty(trash, cutoff, budget, self.max_walk_entries)
            finally:
                os.close(trash)

    def audit_entries(self, principal: str | None = None, since: float | None = None, outcome: str | None = None) -> list[dict[str, object]]:
        """The confirmations database's audit entries (pending ones completed first where they can be)."""
        self.recover()
        return self.nonces.audit_entries(principal, since, outcome)

    def complete_audit(self, entry_id: int, outcome: str, expected: str) -> None:
        """As the confirmations database's."""
        self.nonces.complete_audit(entry_id, outcome, expected)

    def restore(self, entry_id: int) -> dict[str, object]:
        """Move a trashed file back to where it was, refusing if anything is there now; audited."""
        entry = self.nonces.audit_entry(entry_id)
        trash_name = entry["trash"] if entry is not None and entry["outcome"] == audit.DELETED else None
        located = self.locate(str(entry["uri"])) if trash_name else None
        if entry is None or not trash_name or located is None:
            raise audit.RestoreRefused(f"entry {entry_id} is not a deletion into the trash of a folder served here")
        root, rel = located
        parent = open_below(self.real[root], rel[:-1])
        if parent is None:
            raise audit.RestoreRefused(f"entry {entry_id}: the note's folder no longer exists; nothing restored")
        try:
            trash = open_trash(self.real[root], create=False)
            if trash is None:
                raise audit.RestoreRefused(f"entry {entry_id}: the note is no longer in the trash")
            try:
                # Only the regular file the server put there: a link left in its place would
                # make the "restored" note point anywhere on the system.
                if not stat.S_ISREG(os.stat(str(trash_name), dir_fd=trash, follow_symlinks=False).st_mode):
                    raise audit.RestoreRefused(f"entry {entry_id}: the trash holds something else than the note; nothing restored")
                rename_noreplace(trash, str(trash_name), parent, rel[-1])
            except FileExistsError:
                raise audit.RestoreRefused(f"entry {entry_id}: a note now exists at its place; nothing restored") from None
            except FileNotFoundError:
                raise audit.RestoreRefused(f"entry {entry_id}: the note is no longer in the trash (restored or emptied)") from None
            except OSError:
                raise audit.RestoreRefused(f"entry {entry_id}: the folder does not allow the move; nothing restored") from None
            finally:
                os.close(trash)
        finally:
            os.close(parent)
        return self.nonces.record_restore(entry_id, audit.Facts(str(entry["note_id"]), entry["title"], entry["uri"], str(trash_name)))  # type: ignore[arg-type]


def trash_name_for(name: str, now: float) -> str:
    """A name in the trash no other deletion can take: UTC time, 48 random bits, the original name."""
    prefix = trash_stamp(now) + "-" + secrets.token_hex(6)
    full = f"{prefix}-{name}"
    # A name longer than NAME_MAX is dropped; the audit entry keeps where the note came from.
    return full if len(os.fsencode(full)) <= NAME_MAX else prefix + NOTE_SUFFIX


_TRASHED_RE = re.compile(r"(\d{8}T\d{6}Z)-[0-9a-f]{12}[-.]")


def trash_stamp(at: float) -> str:
    """The time a trash name starts with (UTC, to the second): names sort in the order they were trashed."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))


def open_trash(root: str | main.Path, create: bool) -> int | None:
    """A descriptor for root/.trash, made if asked; None when absent; TrashRefused if it is not a plain folder."""
    fd = open_below(root, ())
    if fd is None:
        return None
    try:
        if create:
            try:
                os.mkdir(TRASH_DIR, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError:
                raise StoreRefused() from None
        try:
            return os.open(TRASH_DIR, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if create:
                raise TrashRefused() from None
            return None
        except OSError:
            # A symlink (ELOOP) or a file (ENOTDIR) where the trash should be: following it
            # would move notes out of the notes folder, wherever the link points.
            raise TrashRefused() from None
    finally:
        os.close(fd)


def same_trash(root: str | main.Path, trash: int) -> bool:
    """True when root/.trash is still the folder `trash` was opened on (not replaced since)."""
    fd = open_below(root, ())
    if fd is None:
        return False
    try:
        now = os.stat(TRASH_DIR, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(fd)
    opened = os.fstat(trash)
    # lstat: a link to that very folder has an inode of its own, so it never compares equal.
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)


def move_to_trash(root: str | main.Path, fd: int, name: str, trash_name: str) -> bool:
    """renameat(fd, name, trash, trash_name) into root/.trash, opened without following links; False if gone."""
    trash = open_trash(root, create=True)
    assert trash is not None
    try:
        if not same_trash(root, trash):
            raise TrashRefused()
        try:
            rename_noreplace(fd, name, trash, trash_name)
        except FileNotFoundError:
            return False  # removed by someone else since the re-stat
        except OSError:
            raise StoreRefused() from None  # EPERM, EROFS, EXDEV (a sub-folder on another file system)
        # The trash swapped for another folder or a link while the file moved: the file went
        # to a folder that is no longer the trash. Put it back and refuse.
        if not same_trash(root, trash):
            try:
                rename_noreplace(trash, trash_name, fd, name)
            except OSError:
                pass  # the name was taken meanwhile: the file stays in the displaced folder, nothing overwritten
            raise TrashRefused()
        return True
    finally:
        os.close(trash)


def in_trash(root: str | main.Path, trash_name: str) -> bool:
    """True when root/.trash holds a regular file named `trash_name`."""
    trash = open_trash(root, create=False) if trash_name else None
    if trash is None:
        return False
    try:
        return stat.S_ISREG(os.stat(trash_name, dir_fd=trash, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(trash)


def present(root: str | main.Path, rel: main.Path) -> bool:
    """True when root/rel is (still) a regular file."""
    fd = open_below(root, rel[:-1])
    if fd is None:
        return False
    try:
        return stat.S_ISREG(os.stat(rel[-1], dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def empty(trash: int, cutoff: float, budget: int, limit: int) -> int:
    """Unlink trashed regular files named before `cutoff`, at most `budget`; what is left of it."""
    names = []
    with os.scandir(trash) as entries:
        for entry in entries:
            if len(names) >= limit:
                break
            names.append(entry.name)
    last = trash_stamp(cutoff)
    for name in sorted(names):
        match = _TRASHED_RE.match(name)
        if match is None:
            continue  # a name the server did not give: never ours to remove
        if budget <= 0 or match.group(1) > last:
            break  # names sort by time: every later one is younger
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=trash, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=trash)  # unlinkat in the trash: never a folder, never a link's target
                budget -= 1
        except OSError:
            continue
    return budget


_LIBC = ctypes.CDLL(None, use_errno=True)
_RENAMEAT2 = getattr(_LIBC, "renameat2", None)
if _RENAMEAT2 is not None:
    _RENAMEAT2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
RENAME_NOREPLACE = 1


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """renameat2(..., RENAME_NOREPLACE): FileExistsError when `dst` exists, never a replacement."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):  # the file system has no RENAME_NOREPLACE
            raise OSError(err, os.strerror(err))
    # link() refuses an existing name as renameat2 would; then the old name goes.
    os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    os.unlink(src, dir_fd=src_fd)


class _TooLarge(Exception):
    """Raised inside the index when a notes folder holds more entries than it may examine."""


class _Folder:
    """One indexed folder: its identity, its watch, and the names it held when last listed."""

    __slots__ = ("ident", "wd", "names")

    def __init__(self, ident: tuple[int, int], wd: int | None, names: set[str]) -> None:
        self.ident = ident
        self.wd = wd
        self.names = names


class FolderIndex:
    """The notes of one root folder: titles read once per file version, kept in memory, told of changes.

    A file's entry is keyed by facts() of its last read (device, inode, size, mtime_ns,
    ctime_ns): it is read again only when those change. Titles are found by their folded
    trigrams (the rarest trigram of the query names the few slots to test), queries under
    title_index.MIN_INDEXED_QUERY characters test every title of the workspace.

    Changes arrive from Linux inotify, drained (without blocking, without a thread) at
    each lookup; where inotify is missing, refused, or out of watches, a full rescan
    (stat only, files re-read only when their facts changed, unchanged ones keeping
    their slots) runs at a lookup once the last one is rescan_interval old: at least
    RESCAN_SECONDS, and RESCAN_COST_FACTOR times the last rescan's length, so that
    rescanning never takes more than a tenth of the time however large the folder.
    The index only says where to look: the few notes it
    names are re-read through descriptors before they are offered, and the deletion
    re-checks the file itself (MarkdownNotesStore._unlink_in), so a stale index can
    only leave a note out or make the server ask again, never delete another file.
    """

    def __init__(self, root: main.Path, path: str, *, limit: int, watch: bool, max_watches: int, clock: Callable[[], float]) -> None:
        self.root = root
        self.path = path  # the folder `root` names, resolved at start-up
        self.limit = limit
        self.max_watches = max_watches
        self.clock = clock
        self.lock = threading.Lock()
        self.watch: change_watch.Inotify | None = None
        self.reason = "change notification off"
        if watch:
            try:
                self.watch = change_watch.Inotify()
            except OSError as exc:
                self.reason = f"inotify unavailable: {exc.strerror or exc}"
        self.built = False
        self.too_large = False
        self.scanned_at = -math.inf
        self.rescan_interval = RESCAN_SECONDS
        self._reset()

    def _reset(self) -> None:
        self.folders: dict[main.Path, _Folder] = {}
        self.by_wd: dict[int, main.Path] = {}
        self.files: dict[main.Path, tuple[tuple[int, int, int, int, int], int]] = {}  # path -> (facts, slot)
        self.entries = 0
        self.slot_path: list[main.Path | None] = []
        self.slot_title: list[str] = []
        self.slot_folded: list[str] = []
        self.grams: dict[str, array[int]] = {}
        self.dead = 0

    def mode(self) -> str:
        """How this index learns of changes, in words."""
        if self.watch is not None:
            return "changes learnt from Linux inotify"
        return f"changes found by a rescan at most every {RESCAN_SECONDS:g} s, or {RESCAN_COST_FACTOR} times the last rescan's length if longer ({self.reason})"

    # ---------------------------------------------------------------- lookups

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` (below this root) whose title contains `title`, in form order."""
        needle = stores.fold_title(title)
        below = workspace[len(self.root) :]
        with self.lock:
            self._update()
            if self.too_large:
                raise FolderTooLarge(self.limit)
            hits = [(self.slot_path[k], note) for k in self._hits(below, needle) if (note := self._indexed(k)) is not None]
        if len(hits) > main.MAX_CANDIDATES:
            return stores.form_order(note for _, note in hits)  # too many for one form either way: no need to read them
        # The few the index names are read again, as the deletion will read them: the
        # offer shows each file as it is now, and a file changed since it was indexed
        # is offered (or not) for what it now says.
        live = (self._live(path) for path, _ in hits)
        return stores.form_order(note for note in live if note is not None and needle in stores.fold_title(note.title) and main.inside_workspace(note, workspace))

    def _hits(self, below: main.Path, needle: str) -> list[int]:
        """Slots of the notes strictly inside `below` whose folded title holds `needle`."""
        pool: Iterable[int] = range(len(self.slot_path))
        if title_index.uses_title_index(needle):
            postings = sorted((self.grams.get(gram, ()) for gram in title_index.trigrams(needle)), key=len)
            # A title holding the query holds each of its trigrams: the two rarest lists
            # together leave a handful of slots even among 100,000 notes.
            pool = set(postings[0]).intersection(postings[1]) if len(postings) > 1 else postings[0]
        n = len(below)
        paths, folded = self.slot_path, self.slot_folded
        return [k for k in pool if (p := paths[k]) is not None and len(p) > n and p[:n] == below and needle in folded[k]]

    def _indexed(self, slot: int) -> main.Note | None:
        path = self.slot_path[slot]
        assert path is not None
        return indexed_note(self.root, path, self.slot_title[slot], self.files[path][0])

    def _live(self, path: main.Path) -> main.Note | None:
        fd = open_below(self.path, path[:-1])
        if fd is None:
            return None
        try:
            loaded = load_note(fd, path[-1], self.root, path)
        finally:
            os.close(fd)
        return loaded[0] if loaded is not None else None

    # ---------------------------------------------------------------- keeping up

    def _update(self) -> None:
        """Bring the index up to what is known now: drain the events, or rescan when one is due."""
        try:
            if self.watch is not None and () in self.folders:  # built, and the root is there and watched
                self._drain()
            elif not self.built or self.clock() - self.scanned_at >= self.rescan_interval:
                self._rebuild()
            if self.dead > max(COMPACT_AFTER, len(self.files)):
                self._compact()
        except _TooLarge:
            self._forget()

    def _forget(self) -> None:
        """Past the entry limit: drop the index and its watches; a rebuild is tried once the rescan interval passes."""
        self.too_large = True
        self._unwatch(list(self.by_wd))
        self._reset()

    def _rebuild(self) -> None:
        """List the whole tree again; a file whose facts did not change keeps its slot, unread."""
        known = self.files  # path -> (facts, slot) before this listing
        self.folders, self.by_wd, self.files, self.entries = {}, {}, {}, 0
        self.too_large = False
        self.built = True
        self.scanned_at = started = self.clock()
        # Watches are added by path with IN_DONT_FOLLOW: the root, which may be a link
        # (the operator's choice, followed when it is opened), is resolved first.
        self.watch_base = os.path.realpath(self.path).rstrip("/")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root may be a symlink: the operator's choice
        except OSError:
            fd = None  # gone: nothing to offer until it is back
        if fd is not None:
            try:
                self._folder(fd, (), known)
            finally:
                os.close(fd)
        # A file gone, or read again into a new slot, leaves its old slot to the compaction.
        for path, held in known.items():
            if self.files.get(path) != held:
                self._kill_slot(held[1])
        # A rescan of a large folder can outlast RESCAN_SECONDS: spaced by its own length,
        # it cannot keep every lookup waiting on the next one.
        self.rescan_interval = max(RESCAN_SECONDS, RESCAN_COST_FACTOR * (self.clock() - started))

    def _folder(self, fd: int, rel: main.Path, known: dict[main.Path, tuple[tuple[int, int, int, int, int], int]]) -> None:
        """Watch, then list the open folder `fd` at `rel`; index its notes and sub-folders."""
        info = os.fstat(fd)
        wd = self._watch(rel)  # before the listing: a change made while it runs is not missed
        names: dict[str, bool] = {}  # name -> listed as a regular file (the directory entry's type, no stat)
        with os.scandir(fd) as entries:
            for entry in entries:
                # A folder with millions of entries must not make one call unbounded; and a
                # cut index must say so, never answer "no note" for a note it did not reach.
                self.entries += 1
                if self.entries > self.limit:
                    raise _TooLarge()
                try:
                    names[entry.name] = entry.is_file(follow_symlinks=False)
                except OSError:
                    names[entry.name] = False
        self.folders[rel] = _Folder((info.st_dev, info.st_ino), wd, set(names))
        for name, is_file in names.items():
            self._entry(fd, rel, name, known, is_file)

    def _entry(self, fd: int, rel: main.Path, name: str, known: dict[main.Path, tuple[tuple[int, int, int, int, int], int]], is_file: bool = False) -> None:
        """Index the entry `name` of the open folder `fd` (a note, or a sub-folder within the depth limit)."""
        if not plain(name):
            return
        path = rel + (name,)
        if is_file and path not in known and name.endswith(NOTE_SUFFIX):
            # Listed as a file and not indexed before: nothing to compare, so no lstat; the
            # open below refuses a link (O_NOFOLLOW) and what is open is what is indexed.
            read = read_title(fd, name)
            if read is not None:
                self._put(path, facts(read[1]), read[0])
            return
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return  # removed since it was listed
        if stat.S_ISDIR(info.st_mode):
            if len(rel) < MAX_WALK_DEPTH and path not in self.folders:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    return  # swapped for a symlink since the lstat (ELOOP/ENOTDIR), or removed
                try:
                    self._folder(child, path, known)
                finally:
                    os.close(child)
        elif stat.S_ISREG(info.st_mode) and name.endswith(NOTE_SUFFIX):
            held = known.get(path)
            if held is not None and held[0] == facts(info):
                self.files[path] = held  # unchanged since the last listing: its slot and postings stay
                return
            read = read_title(fd, name)  # keyed by what it opens: a swap since the lstat is indexed as what it is now
            if read is not None:
                self._put(path, facts(read[1]), read[0])
        # Symlinks, FIFOs, sockets and devices are never indexed or opened.

    def _drain(self) -> None:
        """Apply every queued inotify event: each names one entry of one folder to look at again."""
        assert self.watch is not None
        changed: dict[tuple[main.Path, str], None] = {}
        for wd, mask, name in self.watch.drain():
            rel = self.by_wd.get(wd)
            if mask & change_watch.IN_Q_OVERFLOW or (rel == () and mask & (change_watch.IN_DELETE_SELF | change_watch.IN_MOVE_SELF)):
                self._rebuild()  # events were lost, or the root itself moved: look at everything again
                return
            if rel is None:
                continue  # a folder this index no longer holds
            if mask & change_watch.IN_IGNORED:
                del self.by_wd[wd]
                continue
            if name:
                changed[(rel, name)] = None
        for rel, name in changed:
            self._refresh(rel, name)

    def _refresh(self, rel: main.Path, name: str) -> None:
        """Look again at the entry `name` of the indexed folder `rel`: added, changed, replaced or gone."""
        folder = self.folders.get(rel)
        fd = open_below(self.path, rel) if folder is not None else None
        if folder is None or fd is None:
            return  # the folder itself went; its parent's event drops it
        try:
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                info = None
            if info is None and name in folder.names:
                folder.names.discard(name)
                self.entries -= 1
            elif info is not None and name not in folder.names:
                folder.names.add(name)
                self.entries += 1
                if self.entries > self.limit:
                    raise _TooLarge()
            path = rel + (name,)
            held = self.folders.get(path)
            if held is not None and not (info is not None and stat.S_ISDIR(info.st_mode) and held.ident == (info.st_dev, info.st_ino)):
                self._drop_folder(path)  # removed, moved away, or replaced by another folder or a link
            if path in self.files:
                # Read again even when its facts look the same: an edit that keeps the size
                # within one tick of the file system's clock leaves them equal, and the
                # event is the better witness.
                self._drop_file(path)
            if info is not None:
                self._entry(fd, rel, name, {})
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- watches

    def _watch(self, rel: main.Path) -> int | None:
        """Watch the folder at `rel`; None (and rescan mode from now on) past the watch limit."""
        if self.watch is None:
            return None
        if len(self.by_wd) >= self.max_watches:
            self._stop_watching(f"more than {self.max_watches:,} folders to watch")
            return None
        try:
            # By path, as inotify takes it: if a component was swapped for a link meanwhile,
            # the watch only brings events (hints); every read still goes through the
            # descriptors opened with O_NOFOLLOW from the root.
            wd = self.watch.add("/".join((self.watch_base, *rel)) or "/")
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.ENOMEM):
                self._stop_watching("the system's inotify watch limit is reached")
            return None  # ENOENT/ENOTDIR: gone or swapped since it was opened; its parent's event says so
        self.by_wd[wd] = rel
        return wd

    def _stop_watching(self, reason: str) -> None:
        """Fall back to rescanning for good: close inotify (every watch goes with it) and say why."""
        if self.watch is not None:
            self.watch.close()
        self.watch = None
        self.reason = reason
        self.by_wd.clear()
        self.scanned_at = self.clock()

    def _unwatch(self, wds: list[int]) -> None:
        for wd in wds:
            self.by_wd.pop(wd, None)
            if self.watch is not None:
                self.watch.remove(wd)

    def close(self) -> None:
        """Stop watching; the index serves on by rescanning if it is used again."""
        with self.lock:
            if self.watch is not None:
                self._stop_watching("closed")

    # ---------------------------------------------------------------- slots

    def _put(self, path: main.Path, key: tuple[int, int, int, int, int], title: str) -> None:
        """Index `path` with `title`; a previous version of it is dropped."""
        if path in self.files:
            self._drop_file(path)
        slot = len(self.slot_path)
        folded = stores.fold_title(title)
        self.slot_path.append(path)
        self.slot_title.append(title)
        self.slot_folded.append(folded)
        grams = self.grams
        for gram in title_index.trigrams(folded):
            posting = grams.get(gram)
            if posting is None:
                grams[gram] = posting = array("l")
            posting.append(slot)
        self.files[path] = (key, slot)

    def _drop_file(self, path: main.Path) -> None:
        _, slot = self.files.pop(path)
        self._kill_slot(slot)

    def _kill_slot(self, slot: int) -> None:
        self.slot_path[slot] = None  # its posting entries go at the next compaction
        self.slot_title[slot] = self.slot_folded[slot] = ""
        self.dead += 1

    def _drop_folder(self, rel: main.Path) -> None:
        """Forget the folder `rel` and everything below it, watches included."""
        n = len(rel)
        for path in [p for p in self.folders if p[:n] == rel]:
            folder = self.folders.pop(path)
            self.entries -= len(folder.names)
            # Its watch, unless the watch now serves another path: a folder moved onto a
            # name keeps its watch descriptor, already taken over for the new name.
            if folder.wd is not None and self.by_wd.get(folder.wd) == path:
                self._unwatch([folder.wd])
        for path in [p for p in self.files if p[:n] == rel]:
            self._drop_file(path)

    def _compact(self) -> None:
        """Rebuild the slot table and postings from the live files (drops what _drop_file left)."""
        entries = [(path, key, self.slot_title[slot]) for path, (key, slot) in self.files.items()]
        self.files, self.slot_path, self.slot_title, self.slot_folded, self.grams, self.dead = {}, [], [], [], {}, 0
        for path, key, title in entries:
            self._put(path, key, title)


class Survey:
    """One bounded, descriptor-relative count of a folder's notes for the start-up report: no note is opened."""

    def __init__(self, root: main.Path, limit: int = MAX_WALK_ENTRIES) -> None:
        self.root = root
        self.limit = limit
        self.budget = limit
        self.surveyed = 0
        self.skipped: collections.Counter[str] = collections.Counter()  # reason -> entries not served

    def folder(self, fd: int, rel: main.Path, depth: int) -> None:
        """Count the open folder `fd` (path `rel` below the root); recurse into real sub-folders."""
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                # A folder with millions of entries must not make start-up unbounded; and a
                # cut count must say so, never report fewer notes than the folder holds.
                if self.budget <= 0:
                    raise FolderTooLarge(self.limit)
                self.budget -= 1
                names.append(entry.name)
        for name in names:
            if not plain(name):
                self.skipped[SKIP_HIDDEN if name.startswith(".") else SKIP_NAME] += 1
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # removed since it was listed
            if stat.S_ISDIR(info.st_mode):
                if depth < MAX_WALK_DEPTH:
                    self.subfolder(fd, name, rel, depth)
                else:
                    self.skipped[SKIP_DEEP] += 1
            elif stat.S_ISREG(info.st_mode) and name.endswith(NOTE_SUFFIX):
                self.count(fd, name, rel + (name,))
            # Symlinks, FIFOs, sockets and devices are never served or opened.
            elif stat.S_ISLNK(info.st_mode):
                self.skipped[SKIP_SYMLINK] += 1
            elif not stat.S_ISREG(info.st_mode):
                self.skipped[SKIP_SPECIAL] += 1

    def count(self, fd: int, name: str, rel: main.Path) -> None:
        """Count one regular `*.md` file: a note if readable and its id and URI fit (load_note's checks, without the open)."""
        if not os.access(name, os.R_OK, dir_fd=fd):
            self.skipped[SKIP_UNREADABLE] += 1
            return
        # Every component is plain (listed names were checked), so only the lengths can fail.
        if len(note_id(rel)) > stores.MAX_NOTE_ID_LENGTH or len(main.format_file_uri(self.root + rel)) > main.MAX_URI_LENGTH:
            self.skipped[SKIP_UNUSABLE] += 1
            return
        self.surveyed += 1

    def subfolder(self, fd: int, name: str, rel: main.Path, depth: int) -> None:
        """Open the sub-folder `name` of `fd` without following a link, and count it."""
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            self.skipped[SKIP_FOLDER] += 1
            return  # no permission, swapped for a symlink since the lstat (ELOOP/ENOTDIR), or removed
        try:
            self.folder(child, rel + (name,), depth + 1)
        finally:
            os.close(child)


def root_path(root: str) -> main.Path:
    """An operator's folder as path components, or StoreError saying what is wrong and what to write instead."""
    if not isinstance(root, str) or not root or "\x00" in root:
        raise sqlite_store.StoreError("notes folder must be a non-empty path")
    absolute = os.path.abspath(root)
    # Hosts start servers without a shell: nothing expands `~`, and the working directory
    # is the host's, not the one the operator had in mind. Say so, with the path meant.
    if root.startswith("~"):
        raise sqlite_store.StoreError(
            f"notes folder {root} starts with ~, which is not expanded here (hosts start servers without a shell); "
            f"write the absolute path, e.g. {os.path.expanduser(root)}"
        )
    relative = "" if os.path.isabs(root) else f" (relative to the working directory {os.getcwd()}, which a host chooses; pass an absolute path)"
    if not os.path.lexists(absolute):
        raise sqlite_store.StoreError(f"notes folder {absolute} does not exist{relative}")
    if not os.path.isdir(absolute):
        what = "a symlink to nothing" if not os.path.exists(absolute) else "a file" if os.path.isfile(absolute) else "not a folder"
        raise sqlite_store.StoreError(f"notes folder {absolute} is not a directory (it is {what}){relative}")
    try:
        path = main.parse_file_uri(main.format_file_uri(tuple(p for p in absolute.split("/") if p)))
    except (main.ScopeError, UnicodeEncodeError):
        raise sqlite_store.StoreError(f"notes folder {absolute} cannot be named by a file:// URI") from None
    return path


def same_folder(outer: str, below: main.Path, inner: str) -> bool:
    """True when the walk of the folder `outer` reaches the folder `inner` at `below` through real folders (no symlink)."""
    fd = open_below(outer, below)
    if fd is None:
        return False
    try:
        reached = os.fstat(fd)
    finally:
        os.close(fd)
    try:
        target = os.stat(inner)
    except OSError:
        return False
    return (reached.st_dev, reached.st_ino) == (target.st_dev, target.st_ino)


def open_below(root: str | main.Path, below: main.Path) -> int | None:
    """A descriptor for the folder `root` (a resolved path, or components) / below, walking each component below it with O_NOFOLLOW."""
    if not isinstance(root, str):
        root = "/" + "/".join(root)
    try:
        # The root is the operator's choice, resolved at start-up (it may have been reached through a symlink).
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    for name in below:
        # `..` would climb out of the parent; a symlink would leave the tree. Both fail here.
        if not plain(name):
            os.close(fd)
            return None
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = child
    return fd


def plain(name: str) -> bool:
    """A visible entry name that one file-URI component spells exactly (no `..`, `%`, `\\`, controls)."""
    if not name or name.startswith(".") or "/" in name:
        return False
    if _SIMPLE_NAME.match(name):
        return True  # unreserved ASCII: the URI round trip below would give it back unchanged
    try:
        return main.parse_file_uri(main.format_file_uri((name,))) == (name,)
    except (main.ScopeError, UnicodeEncodeError):
        return False  # names that are not UTF-8 arrive with surrogate escapes


def note_id(rel: main.Path) -> str:
    """The id of the note at `rel` below its root: components joined by "/", each as is or percent-encoded."""
    return "/".join(id_part(name) for name in rel)


def id_part(name: str) -> str:
    """A plain name as itself when NFC and printable (a CJK name costs 1 per character), else percent-encoded."""
    # Percent-encoding every non-ASCII name cost 9 id characters per CJK character, so a
    # 14-character Japanese name overran MAX_NOTE_ID_LENGTH and was never offered. An
    # NFD, bidi-control or other invisible spelling stays encoded: the id a person sees
    # in a form must not look like another note's id.
    if unicodedata.is_normalized("NFC", name) and name.isprintable():
        return name
    return quote(name, safe="")


def id_path(ident: str) -> main.Path | None:
    """The inverse of note_id, or None for an id this store could not have issued."""
    try:
        rel = tuple(unquote(part, errors="strict") if "%" in part else part for part in ident.split("/"))
    except UnicodeDecodeError:
        return None
    # One spelling per file: `a%2Fb`, `..` or a second encoding of the same name is refused.
    if not all(plain(name) for name in rel) or note_id(rel) != ident:
        return None
    return rel


def facts(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies one version of one file: device, inode, size, mtime_ns, ctime_ns."""
    # ctime cannot be set from user space: a copy restored with the old mtime still differs.
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def revision(key: tuple[int, int, int, int, int]) -> int:
    """A note's revision: a digest of its file's facts(), so any change to the file changes the version."""
    return int.from_bytes(hashlib.sha256(repr(key).encode("ascii")).digest()[:8], "big")


def load_note(fd: int, name: str, root: main.Path, rel: main.Path) -> tuple[main.Note, os.stat_result] | None:
    """Open `name` in folder `fd` without following links; the Note and its fstat, or None."""
    read = read_title(fd, name)
    if read is None:
        return None
    note = indexed_note(root, rel, read[0], facts(read[1]))
    return None if note is None else (note, read[1])


def read_title(fd: int, name: str) -> tuple[str, os.stat_result] | None:
    """Open the note `name` in folder `fd` without following links: (its title, its fstat), or None."""
    if not name.endswith(NOTE_SUFFIX):
        return None
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
    except OSError:
        return None  # a symlink (ELOOP), or gone
    try:
        info = os.fstat(handle)
        # The entry listed may have been swapped before the open: trust only what is open
        # (callers key what they keep by this fstat, never by an earlier lstat). A FIFO
        # or device is no note. A file with a second hard link may be a file outside the
        # folder linked in (its heading would be shown as a title, and deleting it here
        # would not delete it): not offered, and not deleted.
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        head = os.read(handle, TITLE_SCAN_BYTES)
    except OSError:
        return None
    finally:
        os.close(handle)
    return heading(head) or shown(name[: -len(NOTE_SUFFIX)]) or shown(name), info


def indexed_note(root: main.Path, rel: main.Path, title: str, key: tuple[int, int, int, int, int]) -> main.Note | None:
    """The Note for the file at `rel` below `root` with `title` and facts `key`, or None when it cannot be shown."""
    note = main.Note(note_id(rel), title, main.format_file_uri(root + rel), revision(key))
    try:
        stores.check_note(note)  # e.g. an id over MAX_NOTE_ID_LENGTH or a URI over MAX_URI_LENGTH
    except ValueError:
        return None
    return note


def heading(head: bytes) -> str:
    """The first complete level-one ATX heading line (`# Title`) outside code fences, or ""."""
    if len(head) == TITLE_SCAN_BYTES:
        head = head[: head.rfind(b"\n") + 1]  # a heading cut by the limit would show a wrong title
    fenced = False
    # utf-8-sig: editors on Windows start files with a byte-order mark, which is no heading text.
    for line in head.decode("utf-8-sig", errors="replace").splitlines():
        text = line.strip()
        if text.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and len(line) - len(line.lstrip(" ")) <= 3 and (text == "#" or text.startswith(("# ", "#\t"))):
            return shown(text[1:])
    return ""


def shown(text: str) -> str:
    """A title fit for a form: control and format characters blanked, at most MAX_TITLE_LENGTH."""
    # A bidi override or an escape sequence in a heading could make a host show one
    # name while the user confirms another.
    return stores.blank_controls(text).strip()[: main.MAX_TITLE_LENGTH].strip()
