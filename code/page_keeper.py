"""Under --stdio: the confirmation pages outlive the process that gave out their links.

Hosts such as llama-index, mcporter and the Inspector CLI start a server process for each
tool call over stdio and end it once the answer is in. The link the first call returned
names this process's loopback listener, so it died with the process, and the next process
named a new port. Here the listener is handed down instead:

    keeper = page_keeper.fork(take_over)   at start-up: after the listener is bound, before the
                                           store opens and before any thread starts
    Announcing(records, keeper.issued)     the server's confirmations table: each link it opens
                                           is told to the keeper (over a pipe)
    (this process ends, however)           the keeper reads end-of-file on that pipe

The keeper is a fork of the server made while it is still one thread with no database
open (a fork after either is unsafe), detached at once: its own session and process group
(a host that kills the server's group, as the official Python SDK does after its grace
period, does not reach it), its stdin, stdout and stderr on /dev/null (a host waiting for
the server's pipes to close is not held up); it is re-parented when the server ends.
It sleeps on the pipe while the server lives. At end-of-file, with no unexpired link it
exits at once; otherwise `take_over(links)` builds the pages over the shared store, in the
server's own sandbox plan, and serves the inherited socket (the same port: the same link)
for those links alone, until each is decided or expired (`keep_until_done`).
The decisions go to the store every process shares, so the next process reads them.
Standard library only; POSIX only (os.fork).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import browser_confirm
import stores

__all__ = ["Announcing", "Keeper", "OnlyThese", "fork", "keep_until_done"]

RECHECK_SECONDS = 5.0  # how often a keeper looks whether its links were decided (it ends when none is pending)
MAX_LINKS = 4096  # links one keeper remembers; an older one is dropped first (its page then reads as not valid)


class Keeper:
    """The server's end of a keeper: tell it each link given out; it takes over when this process ends."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid  # the keeper's process id (it is not this process's child)
        self._pipe = pipe
        self._lock = threading.Lock()

    def issued(self, handle: str, expires_at: float) -> None:
        """The link to `handle` must answer until `expires_at` (best effort: with no keeper, this process serves it)."""
        line = f"{handle} {expires_at!r}\n".encode("ascii")
        with self._lock:
            try:
                os.write(self._pipe, line)
            except OSError:
                pass  # the keeper is gone: the link lives as long as this process, as without one


def fork(take_over: Callable[[dict[str, float]], int]) -> Keeper:
    """Fork the detached keeper; it runs `take_over(links)` once this process ends with links unexpired, then exits."""
    control_r, control_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper
        os.close(control_w)
        os._exit(_keeper(control_r, take_over))
    # No wait for the child here: on a busy machine that would delay the server's first answer.
    os.close(control_r)
    return Keeper(pid, control_w)


def _keeper(control: int, take_over: Callable[[dict[str, float]], int]) -> int:
    """The keeper's life: quiet, wait for the server to end, then keep its unexpired links (or exit at once)."""
    try:
        os.setsid()  # its own session and process group: a host's killpg of the server's group does not reach it
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        os.close(quiet)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(
                signum, signal.SIG_DFL
            )  # the server's handlers raise into a stack this process never returns to
        links = read_links(control)
        return take_over(links) if links else 0
    except BaseException:  # noqa: BLE001 - nothing may unwind into the forked server's stack
        return 1


def read_links(control: int) -> dict[str, float]:
    """Every `handle expires_at` line until end-of-file (the server ended); at most MAX_LINKS, newest kept."""
    links: dict[str, float] = {}
    pending = b""
    while chunk := os.read(control, 65536):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            handle, _, expires = line.decode("ascii", "replace").partition(" ")
            try:
                links[handle] = float(expires)
            except ValueError:
                continue
            if len(links) > MAX_LINKS:
                del links[next(iter(links))]
    os.close(control)
    return links


class Announcing:
    """A confirmations table that tells `issued` of each link it opens: how the keeper learns what to keep."""

    # Told by the table rather than by the pages: every page that gives out a link (the
    # real pages, or the stand-in that starts them) opens its record here first.

    def __init__(self, records: stores.Confirmations, issued: Callable[[str, float], None]) -> None:
        self.records, self.issued = records, issued

    def open(self, record: browser_confirm.Record) -> bool:
        """As Confirmations.open; a record opened is announced with its expiry."""
        opened = self.records.open(record)
        if opened:
            self.issued(record.handle, record.expires_at)
        return opened

    def by_handle(self, handle: str) -> browser_confirm.Record | None:
        """As Confirmations.by_handle."""
        return self.records.by_handle(handle)

    def by_nonce(self, nonce: str) -> browser_confirm.Record | None:
        """As Confirmations.by_nonce."""
        return self.records.by_nonce(nonce)

    def decide(
        self,
        handle: str,
        principal: str,
        status: str,
        note_id: str | None,
        version: str | None,
        credential: str | None = None,
    ) -> bool:
        """As Confirmations.decide."""
        return self.records.decide(handle, principal, status, note_id, version, credential)


class OnlyThese:
    """A confirmations table as the keeper's pages see it: the links it keeps, no other."""

    def __init__(self, records: Any, handles: set[str]) -> None:
        self.records, self.handles = records, handles

    def open(self, record: browser_confirm.Record) -> bool:
        """A keeper gives out no link."""
        return False

    def by_handle(self, handle: str) -> browser_confirm.Record | None:
        """The record of a kept link; None for any other (its page reads as not valid)."""
        return self.records.by_handle(handle) if handle in self.handles else None

    def by_nonce(self, nonce: str) -> browser_confirm.Record | None:
        """Not used by the pages; none."""
        return None

    def decide(
        self,
        handle: str,
        principal: str,
        status: str,
        note_id: str | None,
        version: str | None,
        credential: str | None = None,
    ) -> bool:
        """As Confirmations.decide, for a kept link only."""
        return handle in self.handles and self.records.decide(handle, principal, status, note_id, version, credential)


def keep_until_done(
    records: Any, links: dict[str, float], clock: Callable[[], float], wait: Callable[[float], Any]
) -> None:
    """Return once no kept link is unexpired and pending, looking every RECHECK_SECONDS (or at the last expiry)."""
    while True:
        now = clock()
        live = [
            expires
            for handle, expires in links.items()
            if expires > now
            and (record := records.by_handle(handle)) is not None
            and record.status == browser_confirm.PENDING
        ]
        if not live:
            return
        wait(min(max(live) - now, RECHECK_SECONDS))
