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
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
READ_BYTES = 64 * 1024  # one read of the event queue; drained in a loop until empty
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
# a header and the longest name (255 bytes, its NUL), padded as the kernel pads it
_MAX_EVENT_BYTES = _HEADER.size + 256
_OVERFLOWED = _HEADER.pack(-1, IN_Q_OVERFLOW, 0, 0)  # the event the kernel queues last when its queue is full


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
        self._held: list[tuple[int, int, str]] = []  # read from the kernel, not yet handed out
        self._over = False  # the last drain() left events unread that were queued when it was called
        # An instance dropped without close() (a store never closed) gives its descriptor
        # back when collected: the kernel allows a user only 128 inotify instances, and
        # a leaked one would push later stores into rescanning.
        self._closer = weakref.finalize(self, os.close, fd)

    def add(self, path: str) -> int:
        """Watch the folder at `path` (never through a symlink); its watch descriptor, or OSError (ENOSPC: the
        limit)."""
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), FOLDER_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def remove(self, wd: int) -> None:
        """Stop watching `wd`; a watch the kernel already dropped is no error."""
        self._libc.inotify_rm_watch(self.fd, wd)

    def drain(self, limit: int) -> list[tuple[int, int, str]]:
        """The events queued when called, oldest first, at most `limit` of them, without blocking; [] when none.

        Only what the kernel held at the call is taken: a process that changes files
        without pause cannot keep the caller reading, and what it queues meanwhile (read
        in the same system call, or still in the kernel) waits for the next call.
        behind() then says whether the call left any of those events unread. A queue
        that overflowed is answered with its IN_Q_OVERFLOW event alone: the events
        before it are no use once some are lost, and are not decoded.
        """
        queued = self._queued()  # bytes of whole events the kernel holds now
        if queued > limit * _MAX_EVENT_BYTES:  # more than `limit` events, whatever their names: not read
            self._over = True
            return []
        chunks: list[bytes] = []
        got = 0
        while got < queued:
            try:
                chunks.append(os.read(self.fd, READ_BYTES))
            except BlockingIOError:
                break
            got += len(chunks[-1])
        data = b"".join(chunks)
        newer = self._parse(data[queued:])  # queued since the call: for the next one
        if data[max(0, queued - _HEADER.size) : queued] == _OVERFLOWED:  # the kernel queues nothing after it
            self._held, self._over = newer, False
            return [(-1, IN_Q_OVERFLOW, "")]
        events = self._held + self._parse(data[:queued])
        self._over = len(events) > limit
        events, self._held = events[:limit], events[limit:] + newer
        return events

    @staticmethod
    def _parse(data: bytes) -> list[tuple[int, int, str]]:
        """The events in `data` (whole events, as the kernel returns them) as (wd, mask, name)."""
        events: list[tuple[int, int, str]] = []
        names: dict[bytes, str] = {}  # a burst names the same few entries again and again: each decoded once
        unpack, offset, end = _HEADER.unpack_from, 0, len(data)
        while offset + _HEADER.size <= end:
            wd, mask, _cookie, length = unpack(data, offset)
            start = offset + _HEADER.size
            raw = data[start : start + length]  # the name, padded with NULs (none holds one)
            name = names.get(raw)
            if name is None:
                name = names[raw] = os.fsdecode(raw.rstrip(b"\0"))
            events.append((wd, mask, name))
            offset = start + length
        return events

    def behind(self) -> bool:
        """True when the last drain() left events unread that were queued when it was called."""
        return self._over

    def _queued(self) -> int:
        """Bytes the kernel holds for the next read."""
        queued = array.array("i", [0])
        fcntl.ioctl(self.fd, termios.FIONREAD, queued)
        return queued[0]

    def close(self) -> None:
        """Close the descriptor (every watch goes with it); later calls do nothing."""
        if self.fd >= 0:
            self._closer()
            self.fd = -1
