"""The notes store over real folders of Markdown files, with containment enforced by the OS.

Exercise four of the lesson: point the server at a notes vault on disk. Each configured
folder is a root; a note is a regular `*.md` file inside a root (sub-folders included).

    nonces = sqlite_store.open_store("nonces.db", clock=time.time)
    store = MarkdownNotesStore(["/home/alice/Notes"], nonces)
    server = main.notes_server(keys=[key], notes=store, policy=AuthorizationPolicy({"alice": ["file:///home/alice/Notes"]}))

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
every entry is examined with lstat semantics, and a file is deleted with
unlinkat(parent_fd, name) after re-checking it is the same regular file. Hidden names
(leading ".") and names a file URI cannot spell are skipped. The nonce is claimed in the
SQLite store's transaction around the unlink (see `MarkdownNotesStore.consume`).
Standard library only.
"""

from __future__ import annotations

import collections
import hashlib
import os
import stat
import unicodedata
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote

import main
import stores
import sqlite_store

TITLE_SCAN_BYTES = 4096  # bytes read from the top of a note to find its `# heading`
MAX_WALK_DEPTH = 16  # sub-folder levels below the workspace that are searched
MAX_WALK_ENTRIES = 100_000  # directory entries examined by one listing; beyond it the listing fails, saying so
NOTE_SUFFIX = ".md"

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


