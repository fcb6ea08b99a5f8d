"""Where the folder store's notes are: names, ids and URIs, reached through descriptors, and the one tree walk.

A note of the folder store (code/markdown_store.py) is a regular `*.md` file below a
configured folder, its root. This module says how a file is named and found:

  - id:       its path relative to its root, components joined by "/". A component is
              spelled as it is (`2025/TPS report.md`, `会議/議事録.md`) when it is in NFC
              form and every character is printable; otherwise it is percent-encoded
              whole as in a file URI (`Cafe%CC%81.md`). No plain name contains "%", so
              each id names exactly one path, and a name renders as only one id: two
              names that look alike (NFC and NFD) get visibly different ids.
  - title:    the first `# heading` in the first TITLE_SCAN_BYTES bytes (a UTF-8 byte-order
              mark before it is ignored), else the file name without `.md`.
  - uri:      file:// URI of the configured root's path plus the relative components.
  - revision: a digest of the file's (device, inode, size, mtime_ns, ctime_ns), so
              Note.version binds the path, the title and the exact file the user was shown.

Nothing is resolved by string. The root path comes from the operator and is trusted at
start-up, once: it is opened then (a Root), and every later open goes through
open_below, which takes only that Root, checks that its path still leads to the folder
opened (a path that now leads to another folder opens nothing, and callers answering a
person refuse with Root.check), and starts from the descriptor, never from the path. Every
component below it is opened with O_NOFOLLOW relative to its parent's descriptor, and every
entry is examined with lstat semantics. Hidden names (leading ".") and names a file URI
cannot spell are never served, so the trash is never walked. `walk` is the one walk of a
folder tree: the title index (code/folder_index.py) and the start-up count
(MarkdownNotesStore.describe) both go through it.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import unicodedata
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, unquote

import main
import stores

__all__ = [
    "DIR_FLAGS",
    "FileOps",
    "OS_OPS",
    "MAX_WALK_DEPTH",
    "MAX_WALK_ENTRIES",
    "Root",
    "open_workspace",
    "NAME_MAX",
    "NOTE_SUFFIX",
    "SKIP_UNREADABLE",
    "SKIP_UNUSABLE",
    "TITLE_SCAN_BYTES",
    "facts",
    "heading",
    "id_path",
    "read_head",
    "revision",
    "indexed_note",
    "load_note",
    "note_id",
    "open_below",
    "plain",
    "read_title",
    "root_path",
    "same_folder",
    "shown",
    "too_large",
    "visit_entry",
    "walk",
]

TITLE_SCAN_BYTES = 4096  # bytes read from the top of a note to find its `# heading`
MAX_WALK_DEPTH = 16  # sub-folder levels below a notes folder that are indexed
MAX_WALK_ENTRIES = (
    1_000_000  # directory entries one notes folder may hold, sub-folders included; beyond it lookups fail, saying so
)
NOTE_SUFFIX = ".md"
NAME_MAX = 255  # bytes in one file name (Linux, macOS)

# Names of letters, digits, `-`, `_`, `.`, `~` and spaces, at most NAME_MAX: format_file_uri
# and parse_file_uri give them back as they are, so plain() need not spell the URI out.
_SIMPLE_NAME = re.compile(rf"[A-Za-z0-9_~ -][A-Za-z0-9._~ -]{{0,{NAME_MAX - 1}}}\Z")

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
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

TOO_LARGE = "That notes folder holds more than {limit:,} entries; serve a smaller folder (a sub-folder) instead."


REPLACED = (
    "The notes folder {where} was replaced since the server started; nothing in it is offered, deleted or restored."
    " Restart the server."
)


def too_large(limit: int) -> stores.StoreRefused:
    """The refusal of a listing that met more than `limit` entries: it fails rather than offer a partial list."""
    return stores.StoreRefused(TOO_LARGE.format(limit=limit))


# =====================================================================================
# The one tree walk
# =====================================================================================


class Visitor(Protocol):
    """What a walk tells its caller; each call names the open folder `fd` and a path below the root."""

    def entering(self, fd: int, rel: main.Path) -> None:
        """The folder `rel` is about to be listed (a watch added now misses no change made during the listing)."""

    def listed(self, fd: int, rel: main.Path, names: set[str]) -> None:
        """The folder `rel` holds `names` (every entry, served or not), before any of them is visited."""

    def counted(self) -> None:
        """One more entry was listed; raises to stop a walk past its bound."""

    def descend(self, rel: main.Path) -> bool:
        """Whether to walk the real sub-folder `rel` (within the depth limit)."""

    def known(self, rel: main.Path) -> bool:
        """Whether the regular `*.md` file `rel` must be lstat-ed before note() (else note() gets no stat)."""

    def note(self, fd: int, rel: main.Path, info: os.stat_result | None) -> None:
        """A regular `*.md` file `rel` (its lstat, or None when only the listing said it is a regular file)."""

    def skip(self, reason: str) -> None:
        """An entry not served, for one of the SKIP_* reasons."""


class FileOps(NamedTuple):
    """The file-system calls the folder store makes that a test must see fail or race: os's own unless a test injects
    one."""

    stat: Callable[..., os.stat_result] = os.stat  # the re-stat just before the move
    unlink: Callable[..., None] = os.unlink  # unlink mode's unlink, in the trash
    mkdir: Callable[..., None] = os.mkdir  # the trash folder, made at the first deletion
    scandir: Callable[[int], Any] = os.scandir  # every folder listing of a walk


OS_OPS = FileOps()


def walk(fd: int, rel: main.Path, visitor: Visitor, depth: int, scandir: Callable[[int], Any] = os.scandir) -> None:
    """List the open folder `fd` (path `rel` below the root, `depth` levels below where the walk began) and visit each
    entry."""
    visitor.entering(fd, rel)
    names: dict[str, bool] = {}  # name -> listed as a regular file (the directory entry's type, no stat)
    with scandir(fd) as entries:
        for entry in entries:
            # A folder with millions of entries must not make one call unbounded; and a
            # cut walk must say so, never answer "no note" for a note it did not reach.
            visitor.counted()
            try:
                names[entry.name] = entry.is_file(follow_symlinks=False)
            except OSError:
                names[entry.name] = False
    visitor.listed(fd, rel, set(names))
    for name, is_file in names.items():
        visit_entry(fd, rel, name, visitor, depth, is_file, scandir)


def visit_entry(
    fd: int,
    rel: main.Path,
    name: str,
    visitor: Visitor,
    depth: int,
    is_file: bool = False,
    scandir: Callable[[int], Any] = os.scandir,
) -> None:
    """Visit the entry `name` of the open folder `fd`: a note, a real sub-folder within MAX_WALK_DEPTH (walked), or a
    skip."""
    if not plain(name):
        visitor.skip(SKIP_HIDDEN if name.startswith(".") else SKIP_NAME)
        return
    path = rel + (name,)
    if is_file and name.endswith(NOTE_SUFFIX) and not visitor.known(path):
        # Listed as a file and nothing to compare: no lstat; the open that reads it refuses
        # a link (O_NOFOLLOW), and what is open is what is kept.
        visitor.note(fd, path, None)
        return
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return  # removed since it was listed
    if stat.S_ISDIR(info.st_mode):
        if depth >= MAX_WALK_DEPTH:
            visitor.skip(SKIP_DEEP)
        elif visitor.descend(path):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                visitor.skip(SKIP_FOLDER)
                return  # no permission, swapped for a symlink since the lstat (ELOOP/ENOTDIR), or removed
            try:
                walk(child, path, visitor, depth + 1, scandir)
            finally:
                os.close(child)
    elif stat.S_ISREG(info.st_mode) and name.endswith(NOTE_SUFFIX):
        visitor.note(fd, path, info)
    # Symlinks, FIFOs, sockets and devices are never served or opened.
    elif stat.S_ISLNK(info.st_mode):
        visitor.skip(SKIP_SYMLINK)
    elif not stat.S_ISREG(info.st_mode):
        visitor.skip(SKIP_SPECIAL)


# =====================================================================================
# Names, ids, URIs
# =====================================================================================


def root_path(root: str) -> main.Path:
    """An operator's folder as path components, or StoreError saying what is wrong and what to write instead."""
    if not isinstance(root, str) or not root or "\x00" in root:
        raise stores.StoreError("notes folder must be a non-empty path")
    absolute = os.path.abspath(root)
    # Hosts start servers without a shell: nothing expands `~`, and the working directory
    # is the host's, not the one the operator had in mind. Say so, with the path meant.
    if root.startswith("~"):
        raise stores.StoreError(
            f"notes folder {root} starts with ~, which is not expanded here (hosts start servers without a shell); "
            f"write the absolute path, e.g. {os.path.expanduser(root)}"
        )
    relative = (
        ""
        if os.path.isabs(root)
        else f" (relative to the working directory {os.getcwd()}, which a host chooses; pass an absolute path)"
    )
    if not os.path.lexists(absolute):
        raise stores.StoreError(f"notes folder {absolute} does not exist{relative}")
    if not os.path.isdir(absolute):
        what = (
            "a symlink to nothing"
            if not os.path.exists(absolute)
            else "a file"
            if os.path.isfile(absolute)
            else "not a folder"
        )
        raise stores.StoreError(f"notes folder {absolute} is not a directory (it is {what}){relative}")
    try:
        path = main.parse_file_uri(main.format_file_uri(tuple(p for p in absolute.split("/") if p)))
    except (main.ScopeError, UnicodeEncodeError):
        raise stores.StoreError(f"notes folder {absolute} cannot be named by a file:// URI") from None
    return path


