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

import errno
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


def split_frontmatter(data: bytes) -> tuple[bytes, bytes]:
    """(frontmatter, the rest): a leading `---` line up to and including the next `---` line; (b"", data) without
    one."""
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
    """The note `name` in the open folder `folder`, read without following a link; None if absent, not a plain file, too
    large or not UTF-8."""
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
    title = (
        folder_paths.heading(data[: folder_paths.TITLE_SCAN_BYTES])
        or folder_paths.shown(stem)
        or folder_paths.shown(name)
    )
    return Loaded(folder_paths.facts(os.fstat(handle)), front, text, title)


def create(folder: int, name: str, data: bytes) -> bool:
    """Write a new file `name` in `folder` holding `data` (mode 0644 less the umask, as any new file); False when the
    name is taken."""
    made = _new_file(folder, name, data, 0o644)
    if made is None:
        return False
    os.close(made)
    return True


def _new_file(folder: int, name: str, data: bytes, mode: int) -> int | None:
    """A new file `name` in `folder` holding `data`, created with `mode` (the umask applies); its open descriptor, or
    None when the name is taken."""
    try:
        handle = os.open(name, _NEW_FLAGS, mode, dir_fd=folder)
    except FileExistsError:
        return None
    except OSError:
        raise stores.StoreRefused(WRITE_REFUSED) from None
    try:
        write_all(handle, data)
        os.fsync(handle)
    except OSError:
        os.close(handle)
        _unlink_quietly(folder, name)
        raise stores.StoreRefused(WRITE_REFUSED) from None
    return handle


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
    root: folder_paths.Root,
    folder: int,
    name: str,
    seen: tuple[int, ...],
    old: bytes,
    new: bytes,
    trash_name: str,
    mkdir: Callable[..., None] = os.mkdir,
) -> tuple[int, int, int, int, int] | bool | str:
    """Replace `name` by `new` if it is still the file whose facts were `seen`, `old` kept in the trash as
    `trash_name` (if given).

    The new file's facts when done; False when the note changed since it was read; a one-line refusal
    when its new version could not keep the note's mode, owner, group or extended
    attributes. Nothing is changed unless it is done.
    """
    note = _metadata(folder, name, seen)
    if note is None:
        return False
    if isinstance(note, str):
        return note
    info, attributes = note
    mode = stat.S_IMODE(info.st_mode)
    kept: tuple[int, str] | None = None
    temp = TEMP_PREFIX + secrets.token_hex(8) + ".tmp"
    handle: int | None = None
    try:
        if trash_name:
            made = _keep(root, trash_name, old, mkdir, mode)
            if isinstance(made, str):
                return made
            kept = made
        handle = _new_file(folder, temp, new, mode)
        if handle is None:
            raise stores.StoreRefused(WRITE_REFUSED)
        why = _same_metadata(handle, info, attributes)
        if why is not None:
            _unlink_quietly(folder, temp)
            _drop_kept(kept)
            return why
        # Facts compared just before the rename: a note edited or swapped for a link since it
        # was read is refused. rename() replaces the entry itself, never a link's target.
        try:
            now = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:
            now = None
        if now is None or not stat.S_ISREG(now.st_mode) or folder_paths.facts(now) != seen:
            _unlink_quietly(folder, temp)
            _drop_kept(kept)
            return False
        written = folder_paths.facts(os.fstat(handle))
        os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        _unlink_quietly(folder, temp)
        _drop_kept(kept)
        raise
    finally:
        if handle is not None:
            os.close(handle)
    _release(kept)
    return written


