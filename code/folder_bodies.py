"""What the folder store's note tools do to files: read, create, append, replace and move, never following a link.

A note's text, as the note tools see it, is the file after its frontmatter (a leading
`---` line, up to the next `---` line): the frontmatter is kept byte for byte by every
append and update, and never shown as part of the text. Every operation goes through a
descriptor of the note's folder opened component by component with O_NOFOLLOW
(folder_paths.open_below), and the note itself is opened with O_NOFOLLOW: a symlink
planted anywhere on the way fails the operation instead of leading it out of the folder.

    read       the note as it is now: (facts, frontmatter, text), or None
    create     a new file with O_CREAT | O_EXCL: never over an existing one
    append     write at the end of the very file that was read and checked (its descriptor)
    replace    the old bytes into the trash first (a new name there), the new bytes into a
               hidden temporary file beside the note, then rename it over the note, if the
               note is still the file that was read (facts compared just before)
    move       renameat2(RENAME_NOREPLACE): never over an existing note

Every refusal is stores.StoreRefused or a return value the caller audits; nothing is left
half done (a temporary file or a trash copy made for a step that fails is removed).
Standard library only.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from typing import NamedTuple

import folder_paths
import folder_trash
import stores

__all__ = ["Loaded", "MAX_FILE_BYTES", "append", "create", "load", "move", "replace"]

MAX_FILE_BYTES = 262_144  # bytes of one note file the tools read or write; a larger note is not served by them
TEMP_PREFIX = ".notes-mcp-"  # a hidden name: never walked, offered or named by an id
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
WRITE_REFUSED = "The notes folder does not allow this write; nothing was changed."


class Loaded(NamedTuple):
    """One version of one note file as read: its facts, frontmatter bytes, text, and title."""

    facts: tuple[int, int, int, int, int]
    front: bytes
    text: str
    title: str
    mode: int


def split_frontmatter(data: bytes) -> tuple[bytes, bytes]:
    """(frontmatter, the rest): a leading `---` line up to and including the next `---` line; (b"", data) without one."""
    for opening in (b"---\n", b"---\r\n"):
        if data.startswith(opening):
            at = len(opening)
            while at < len(data):
                end = data.find(b"\n", at)
                line = data[at : len(data) if end < 0 else end + 1]
                if line.rstrip(b"\r\n") == b"---":
                    return data[: at + len(line)], data[at + len(line) :]
                if end < 0:
                    break
                at = end + 1
    return b"", data


def load(folder: int, name: str) -> Loaded | None:
    """The note `name` in the open folder `folder`, read without following a link; None if absent, not a plain file, too large or not UTF-8."""
    try:
        handle = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError:
        return None
    try:
        return read_open(handle, name)
    finally:
        os.close(handle)


def read_open(handle: int, name: str) -> Loaded | None:
    """What `load` reads, from an open descriptor (kept by the caller)."""
    try:
        info = os.fstat(handle)
        # A FIFO or device is no note; a second hard link may be a file outside the folder.
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > MAX_FILE_BYTES:
            return None
        data = b""
        while len(data) <= MAX_FILE_BYTES:
            chunk = os.pread(handle, MAX_FILE_BYTES + 1 - len(data), len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    front, rest = split_frontmatter(data)
    try:
        text = rest.decode("utf-8")
    except UnicodeDecodeError:
        return None  # rewriting it as text would change bytes the user never saw
    # The title exactly as the folder store reads it (folder_paths.read_title), frontmatter included.
    stem = name[: -len(folder_paths.NOTE_SUFFIX)] if name.endswith(folder_paths.NOTE_SUFFIX) else name
    title = folder_paths.heading(data[: folder_paths.TITLE_SCAN_BYTES]) or folder_paths.shown(stem) or folder_paths.shown(name)
    return Loaded(folder_paths.facts(os.fstat(handle)), front, text, title, stat.S_IMODE(info.st_mode))


def create(folder: int, name: str, data: bytes) -> bool:
    """Write a new file `name` in `folder` holding `data`; False when the name is taken (nothing written)."""
    try:
        handle = os.open(name, _NEW_FLAGS, 0o644, dir_fd=folder)
    except FileExistsError:
        return False
    except OSError:
        raise stores.StoreRefused(WRITE_REFUSED) from None
    try:
        write_all(handle, data)
        os.fsync(handle)
    except OSError:
        os.close(handle)
        _unlink_quietly(folder, name)
        raise stores.StoreRefused(WRITE_REFUSED) from None
    os.close(handle)
    return True


def append(folder: int, name: str, seen: tuple[int, ...], data: bytes) -> tuple[int, int, int, int, int] | None:
    """Write `data` at the end of `name` if it is still the file whose facts were `seen`; its new facts, or None."""
    try:
        handle = os.open(name, _APPEND_FLAGS, dir_fd=folder)
    except OSError:
        return None
    try:
        if folder_paths.facts(os.fstat(handle)) != seen:
            return None  # changed or replaced since it was read
        write_all(handle, data)
        os.fsync(handle)
        return folder_paths.facts(os.fstat(handle))
    except OSError:
        raise stores.StoreRefused(WRITE_REFUSED) from None
    finally:
        os.close(handle)


def replace(
    root: folder_paths.Root, folder: int, name: str, seen: tuple[int, ...], old: bytes, new: bytes, mode: int, trash_name: str,
    mkdir: Callable[..., None] = os.mkdir,
) -> bool:
    """Replace `name` by `new` if it is still the file whose facts were `seen`, `old` kept in the trash as `trash_name` (if given); False if it changed."""
    kept = _keep(root, trash_name, old, mkdir) if trash_name else None
    temp = TEMP_PREFIX + secrets.token_hex(8) + ".tmp"
    try:
        if not create(folder, temp, new):
            raise stores.StoreRefused(WRITE_REFUSED)
        try:
            os.chmod(temp, mode, dir_fd=folder, follow_symlinks=False)
        except (OSError, NotImplementedError):
            pass  # the new file keeps 0644: readable as before, never more open than that
        # Facts compared just before the rename: a note edited or swapped for a link since it
        # was read is refused. rename() replaces the entry itself, never a link's target.
        try:
            now = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:
            now = None
        if now is None or not stat.S_ISREG(now.st_mode) or folder_paths.facts(now) != seen:
            _unlink_quietly(folder, temp)
            _drop_kept(root, kept)
            return False
        os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        _unlink_quietly(folder, temp)
        _drop_kept(root, kept)
        raise
    _release(kept)
    return True


def move(src: int, name: str, seen: tuple[int, ...], dst: int, new_name: str) -> str | None:
    """Move `name` to `dst`/`new_name` if it is still the file read, never over anything; None when done, else "changed" or "taken"."""
    try:
        now = os.stat(name, dir_fd=src, follow_symlinks=False)
    except OSError:
        return "changed"
    if not stat.S_ISREG(now.st_mode) or folder_paths.facts(now) != seen:
        return "changed"
    try:
        folder_trash.rename_noreplace(src, name, dst, new_name)
    except FileExistsError:
        return "taken"
    except FileNotFoundError:
        return "changed"
    except OSError:
        raise stores.StoreRefused(WRITE_REFUSED) from None
    return None


def write_all(handle: int, data: bytes) -> None:
    """os.write until every byte is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]


def _keep(root: folder_paths.Root, trash_name: str, data: bytes, mkdir: Callable[..., None]) -> tuple[int, str]:
    """Write `data` to the trash as `trash_name` (a new file); (trash descriptor, name) to undo it."""
    trash = folder_trash.open_trash(root, create=True, mkdir=mkdir)
    assert trash is not None
    try:
        if not create(trash, trash_name, data):
            raise stores.StoreRefused(WRITE_REFUSED)
    except BaseException:
        os.close(trash)
        raise
    return trash, trash_name


def _drop_kept(root: folder_paths.Root, kept: tuple[int, str] | None) -> None:
    if kept is not None:
        _unlink_quietly(kept[0], kept[1])
        os.close(kept[0])


def _release(kept: tuple[int, str] | None) -> None:
    """Close the trash descriptor of a kept copy that stays."""
    if kept is not None:
        os.close(kept[0])


def _unlink_quietly(folder: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        pass
