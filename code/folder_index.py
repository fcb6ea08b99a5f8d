"""The folder store's title index: every note's title, read once per file version, kept in memory, told of changes.

One FolderIndex per notes folder (code/markdown_store.py builds them). It is built by
the one tree walk (folder_paths.walk) at the first lookup, and kept up to date from
Linux inotify (code/change_watch.py), drained at each lookup without a thread, or by a
rescan where inotify is missing, refused or out of watches. Titles are found by their
folded trigrams (code/title_index.py, shared with the SQL stores). The index only
narrows: the notes it names are read again through descriptors before they are offered.
Standard library only.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import threading
from array import array
from collections.abc import Callable, Iterable
from typing import Any

import change_watch
import folder_paths
import main
import stores
import title_index

__all__ = ["FolderIndex", "MAX_WATCHED_FOLDERS"]

# folders watched per notes folder; past it (or the kernel's limit) the index rescans instead
MAX_WATCHED_FOLDERS = 65_536
RESCAN_SECONDS = 2.0  # without change notification: the longest a lookup relies on the last rescan
# ... unless a rescan took longer than 1/RESCAN_COST_FACTOR of that: then this many times its length
RESCAN_COST_FACTOR = 10
COMPACT_AFTER = 4096  # dropped title slots tolerated (or as many as live ones) before the slot table is rebuilt
TRIGRAM_BUCKETS = 1 << 16  # posting lists at most: a trigram's is list hash(trigram) % TRIGRAM_BUCKETS
# inotify events one lookup reads (the kernel's default queue); more queued: a rebuild instead
MAX_EVENTS_PER_LOOKUP = 16_384
MAX_PENDING_CHANGES = 4096  # distinct changed entries one lookup looks at again; more: a rebuild instead

Facts = tuple[int, int, int, int, int]  # folder_paths.facts(): device, inode, size, mtime_ns, ctime_ns
# A file's title as read before, with the facts it was read with (None: none kept).
Titles = Callable[[main.Path], tuple[Facts, str] | None]


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
    each lookup: every event queued before it began is applied before it answers, or,
    after a queue overflow or past the per-lookup bounds, the index is rebuilt first
    (one rebuild per lookup at most). Where inotify is missing, refused, or out of watches, a full rescan
    (stat only, files re-read only when their facts changed, unchanged ones keeping
    their slots) runs at a lookup once the last one is rescan_interval old: at least
    RESCAN_SECONDS, and RESCAN_COST_FACTOR times the last rescan's length, so that
    rescanning never takes more than a tenth of the time however large the folder.
    The index only says where to look: the few notes it names are re-read through
    descriptors before they are offered, and the deletion re-checks the file itself
    (folder_trash.delete), so a stale index can only leave a note out or make the
    server ask again, never delete another file.

    It is its own folder_paths.Visitor: a rebuild walks the tree with folder_paths.walk,
    and a change event re-visits one entry with folder_paths.visit_entry.
    """

    def __init__(
        self,
        root: main.Path,
        opened: folder_paths.Root,
        *,
        limit: int,
        watch: bool,
        max_watches: int,
        clock: Callable[[], float],
        scandir: Callable[[int], Any] = os.scandir,
    ) -> None:
        self.root = root
        self.opened = opened  # the folder `root` named at start-up, held open: every read starts from it
        self._scandir = scandir  # how a folder is listed: os.scandir, unless a test injects a slower one
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
        self._known: dict[main.Path, tuple[Facts, int]] = {}  # during a rebuild: path -> (facts, slot) before it
        self._entering_wd: int | None = None  # the watch entering() added, for listed() just after
        self.lost = False  # events were lost while the last rebuild walked: the next lookup rebuilds first
        # with a text index (code/text_index.py): paths indexed or dropped since it last looked
        self.touched: set[main.Path] | None = None
        # during a with_changes() given them: titles read before, by path, with their facts
        self._titles: Titles | None = None
        self._reset()

    def _reset(self) -> None:
        self.folders: dict[main.Path, _Folder] = {}
        self.by_wd: dict[int, main.Path] = {}
        self.files: dict[main.Path, tuple[Facts, int]] = {}  # path -> (facts, slot)
        self.entries = 0
        self.slot_path: list[main.Path | None] = []
        self.slot_title: list[str] = []
        self.slot_folded: list[str] = []
        self.grams: dict[int, array[int]] = {}  # bucket -> slots whose folded title holds a trigram of it
        # slots of titles past title_index.MAX_INDEXED_TITLE_CHARS: tested by every lookup
        self.unindexed: set[int] = set()
        self.dead = 0

    def mode(self) -> str:
        """How this index learns of changes, in words."""
        if self.watch is not None:
            return "changes learnt from Linux inotify"
        return (
            f"changes found by a rescan at most every {RESCAN_SECONDS:g} s, "
            f"or {RESCAN_COST_FACTOR} times the last rescan's length if longer ({self.reason})"
        )

    # ---------------------------------------------------------------- lookups

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes strictly inside `workspace` (below this root) whose title contains `title`, in form order."""
        needle = stores.fold_title(title)
        below = workspace[len(self.root) :]
        with self.lock:
            self._update()
            if self.too_large:
                raise folder_paths.too_large(self.limit)
            hits = [
                (self.slot_path[k], note) for k in self._hits(below, needle) if (note := self._indexed(k)) is not None
            ]
        if len(hits) > main.MAX_CANDIDATES:
            return stores.form_order(note for _, note in hits)  # too many for one form either way: no need to read them
        # The few the index names are read again, as the deletion will read them: the
        # offer shows each file as it is now, and a file changed since it was indexed
        # is offered (or not) for what it now says.
        live = (self._live(path) for path, _ in hits if path is not None)
        return stores.form_order(
            note
            for note in live
            if note is not None and needle in stores.fold_title(note.title) and main.inside_workspace(note, workspace)
        )

    def with_changes(
        self, use: Callable[[dict[main.Path, tuple[Facts, int]], set[main.Path]], None], titles: Titles | None = None
    ) -> None:
        """Bring the index up to date, then call `use(files, touched)` under its lock.

        `files`: every file's (facts, slot); `touched`: the paths changed since the last call.

        `titles` (path -> (facts, title) or None: what the text index kept) spares a walk
        reading a file whose facts are those it was read with.
        """
        with self.lock:
            self._titles = titles
            try:
                self._update()
            finally:
                self._titles = None
            if self.too_large:
                raise folder_paths.too_large(self.limit)
            touched, self.touched = self.touched or set(), set()
            try:
                use(self.files, touched)
            except BaseException:
                self.touched |= touched  # not taken in: the next call is told of them again
                raise

    def _hits(self, below: main.Path, needle: str) -> list[int]:
        """Slots of the notes strictly inside `below` whose folded title holds `needle`."""
        pool: Iterable[int] = range(len(self.slot_path))
        if title_index.uses_title_index(needle):
            postings = sorted((self.grams.get(_bucket(gram), ()) for gram in title_index.trigrams(needle)), key=len)
            # A title holding the query holds each of its trigrams: the two rarest lists
            # together leave a handful of slots even among 100,000 notes. A list shared by
            # trigrams of one bucket only adds slots that the exact test below drops.
            pool = set(postings[0]).intersection(postings[1]) if len(postings) > 1 else set(postings[0])
            pool |= self.unindexed
        n = len(below)
        paths, folded = self.slot_path, self.slot_folded
        return [
            k for k in pool if (p := paths[k]) is not None and len(p) > n and p[:n] == below and needle in folded[k]
        ]

    def _indexed(self, slot: int) -> main.Note | None:
        path = self.slot_path[slot]
        assert path is not None
        return folder_paths.indexed_note(self.root, path, self.slot_title[slot], self.files[path][0])

    def _live(self, path: main.Path) -> main.Note | None:
        fd = folder_paths.open_below(self.opened, path[:-1])
        if fd is None:
            return None
        try:
            loaded = folder_paths.load_note(fd, path[-1], self.root, path)
        finally:
            os.close(fd)
        return loaded[0] if loaded is not None else None

    # ---------------------------------------------------------------- keeping up

    def _update(self) -> None:
        """Bring the index up to every change made before this call: apply the events, or rebuild (rescan when due)."""
        try:
            watching = self.watch is not None and () in self.folders  # built, the root there and watched
            if watching and not self.lost and self._catch_up():
                pass  # every event queued before this lookup began is applied
            elif watching or self.clock() - self.scanned_at >= self.rescan_interval:  # never built: scanned_at is -inf
                # Events were lost (a queue overflow), more wait than one lookup applies, or
                # the index is not built: a walk begun now sees every note made before this
                # lookup. An index served as it was until a rebuild was due never offered a
                # note made after an overflow in the meantime.
                self._rebuild()
                # What changed while the walk ran is queued on the watches it set before
                # each listing. One rebuild per lookup at most: if those events are lost
                # too, this lookup answers from its walk and the next one rebuilds.
                if self.watch is not None and not self._catch_up():
                    self.lost = True
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
        if self.watch is not None and self.built:
            self._renew_watch()
        self.folders, self.by_wd, self.files, self.entries = {}, {}, {}, 0
        self.lost = False
        self.too_large = False
        self.built = True
        self.scanned_at = started = self.clock()
        # Watches are added by path with IN_DONT_FOLLOW, at the folder the root named at
        # start-up (resolved then); events are only hints, every read goes through descriptors.
        self.watch_base = self.opened.real.rstrip("/")
        fd = folder_paths.open_below(self.opened, ())  # None once closed: nothing to offer
        if fd is not None:
            self._known = known
            try:
                folder_paths.walk(fd, (), self, 0, self._scandir)
            finally:
                self._known = {}
                os.close(fd)
        # A file gone, or read again into a new slot, leaves its old slot to the compaction.
        for path, held in known.items():
            if self.files.get(path) != held:
                self._kill_slot(held[1])
        # A rescan of a large folder can outlast RESCAN_SECONDS: spaced by its own length,
        # it cannot keep every lookup waiting on the next one.
        self.rescan_interval = max(RESCAN_SECONDS, RESCAN_COST_FACTOR * (self.clock() - started))

    # ---------------------------------------------------------------- what a walk finds (folder_paths.Visitor)

    def entering(self, fd: int, rel: main.Path) -> None:
        """Watch the folder before it is listed: a change made while the listing runs is not missed."""
        self._entering_wd = self._watch(rel)

    def listed(self, fd: int, rel: main.Path, names: set[str]) -> None:
        """Keep the folder's identity, its watch (added by entering(), just before) and its names."""
        info = os.fstat(fd)
        self.folders[rel] = _Folder((info.st_dev, info.st_ino), self._entering_wd, names)

    def counted(self) -> None:
        """One more entry held; past the limit the index is dropped (_update)."""
        self.entries += 1
        if self.entries > self.limit:
            raise _TooLarge()

    def descend(self, rel: main.Path) -> bool:
        """A sub-folder is walked unless it is indexed already."""
        return rel not in self.folders

    def known(self, rel: main.Path) -> bool:
        """A file indexed before, or whose title the text index kept, is compared by its facts (lstat); a new one is
        read at once."""
        return rel in self._known or self._titles is not None

    def note(self, fd: int, rel: main.Path, info: os.stat_result | None) -> None:
        """Index the note `rel`: kept unread when its facts did not change, else read again."""
        held = self._known.get(rel) if info is not None else None
        if held is not None and info is not None and held[0] == folder_paths.facts(info):
            self.files[rel] = held  # unchanged since the last listing: its slot and postings stay
            return
        kept = self._titles(rel) if self._titles is not None and info is not None else None
        if kept is not None and info is not None and kept[0] == folder_paths.facts(info):
            self._put(rel, kept[0], kept[1])  # as read before start-up, the facts unchanged: trusted as a kept slot is
            return
        read = folder_paths.read_title(
            fd, rel[-1]
        )  # keyed by what it opens: a swap since the lstat is indexed as what it is now
        if read is not None:
            self._put(rel, folder_paths.facts(read[1]), read[0])

    def skip(self, reason: str) -> None:
        """Entries not served leave no trace in the index."""

    def _catch_up(self) -> bool:
        """Look again at every entry named by the events queued now; False (nothing applied) when a rebuild must answer
        instead."""
        assert self.watch is not None
        # Only the events queued when the lookup began are read: a process changing files
        # without pause cannot keep the lookup reading. More than MAX_EVENTS_PER_LOOKUP of
        # them, a queue overflow, or more than MAX_PENDING_CHANGES distinct entries to look
        # at: one rebuild (a walk, unchanged files only lstat-ed) costs less, and is what
        # answers. A name changed many times is looked at once.
        events = self.watch.drain(MAX_EVENTS_PER_LOOKUP)
        if self.watch.behind():
            return False
        pending: dict[main.Path, dict[str, None]] = {}  # folder -> its changed entries, in the order first named
        changed = 0
        for wd, mask, name in events:
            rel = self.by_wd.get(wd)
            if mask & change_watch.IN_Q_OVERFLOW or (
                rel == () and mask & (change_watch.IN_DELETE_SELF | change_watch.IN_MOVE_SELF)
            ):
                return False  # events lost, or the root itself moved: look at everything again
            if rel is None:
                continue  # a folder this index no longer holds
            if mask & change_watch.IN_IGNORED:
                del self.by_wd[wd]
            elif name:
                names = pending.setdefault(rel, {})
                changed += name not in names
                names[name] = None
        if changed > MAX_PENDING_CHANGES:
            return False
        for rel, names in pending.items():
            self._refresh(rel, names)
        return True

    def _refresh(self, rel: main.Path, names: Iterable[str]) -> None:
        """Look again at the entries `names` of the indexed folder `rel`: each added, changed, replaced or gone."""
        folder = self.folders.get(rel)
        fd = folder_paths.open_below(self.opened, rel) if folder is not None else None
        if folder is None or fd is None:
            return  # the folder itself went (or was dropped by an entry of its parent looked at just before)
        try:
            for name in names:
                self._refresh_entry(fd, folder, rel, name)
        finally:
            os.close(fd)

    def _refresh_entry(self, fd: int, folder: _Folder, rel: main.Path, name: str) -> None:
        """Look again at the entry `name` of the open folder `fd` (`folder`, at `rel`)."""
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
        if held is not None and not (
            info is not None and stat.S_ISDIR(info.st_mode) and held.ident == (info.st_dev, info.st_ino)
        ):
            self._drop_folder(path)  # removed, moved away, or replaced by another folder or a link
        if path in self.files:
            # Read again even when its facts look the same: an edit that keeps the size
            # within one tick of the file system's clock leaves them equal, and the
            # event is the better witness.
            self._drop_file(path)
        if info is not None:
            folder_paths.visit_entry(fd, rel, name, self, len(rel), scandir=self._scandir)

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

    def _renew_watch(self) -> None:
        """A new inotify instance for a rebuild: the old one's watches and queued events go with it."""
        # Watches on folders moved out of the tree while events were lost were never
        # removed, and piled up at each overflow until the user's watch limit was reached.
        assert self.watch is not None
        self.watch.close()
        try:
            self.watch = change_watch.Inotify()
        except OSError as exc:  # another process took the user's last instance meanwhile
            self._stop_watching(f"inotify unavailable: {exc.strerror or exc}")

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

    def _put(self, path: main.Path, key: Facts, title: str) -> None:
        """Index `path` with `title`; a previous version of it is dropped."""
        if path in self.files:
            self._drop_file(path)
        slot = len(self.slot_path)
        if self.touched is not None:
            self.touched.add(path)
        folded = stores.fold_title(title)
        self.slot_path.append(path)
        self.slot_title.append(title)
        self.slot_folded.append(folded)
        self.files[path] = (key, slot)
        if not title_index.indexable(folded):
            self.unindexed.add(slot)
            return
        # One list per bucket, not per trigram: with a list (and its key) for each distinct
        # trigram, 190 random CJK characters (every trigram new) cost 44 kB per note.
        # Buckets bound the lists; a title costs 4 bytes per distinct bucket of its trigrams.
        grams = self.grams
        for bucket in {_bucket(gram) for gram in title_index.trigrams(folded)}:
            posting = grams.get(bucket)
            if posting is None:
                grams[bucket] = posting = array("i")
            posting.append(slot)

    def _drop_file(self, path: main.Path) -> None:
        _, slot = self.files.pop(path)
        self._kill_slot(slot)

    def _kill_slot(self, slot: int) -> None:
        path = self.slot_path[slot]
        if self.touched is not None and path is not None:
            self.touched.add(path)
        self.slot_path[slot] = None  # its posting entries go at the next compaction
        self.slot_title[slot] = self.slot_folded[slot] = ""
        self.unindexed.discard(slot)
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
        self.unindexed = set()
        for path, key, title in entries:
            self._put(path, key, title)


def _bucket(gram: str) -> int:
    """The posting list of the trigram `gram` (str hashes are salted per process: no one can aim at one list)."""
    return hash(gram) % TRIGRAM_BUCKETS
