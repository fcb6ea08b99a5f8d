"""The folder store's trash: a deleted note moves into its folder's `.trash`, stays a while, and can be restored.

A confirmed deletion re-checks that the entry is still the very file the user was shown,
then moves it into the notes folder's `.trash` with renameat2(parent_fd, name, trash_fd,
..., RENAME_NOREPLACE), and checks again that what arrived is that file: a file
exchanged with it between the re-check and the move (renameat2 RENAME_EXCHANGE) is put
back and the deletion refused. In "unlink" mode the file takes the same way and is then
unlinked from the trash, so only the checked file is ever unlinked. Nothing follows a
symlink; the trash is opened without following one, checked to be the same folder
after the move, and the file is put back if it is not. The trash is hidden, so it is
never walked or offered, and no id can name it. Trashed names start with the UTC time,
so emptying reads them in age order and stops at the first young one.

Every refusal is stores.StoreRefused: nothing is deleted, moved or restored.
Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Callable

import folder_paths
import main
import stores

__all__ = ["delete", "empty", "open_trash", "rename_noreplace", "restore_file", "settled", "trash_name_for"]

TRASH_DIR = ".trash"  # in each notes folder; hidden, so never walked or offered, and no id can name it
Facts = tuple[int, ...]  # folder_paths.facts(): device, inode, size, mtime_ns, ctime_ns
Folder = folder_paths.Root  # a notes folder, opened at start-up: never a path, which would be resolved again
DELETE_REFUSED = "The chosen note could not be deleted (the folder does not allow it); nothing was deleted."
TRASH_REFUSED = f"The notes folder's trash ({TRASH_DIR}) is not a plain folder; nothing was deleted."


def delete(
    root: Folder,
    rel: main.Path,
    seen: Facts,
    trash_name: str,
    unlink: bool = False,
    ops: folder_paths.FileOps = folder_paths.OS_OPS,
) -> bool:
    """Move root/rel to the trash as `trash_name` (then, if `unlink`, unlink it there) if it is the file whose facts
    were `seen`; False when not."""
    fd = folder_paths.open_below(root, rel[:-1])
    if fd is None:
        return False
    name = rel[-1]
    try:
        try:
            now = ops.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        # Re-stat just before the move: an entry swapped for a symlink or another file
        # since the read is refused. Neither renameat nor unlinkat follows a symlink.
        if not stat.S_ISREG(now.st_mode) or folder_paths.facts(now) != seen:
            return False
        return move_to_trash(root, fd, name, trash_name, seen, unlink, ops)
    finally:
        os.close(fd)


def same_file(info: os.stat_result, seen: Facts) -> bool:
    """True when `info` (an lstat) is the regular file whose facts were `seen`, its content unchanged."""
    # Device and inode name the file; size and mtime_ns say its content was not written
    # since. The ctime is left out: the move itself sets it.
    return stat.S_ISREG(info.st_mode) and folder_paths.facts(info)[:4] == tuple(seen[:4])


def settled(root: Folder, rel: main.Path, trash_name: str | None) -> bool:
    """True when a deletion of root/rel is done: the file is in the trash as `trash_name`, or (unlinked) gone."""
    return in_trash(root, trash_name) if trash_name else not present(root, rel)


def restore_file(root: Folder, rel: main.Path, trash_name: str, entry_id: int) -> None:
    """Move root/.trash/`trash_name` back to root/rel, never over anything; StoreRefused saying why not."""
    parent = folder_paths.open_below(root, rel[:-1])
    if parent is None:
        raise stores.StoreRefused(f"entry {entry_id}: the note's folder no longer exists; nothing restored")
    try:
        trash = open_trash(root, create=False)
        if trash is None:
            raise stores.StoreRefused(f"entry {entry_id}: the note is no longer in the trash")
        try:
            # Only the regular file the server put there: a link left in its place would
            # make the "restored" note point anywhere on the system.
            if not stat.S_ISREG(os.stat(trash_name, dir_fd=trash, follow_symlinks=False).st_mode):
                raise stores.StoreRefused(
                    f"entry {entry_id}: the trash holds something else than the note; nothing restored"
                )
            rename_noreplace(trash, trash_name, parent, rel[-1])
        except FileExistsError:
            raise stores.StoreRefused(f"entry {entry_id}: a note now exists at its place; nothing restored") from None
        except FileNotFoundError:
            raise stores.StoreRefused(
                f"entry {entry_id}: the note is no longer in the trash (restored or emptied)"
            ) from None
        except OSError:
            raise stores.StoreRefused(
                f"entry {entry_id}: the folder does not allow the move; nothing restored"
            ) from None
        finally:
            os.close(trash)
    finally:
        os.close(parent)


def trash_name_for(name: str, now: float) -> str:
    """A name in the trash no other deletion can take: UTC time, 48 random bits, the original name."""
    prefix = trash_stamp(now) + "-" + secrets.token_hex(6)
    full = f"{prefix}-{name}"
    # A name longer than folder_paths.NAME_MAX is dropped; the audit entry keeps where the note came from.
    return full if len(os.fsencode(full)) <= folder_paths.NAME_MAX else prefix + folder_paths.NOTE_SUFFIX


_TRASHED_RE = re.compile(r"(\d{8}T\d{6}Z)-[0-9a-f]{12}[-.]")


def trash_stamp(at: float) -> str:
    """The time a trash name starts with (UTC, to the second): names sort in the order they were trashed."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))