# What a note's new version must keep of it, or the update is refused, saying why: a
# confirmed edit of its text must not make a private note readable by others (its mode),
# hand it to the server's user (its owner and group), or drop what the extended
# attributes say of it (an ACL is one). The sandbox's filter forbids chmod, chown and
# setxattr, so the mode is given where the file is created (the open call's mode); the
# umask may still take bits from it, which is checked, never assumed.
NOT_OWNER = (
    "The note belongs to another user (uid {owner}; this server runs as uid {me}); a new version written by this "
    "server would belong to uid {me}. Nothing was changed."
)
MODE_NARROWED = (
    "This server's umask takes permission bits from the note's mode ({mode:04o}: a new version would be "
    "{got:04o}) and it may not change a mode here; nothing was changed. Serve with a umask that keeps them (022)."
)
GROUP_CHANGED = (
    "A new version of the note would belong to group {got}, not to group {group} like the note; nothing was changed."
)
XATTRS_UNKEPT = (
    "The note has extended attributes this server may not copy to a new version ({names}); nothing was changed."
)
KERNEL_XATTRS = ("security.",)  # labels the kernel's policy gives a new file itself (SELinux, SMACK, IMA): never copied


def _metadata(
    folder: int, name: str, seen: tuple[int, ...]
) -> tuple[os.stat_result, list[tuple[str, bytes]]] | str | None:
    """(fstat, extended attributes) of the note if it is still the file whose facts were `seen`; None if not; a refusal
    if the server does not own it."""
    try:
        handle = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or folder_paths.facts(info) != seen:
            return None
        if info.st_uid != os.geteuid():
            return NOT_OWNER.format(owner=info.st_uid, me=os.geteuid())
        try:
            names = [n for n in os.listxattr(handle) if not n.startswith(KERNEL_XATTRS)]
            return info, [(n, os.getxattr(handle, n)) for n in names]
        except OSError as exc:
            if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                return info, []  # a file system without extended attributes
            return XATTRS_UNKEPT.format(names="unreadable")
    finally:
        os.close(handle)


def _same_metadata(handle: int, note: os.stat_result, attributes: list[tuple[str, bytes]]) -> str | None:
    """Give the new file `handle` the note's mode, group and extended attributes; None when it has them, else why
    not."""
    mode = stat.S_IMODE(note.st_mode)
    got = stat.S_IMODE(os.fstat(handle).st_mode)
    if got != mode:
        try:
            os.fchmod(handle, mode)  # only the umask's bits, on the server's own new file; EPERM inside the sandbox
        except OSError:
            return MODE_NARROWED.format(mode=mode, got=got)
    group = os.fstat(handle).st_gid
    if group != note.st_gid:
        try:
            os.fchown(handle, -1, note.st_gid)
        except OSError:
            return GROUP_CHANGED.format(got=group, group=note.st_gid)
    for key, value in attributes:
        try:
            os.setxattr(handle, key, value)
        except OSError:
            return XATTRS_UNKEPT.format(names=", ".join(sorted(k for k, _ in attributes)))
    return None


def move(src: int, name: str, seen: tuple[int, ...], dst: int, new_name: str) -> str | None:
    """Move `name` to `dst`/`new_name` if it is still the file read, never over anything; None when done, else "changed"
    or "taken"."""
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


def _keep(
    root: folder_paths.Root, trash_name: str, data: bytes, mkdir: Callable[..., None], mode: int
) -> tuple[int, str] | str:
    """Write `data` to the trash as `trash_name` (a new file, the note's `mode`); (trash descriptor, name) to undo it,
    or why not."""
    trash = folder_trash.open_trash(root, create=True, mkdir=mkdir)
    assert trash is not None
    try:
        handle = _new_file(trash, trash_name, data, mode)
        if handle is None:
            raise stores.StoreRefused(WRITE_REFUSED)
    except BaseException:
        os.close(trash)
        raise
    try:
        got = stat.S_IMODE(os.fstat(handle).st_mode)
        if got != mode:
            try:
                os.fchmod(handle, mode)
            except OSError:
                _unlink_quietly(trash, trash_name)
                os.close(trash)
                return MODE_NARROWED.format(mode=mode, got=got)
    finally:
        os.close(handle)
    return trash, trash_name


def _drop_kept(kept: tuple[int, str] | None) -> None:
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