class Root:
    """A configured notes folder, opened once at start-up: every later open below it starts from this descriptor."""

    __slots__ = ("path", "real", "fd", "ident")

    def __init__(self, path: main.Path, real: str) -> None:
        self.path = path  # as the operator wrote it: what the URIs name
        self.real = real  # the folder it named at start-up, links resolved
        # The operator's path, followed once, here; from now on the path is only compared.
        self.fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        info = os.fstat(self.fd)
        # Held open, the folder's inode cannot be freed and reused: equal means the same folder.
        self.ident = (info.st_dev, info.st_ino)

    def replaced(self) -> bool:
        """True when the path no longer leads to the folder opened at start-up (removed, renamed, or swapped)."""
        # A user who may write the folder's parent can rename it away and put a link to
        # another principal's folder (or that folder itself) at its path. Operations go
        # through the descriptor either way; this check makes them refuse, saying so.
        try:
            now = os.stat(self.real)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != self.ident

    def check(self, where: str) -> None:
        """Nothing, or StoreRefused(REPLACED) naming `where` (a URI the caller may see) when replaced()."""
        if self.replaced():
            raise stores.StoreRefused(REPLACED.format(where=where))

    def close(self) -> None:
        """Close the start-up descriptor; later opens below it fail (as for a folder that is gone)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def same_folder(outer: str, below: main.Path, inner: str) -> bool:
    """At start-up: True when the walk of the folder `outer` reaches the folder `inner` at `below` through real folders
    (no symlink)."""
    try:
        # Start-up only (the store's constructor, before any Root exists): the operator's paths.
        fd = descend(os.open(outer, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), below)
    except OSError:
        return False
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


def open_below(root: Root, below: main.Path) -> int | None:
    """The one way into a folder after start-up: the root checked first, then root/below from the start-up
    descriptor, each component O_NOFOLLOW.

    None, with nothing opened, when the root's path no longer leads to the folder opened
    at start-up (Root.replaced: callers that answer a person say so first, by Root.check),
    or when a component is missing, not a plain folder, or a link.
    """
    # A path string would be resolved again, following whatever link now sits at it: a
    # principal who may rename their folder's parent would reach another principal's
    # folder. Only the descriptor opened at start-up is accepted.
    if not isinstance(root, Root):
        raise TypeError("open_below takes the Root opened at start-up, never a path")
    if root.replaced():
        return None
    try:
        # A new open file description of the start-up folder (not a dup: two listings
        # must not share one directory offset).
        fd = os.open(".", DIR_FLAGS, dir_fd=root.fd)
    except OSError:
        return None  # closed (the store is closing)
    return descend(fd, below)


def descend(fd: int, below: main.Path) -> int | None:
    """From the open folder `fd` (consumed: closed here), the folder `below` it, each component opened O_NOFOLLOW; or
    None."""
    for name in below:
        # `..` would climb out of the parent; a symlink would leave the tree. Both fail here.
        if not plain(name):
            os.close(fd)
            return None
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = child
    return fd


# Why a workspace inside a notes folder lists nothing: said apart from "no note matches",
# or the model tells the user the note does not exist. Only the final component (the
# workspace the caller named, inside their grant) is described; a component above it
# may lie above the grant, so its failure is told in words that say nothing of which.
WORKSPACE_MISSING = "Workspace {where} does not exist."
WORKSPACE_FILE = "Workspace {where} is a file, not a folder."
WORKSPACE_SPECIAL = "Workspace {where} is not a folder."
WORKSPACE_LINK = "Workspace {where} is a symbolic link, which this server does not follow."
WORKSPACE_UNREADABLE = "Workspace {where} is a folder this server may not read."
WORKSPACE_HIDDEN = (
    "Workspace {where} is a hidden folder (or has a name a file URI cannot spell), which this server does not serve."
)
WORKSPACE_PATH = (
    "Workspace {where} cannot be reached: a folder on its path is missing, a file, unreadable or a symbolic link,"
    " which this server does not follow."
)


def open_workspace(root: Root, below: main.Path, where: str) -> int:
    """A descriptor for the folder root/below, or StoreRefused saying in one line why it is not one; `where` names
    it."""
    root.check(where)
    fd = open_below(root, ())
    if fd is None:
        raise stores.StoreRefused(REPLACED.format(where=where))
    for k, name in enumerate(below):
        last = k == len(below) - 1
        if not plain(name):
            os.close(fd)
            raise stores.StoreRefused(WORKSPACE_HIDDEN.format(where=where))
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError:
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                info = None
            os.close(fd)
            raise stores.StoreRefused(
                (workspace_problem(info) if last else WORKSPACE_PATH).format(where=where)
            ) from None
        os.close(fd)
        fd = child
    return fd


def workspace_problem(info: os.stat_result | None) -> str:
    """Which WORKSPACE_* message an entry that could not be opened as a folder deserves (its lstat, or None if
    absent)."""
    if info is None:
        return WORKSPACE_MISSING
    if stat.S_ISLNK(info.st_mode):
        return WORKSPACE_LINK
    if stat.S_ISDIR(info.st_mode):
        return WORKSPACE_UNREADABLE
    return WORKSPACE_FILE if stat.S_ISREG(info.st_mode) else WORKSPACE_SPECIAL


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
    read = read_head(fd, name, TITLE_SCAN_BYTES)
    if read is None:
        return None
    head, info = read
    return heading(head) or shown(name[: -len(NOTE_SUFFIX)]) or shown(name), info


def read_head(fd: int, name: str, limit: int) -> tuple[bytes, os.stat_result] | None:
    """Open the note `name` in folder `fd` without following links: (its first `limit` bytes, its fstat), or None."""
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
        return os.read(handle, limit), info
    except OSError:
        return None
    finally:
        os.close(handle)


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