def open_trash(root: Folder, create: bool, mkdir: Callable[..., None] = os.mkdir) -> int | None:
    """A descriptor for root/.trash, made (by `mkdir`) if asked; None when absent; StoreRefused if it is not a plain
    folder or the root was replaced."""
    fd = folder_paths.open_below(root, ())
    if fd is None:
        root.check(main.format_file_uri(root.path))  # replaced since start-up: no trash of its is ours
        if create:
            raise stores.StoreRefused(DELETE_REFUSED)
        return None
    try:
        if create:
            try:
                mkdir(TRASH_DIR, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError:
                raise stores.StoreRefused(DELETE_REFUSED) from None
        try:
            return os.open(TRASH_DIR, folder_paths.DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if create:
                raise stores.StoreRefused(TRASH_REFUSED) from None
            return None
        except OSError:
            # A symlink (ELOOP) or a file (ENOTDIR) where the trash should be: following it
            # would move notes out of the notes folder, wherever the link points.
            raise stores.StoreRefused(TRASH_REFUSED) from None
    finally:
        os.close(fd)


def same_trash(root: Folder, trash: int) -> bool:
    """True when root/.trash is still the folder `trash` was opened on (not replaced since)."""
    fd = folder_paths.open_below(root, ())
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


def move_to_trash(
    root: Folder,
    fd: int,
    name: str,
    trash_name: str,
    seen: Facts,
    unlink: bool = False,
    ops: folder_paths.FileOps = folder_paths.OS_OPS,
) -> bool:
    """renameat(fd, name, trash, trash_name) into root/.trash (opened without following links), then unlinked there
    if `unlink`.

    False, with the file put back, when what arrived is not the file whose facts were
    `seen`; False when the entry is gone; StoreRefused when the folder refuses.
    """
    trash = open_trash(root, create=True, mkdir=ops.mkdir)
    assert trash is not None
    try:
        if not same_trash(root, trash):
            raise stores.StoreRefused(TRASH_REFUSED)
        try:
            rename_noreplace(fd, name, trash, trash_name)
        except FileNotFoundError:
            return False  # removed by someone else since the re-stat
        except OSError:
            raise stores.StoreRefused(
                DELETE_REFUSED
            ) from None  # EPERM, EROFS, EXDEV (a sub-folder on another file system)
        # The trash swapped for another folder or a link while the file moved: the file went
        # to a folder that is no longer the trash. Put it back and refuse.
        if not same_trash(root, trash):
            put_back(trash, trash_name, fd, name)
            raise stores.StoreRefused(TRASH_REFUSED)
        # Another file exchanged with the checked one between the re-stat and the move
        # (renameat2 RENAME_EXCHANGE, timed by inotify) would be the one moved, and the
        # audit would name the note the user confirmed. What arrived is checked: not the
        # confirmed file, it goes back where it came from, and nothing is deleted.
        try:
            arrived = os.stat(trash_name, dir_fd=trash, follow_symlinks=False)
        except OSError:
            return False  # emptied or moved by someone else at once: nothing to vouch for
        if not same_file(arrived, seen):
            put_back(trash, trash_name, fd, name)
            return False
        if unlink:
            try:
                ops.unlink(trash_name, dir_fd=trash)  # the checked file, in the server's own folder
            except FileNotFoundError:
                pass  # removed by someone else meanwhile: gone, as asked
            except OSError:
                # EPERM/EACCES/EROFS (an append-only trash, a read-only mount): back to its
                # place, the claim released, so the user may retry once the folder allows it.
                put_back(trash, trash_name, fd, name)
                raise stores.StoreRefused(DELETE_REFUSED) from None
        return True
    finally:
        os.close(trash)


def put_back(trash: int, trash_name: str, fd: int, name: str) -> None:
    """Move trash/`trash_name` back to `name` in folder `fd`, never over anything; if the name was taken, it stays in
    the trash."""
    try:
        rename_noreplace(trash, trash_name, fd, name)
    except OSError:
        pass  # the name was taken meanwhile: nothing is overwritten, the file stays where it is


def in_trash(root: Folder, trash_name: str) -> bool:
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


def present(root: Folder, rel: main.Path) -> bool:
    """True when root/rel is (still) a regular file."""
    fd = folder_paths.open_below(root, rel[:-1])
    if fd is None:
        return False
    try:
        return stat.S_ISREG(os.stat(rel[-1], dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def empty(root: Folder, cutoff: float, budget: int, limit: int) -> int:
    """Unlink regular files in root/.trash named before `cutoff`, at most `budget`, listing at most `limit`; what is
    left of it."""
    trash = open_trash(root, create=False)
    if trash is None:
        return budget
    try:
        return _empty(trash, cutoff, budget, limit)
    finally:
        os.close(trash)


def _empty(trash: int, cutoff: float, budget: int, limit: int) -> int:
    names: list[str] = []
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
