"""Linux inotify through ctypes: which entries of watched folders changed, read without blocking.

    watch = Inotify()                 # OSError where the platform has no inotify
    wd = watch.add("/home/alice/Notes")
    for wd, mask, name in watch.drain(1024): ...

No thread: the descriptor is non-blocking and the caller drains it when it is about to
rely on what it learnt (the folder store does so at each lookup). The events only say
where to look again; nothing is trusted from them but the name of the entry to re-read.
Standard library only.
"""

from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import os
import struct
import termios
import weakref

__all__ = ["IN_DELETE_SELF", "IN_IGNORED", "IN_MOVE_SELF", "IN_Q_OVERFLOW", "Inotify"]

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000  # the kernel's queue overflowed: events were lost, look at everything again
IN_IGNORED = 0x8000  # the watch is gone (its folder was removed, or it was removed)
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000  # a symlink named as the folder is not followed
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# Everything that changes an entry's name, content, or metadata, for a folder only.
FOLDER_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
)
READ_BYTES = 64 * 1024  # one read of the event queue; drained in a loop until empty
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
        if not hasattr(libc, name):
            raise OSError(errno.ENOSYS, f"this C library has no {name}")
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


class Inotify:
    """One inotify instance: add folder watches, drain events without blocking, close."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.fd = fd
        self._held: list[tuple[int, int, str]] = []  # read from the kernel, not yet handed out (at most one read's worth)
        # An instance dropped without close() (a store never closed) gives its descriptor
        # back when collected: the kernel allows a user only 128 inotify instances, and
        # a leaked one would push later stores into rescanning.
        self._closer = weakref.finalize(self, os.close, fd)

    def add(self, path: str) -> int:
        """Watch the folder at `path` (never through a symlink); its watch descriptor, or OSError (ENOSPC: the limit)."""
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), FOLDER_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def remove(self, wd: int) -> None:
        """Stop watching `wd`; a watch the kernel already dropped is no error."""
        self._libc.inotify_rm_watch(self.fd, wd)

    def drain(self, limit: int) -> list[tuple[int, int, str]]:
        """At most `limit` queued events as (wd, mask, name), oldest first, without blocking; [] when none.

        Events read from the kernel past `limit` are held here for the next call, so a
        process that changes files faster than they are read cannot keep a caller
        reading: what is left stays queued (and the kernel reports IN_Q_OVERFLOW once
        its queue is full).
        """
        while len(self._held) < limit:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                break
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size : offset + _HEADER.size + length].split(b"\0", 1)[0]
                self._held.append((wd, mask, os.fsdecode(raw)))
                offset += _HEADER.size + length
        events, self._held = self._held[:limit], self._held[limit:]
        return events

    def behind(self) -> bool:
        """True when events are left after the last drain: held here, or queued in the kernel."""
        if self._held:
            return True
        queued = array.array("i", [0])
        fcntl.ioctl(self.fd, termios.FIONREAD, queued)  # bytes the kernel holds for the next read
        return queued[0] > 0

    def close(self) -> None:
        """Close the descriptor (every watch goes with it); later calls do nothing."""
        if self.fd >= 0:
            self._closer()
            self.fd = -1