class FolderTooLarge(stores.StoreUnavailable):
    """A listing met more entries than it may examine: it fails rather than offer a partial list."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"That folder holds more than {limit:,} entries; choose a sub-folder as the workspace.")


class MarkdownNotesStore:
    """main.NotesStore over Markdown folders; nonces in an SQLite store's consumed_nonces table."""

    def __init__(
        self, roots: Iterable[str], nonces: sqlite_store.SqliteNotesStore, max_walk_entries: int = MAX_WALK_ENTRIES
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

    def workspace_uris(self) -> list[str]:
        """The roots as canonical file URIs (what the policy must grant)."""
        return [main.format_file_uri(root) for root in self.roots]

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes in the folder `workspace` names, found by a bounded walk that follows no symlink."""
        walk = self._walk(workspace, title)
        return [] if walk is None else main.form_order(walk.found)

    def count(self, workspace: main.Path) -> int:
        """How many notes a listing of `workspace` would offer, counted without opening one (the start-up report)."""
        if workspace in self.described:
            return self.described.pop(workspace)  # counted by describe() just before: one walk, not two
        walk = self._walk(workspace, "", survey=True)
        return 0 if walk is None else walk.surveyed

    def describe(self) -> list[str]:
        """Start-up report lines: each folder as resolved, and what its walk skipped, counted by reason."""
        lines = []
        for root in self.roots:
            written = "/" + "/".join(root)
            shown = written if self.real[root] == written else f"{written} (resolved at start-up to {self.real[root]})"
            try:
                walk = self._walk(root, "", survey=True)
            except stores.StoreUnavailable as exc:  # FolderTooLarge: every call would say the same
                lines.append(f"folder {shown}: {exc}")
                continue
            if walk is None:
                lines.append(f"folder {shown}: cannot be opened")
                continue
            self.described[root] = walk.surveyed  # for the report's workspace line, once (count())
            skipped = "; ".join(f"{reason}: {count}" for reason, count in sorted(walk.skipped.items()))
            lines.append(f"folder {shown}: {walk.surveyed} note{'' if walk.surveyed == 1 else 's'}; skipped {skipped or 'nothing'}")
        return lines

    def _walk(self, workspace: main.Path, title: str, survey: bool = False) -> Walk | None:
        """The finished walk of the folder `workspace` names, or None when no root holds it or it cannot be opened."""
        # The innermost root: a vault linked into another root is listed from its own root.
        root = max((root for root in self.roots if main.is_within(workspace, root)), key=len, default=None)
        if root is None:
            return None
        fd = open_below(self.real[root], workspace[len(root) :])
        if fd is None:
            return None
        walk = Walk(root, title, workspace, [], self.max_walk_entries, survey)
        try:
            walk.folder(fd, workspace[len(root) :], 0)
        finally:
            os.close(fd)
        return walk

    def is_consumed(self, nonce: str) -> bool:
        """True when this confirmation was consumed by any instance sharing the nonce database."""
        return self.nonces.is_consumed(nonce)

    def close(self) -> None:
        """Close the nonce database (checkpointing it); later calls do nothing."""
        self.nonces.close()

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """BEGIN IMMEDIATE; claim the nonce; re-walk, re-stat, re-check and unlink; COMMIT.

        Crash between the unlink and the COMMIT: SQLite rolls the nonce row back, so the
        file is gone but the confirmation is not recorded. A replay of that confirmation
        re-walks, finds no file (or a file with another inode or ctime) and ends CHANGED:
        isError, nothing deleted, the nonce committed then. The deletion itself was the
        one the user confirmed, and a replay can delete nothing else.
        """
        return self.nonces.consume_with(principal, nonce, expires_at, lambda: self._unlink(target, recheck))


    def _unlink(self, target: tuple[str, str] | None, recheck: Callable[[main.Note], bool]) -> main.Settlement:
        if target is None:
            return main.Settlement.CONSUMED
        note_id, version = target
        rel = id_path(note_id)
        if rel is None:
            return main.Settlement.CHANGED
        for root in self.roots:
            fd = open_below(self.real[root], rel[:-1])
            if fd is None:
                continue
            try:
                if self._unlink_in(fd, root, rel, version, recheck):
                    return main.Settlement.DELETED
            finally:
                os.close(fd)
        return main.Settlement.CHANGED

    @staticmethod
    def _unlink_in(fd: int, root: main.Path, rel: main.Path, version: str, recheck: Callable[[main.Note], bool]) -> bool:
        """Unlink rel[-1] in the open folder `fd` if it is still the file the user confirmed."""
        name = rel[-1]
        loaded = load_note(fd, name, root, rel)
        # The version binds path, title, inode, size, mtime and ctime: a file replaced by
        # another with the same name, edited, or renamed here from elsewhere fails it.
        if loaded is None or loaded[0].version != version or not recheck(loaded[0]):
            return False
        try:
            now = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        # Re-stat just before the unlink: an entry swapped for a symlink or another file
        # since the read is refused. unlinkat never follows a symlink in any case.
        if not stat.S_ISREG(now.st_mode) or facts(now) != facts(loaded[1]):
            return False
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return False  # removed by someone else since the re-stat: CHANGED, as for any vanished note
        except OSError:
            # EPERM/EACCES/EROFS (an append-only folder, a read-only mount): raising rolls
            # the nonce claim back, so the user may retry once the folder allows it.
            raise StoreRefused() from None
        return True


class Walk:
    """One bounded, descriptor-relative listing of a workspace folder."""

    def __init__(
        self,
        root: main.Path,
        title: str,
        workspace: main.Path,
        found: list[main.Note],
        limit: int = MAX_WALK_ENTRIES,
        survey: bool = False,
    ) -> None:
        self.root = root
        # survey: count the notes a listing would offer without opening one (the start-up
        # report's walk: a name and a permission check per file, not an open and a read).
        self.survey = survey
        self.surveyed = 0
        self.query = main.fold_title(title)  # folded once per listing, as titles are compared
        self.workspace = workspace
        self.found = found
        self.limit = limit
        self.budget = limit
        self.skipped: collections.Counter[str] = collections.Counter()  # reason -> entries not served

    def folder(self, fd: int, rel: main.Path, depth: int) -> None:
        """List the open folder `fd` (path `rel` below the root); recurse into real sub-folders."""
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                # A folder with millions of entries must not make one call unbounded; and a
                # cut listing must say so, never answer "no note" for a note it did not reach.
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
            elif stat.S_ISREG(info.st_mode) and name.endswith(NOTE_SUFFIX) and self.survey:
                self.count(fd, name, rel + (name,))
            elif stat.S_ISREG(info.st_mode) and name.endswith(NOTE_SUFFIX):
                loaded = load_note(fd, name, self.root, rel + (name,), info)
                if loaded is not None and self.query in loaded[0].folded_title and main.inside_workspace(loaded[0], self.workspace):
                    self.found.append(loaded[0])
            # Symlinks, FIFOs, sockets and devices are never listed or opened.
            elif stat.S_ISLNK(info.st_mode):
                self.skipped[SKIP_SYMLINK] += 1
            elif not stat.S_ISREG(info.st_mode):
                self.skipped[SKIP_SPECIAL] += 1

    def count(self, fd: int, name: str, rel: main.Path) -> None:
        """Survey one regular `*.md` file: a note if readable and its id and URI fit (load_note's checks, without the open)."""
        if not os.access(name, os.R_OK, dir_fd=fd):
            self.skipped[SKIP_UNREADABLE] += 1
            return
        # Every component is plain (listed names were checked), so only the lengths can fail.
        if len(note_id(rel)) > main.MAX_NOTE_ID_LENGTH or len(main.format_file_uri(self.root + rel)) > main.MAX_URI_LENGTH:
            self.skipped[SKIP_UNUSABLE] += 1
            return
        self.surveyed += 1

    def subfolder(self, fd: int, name: str, rel: main.Path, depth: int) -> None:
        """Open the sub-folder `name` of `fd` without following a link, and list it."""
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


def open_below(root: str, below: main.Path) -> int | None:
    """A descriptor for the folder `root` (a resolved path) / below, walking each component below it with O_NOFOLLOW."""
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


def load_note(
    fd: int, name: str, root: main.Path, rel: main.Path, seen: os.stat_result | None = None
) -> tuple[main.Note, os.stat_result] | None:
    """Open `name` in folder `fd` without following links; the Note and its fstat, or None."""
    if not name.endswith(NOTE_SUFFIX):
        return None
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
    except OSError:
        return None  # a symlink (ELOOP), or gone
    try:
        info = os.fstat(handle)
        # The entry listed may have been swapped before the open: trust only what is open.
        # A file with a second hard link may be a file outside the folder linked in (its
        # heading would be shown as a title, and deleting it here would not delete it):
        # not offered, and not deleted.
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or (seen is not None and facts(info)[:2] != facts(seen)[:2]):
            return None
        head = os.read(handle, TITLE_SCAN_BYTES)
    except OSError:
        return None
    finally:
        os.close(handle)
    ident = note_id(rel)
    revision = int.from_bytes(hashlib.sha256(repr(facts(info)).encode("ascii")).digest()[:8], "big")
    note = main.Note(ident, heading(head) or shown(name[: -len(NOTE_SUFFIX)]) or shown(name), main.format_file_uri(root + rel), revision)
    try:
        main.check_note(note)  # e.g. an id over MAX_NOTE_ID_LENGTH or a URI over MAX_URI_LENGTH
    except ValueError:
        return None
    return note, info


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
    return main.blank_controls(text).strip()[: main.MAX_TITLE_LENGTH].strip()
