"""The notes store over real folders of Markdown files, with containment enforced by the OS.

Exercise four of the lesson: point the server at a notes vault on disk. Each configured
folder is a root; a note is a regular `*.md` file inside a root (sub-folders included).

    nonces = sqlite_store.open_ledger("nonces.db", clock=time.time)
    store = MarkdownNotesStore(["/home/alice/Notes"], nonces)
    server = frame.notes_server(keys=[key], notes=store, policy=AuthorizationPolicy({"alice": ["file:///home/alice/Notes"]}))

Five modules, one concern each:
  - code/folder_paths.py   how a note is named (id, title, URI, revision) and reached:
                           through the start-up descriptor (open_below, the one way in),
                           never following a link; the one tree walk.
  - code/folder_index.py   the title index of each root, kept up to date.
  - code/folder_trash.py   the deletion's move into `.trash`, emptying it, restoring from it.
  - code/folder_bodies.py  what the note tools do to a file: read, create, append, replace, move.
  - this module            the store: the seam (`candidates`, `consume`, `is_consumed`),
                           the note tools' steps, the start-up count, the audit.

Ids are unique within a root; roots are disjoint (a root inside another is dropped), and
a confirmation names (id, version) where the version binds the full URI. The nonce is
claimed, with a pending audit entry, in the SQLite store's transaction before the move
(see `MarkdownNotesStore.consume`). Errors are the classes of code/stores.py only.
Standard library only.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

import audit
import folder_bodies
import folder_index
import folder_paths
import folder_trash
import main
import note_bodies
import stores
import text_index

__all__ = ["MarkdownNotesStore"]

EMPTY_INTERVAL_SECONDS = 3600.0  # an instance lists its trash folders for expired notes at most this often
PREVIEW_BYTES = 2048  # bytes read from the top of a note for the confirmation page's preview
PREVIEW_LINES = 4  # lines of the note shown under its title there
PREVIEW_LINE_CHARS = 160  # characters of one such line
NO_FOLDER = "The folder of that place does not exist in the workspace (or is not a plain folder); nothing was changed."
UNREACHABLE = (
    f"At that place the note's id would be longer than {stores.MAX_NOTE_ID_LENGTH} characters or its URI longer than "
    f"{main.MAX_URI_LENGTH:,}, where no tool reaches it; nothing was moved. Choose a shorter path."
)
TOO_DEEP = (
    f"That place is more than {folder_paths.MAX_WALK_DEPTH} folders below the notes folder, "
    "where no search or deletion reaches a note; nothing was changed."
)
NAME_TOO_LONG = f"That file name is longer than {folder_paths.NAME_MAX} bytes; nothing was moved."


class MarkdownNotesStore(stores.SettleSeam):
    """stores.Store over Markdown folders; nonces, audit and the page's decisions in its ledger (an SQLite file of its
    own)."""

    def __init__(
        self,
        roots: Iterable[str],
        nonces: stores.Ledger,
        max_walk_entries: int = folder_paths.MAX_WALK_ENTRIES,
        retention: audit.Retention | None = None,
        *,
        watch: bool = True,
        max_watches: int = folder_index.MAX_WATCHED_FOLDERS,
        clock: Callable[[], float] = time.monotonic,
        ops: folder_paths.FileOps = folder_paths.OS_OPS,
        text_index_path: str | None = None,
    ) -> None:
        # Each root as the operator wrote it (its URI) and the folder it names, resolved once,
        # here: a folder reached through a symlink (macOS's /tmp, a vault linked into another
        # folder) is served at the written path, and re-pointing the link later changes nothing.
        real: dict[main.Path, str] = {}
        for written in roots:
            path = folder_paths.root_path(written)
            real.setdefault(path, os.path.realpath("/" + "/".join(path)))
        # Disjoint roots: a file inside two roots would have two ids and could be offered twice.
        # A root the outer root's walk reaches through real folders is dropped; one reached
        # through a symlink is its own root (the outer walk never follows the link).
        self.roots = tuple(
            sorted(
                p
                for p in real
                if not any(
                    q != p and main.is_within(p, q) and folder_paths.same_folder(real[q], p[len(q) :], real[p])
                    for q in real
                )
            )
        )
        # Each root opened here, once: every lookup, move, restore and emptying starts from
        # this descriptor, and refuses when the path now leads elsewhere (Root.check).
        self.dirs: dict[main.Path, folder_paths.Root] = {}
        for root in self.roots:
            try:
                self.dirs[root] = folder_paths.Root(root, real[root])
            except OSError as exc:
                self.close_dirs()
                raise stores.StoreError(f"notes folder {real[root]} cannot be opened ({exc.strerror or exc})") from None
        # Two configured paths that are one folder (a link put at one principal's path,
        # leading to another's folder) would serve that folder to both: refused, not guessed.
        first: dict[tuple[int, int], main.Path] = {}
        for root, opened in self.dirs.items():
            other = first.setdefault(opened.ident, root)
            if other != root:
                self.close_dirs()
                raise stores.StoreError(
                    f"notes folders {'/' + '/'.join(other)} and {'/' + '/'.join(root)} are one folder "
                    "(a symbolic link leads from one to the other, or both to it); configure it once"
                )
        self.nonces = self.ledger = nonces  # the confirmation database's ledger: nonces, audit, the page's decisions
        self.texts: stores.Texts | None = self
        self.max_walk_entries = max_walk_entries
        self.described: dict[
            main.Path, int
        ] = {}  # root -> notes counted by the last describe(), until count() takes it
        # One title index per root, built at its first lookup. No thread is started:
        # change events are drained at each lookup (a sandbox may confine the process
        # after construction, and it must be applied before any thread exists).
        self.indexes = {
            root: folder_index.FolderIndex(
                root,
                self.dirs[root],
                limit=max_walk_entries,
                watch=watch,
                max_watches=max_watches,
                clock=clock,
                scandir=ops.scandir,
            )
            for root in self.roots
        }
        # The text search's index (code/text_index.py): its own SQLite file in the state
        # folder (never in a notes folder), or in memory; told of changes by the title indexes.
        try:
            self.text_index = text_index.FolderTextIndex(
                text_index_path
            )  # its deadline on time.monotonic, whatever `clock` is
        except sqlite3.Error as exc:
            self.close_dirs()
            raise stores.StoreError(f"text index {text_index_path} cannot be opened ({exc})") from None
        for index in self.indexes.values():
            index.touched = set()
        self.retention = retention or nonces.retention
        nonces.retention = self.retention  # the confirmations database prunes the audit with the same bounds
        self._emptied_at = -math.inf  # when this instance last emptied its trash folders (store clock)
        self._ops = ops  # the file-system calls a test may make fail or race: os's own otherwise
        try:
            self.recover()
        except stores.StoreError:
            pass  # the database is busy now: the next listing (or start) completes what a crash left

    def workspace_uris(self) -> list[str]:
        """The roots as canonical file URIs (what the policy must grant)."""
        return [main.format_file_uri(root) for root in self.roots]

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """Notes in the folder `workspace` names, found through the root's title index and re-read live."""
        root = self._served(workspace)
        if root is None:
            return []
        where = main.format_file_uri(workspace)
        # The workspace itself is opened as the deletion will open it: a symlinked folder
        # named in the URI, a file, or one that is gone lists nothing, saying which.
        os.close(folder_paths.open_workspace(self.dirs[root], workspace[len(root) :], where))
        return self.indexes[root].candidates(workspace, title)

    def _served(self, workspace: main.Path) -> main.Path | None:
        """The root serving `workspace` (None: no root holds it), or StoreRefused(REPLACED) naming the workspace when
        that root was replaced."""
        # A folder swapped for another one (a link to another principal's folder, that
        # folder renamed into its place, or any folder outside) serves nothing, saying so.
        # Every later open goes through folder_paths.open_below, which checks again.
        root = self._root_of(workspace)
        if root is not None:
            self.dirs[root].check(main.format_file_uri(workspace))
        return root

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
        """Start-up report lines: how the title index learns of changes; each folder as resolved, with what it
        skipped."""
        modes = sorted({index.mode() for index in self.indexes.values()})
        lines = [
            f"Markdown folders ({len(self.roots)}): title index kept per file, built at the first lookup; "
            + "; ".join(modes)
        ]
        for root in self.roots:
            written = "/" + "/".join(root)
            resolved = self.dirs[root].real
            shown = written if resolved == written else f"{written} (resolved at start-up to {resolved})"
            try:
                survey = self._survey(root)
            except stores.StoreUnavailable as exc:  # too many entries: every call would say the same
                lines.append(f"folder {shown}: {exc}")
                continue
            if survey is None:
                lines.append(f"folder {shown}: cannot be opened")
                continue
            self.described[root] = survey.surveyed  # for the report's workspace line, once (count())
            skipped = "; ".join(f"{reason}: {count}" for reason, count in sorted(survey.skipped.items()))
            plural = "" if survey.surveyed == 1 else "s"
            lines.append(f"folder {shown}: {survey.surveyed} note{plural}; skipped {skipped or 'nothing'}")
        return lines

    def _survey(self, workspace: main.Path) -> Survey | None:
        """The finished survey of the folder `workspace` names, or None when no root holds it or it cannot be opened."""
        root = self._root_of(workspace)
        if root is None:
            return None
        fd = folder_paths.open_below(self.dirs[root], workspace[len(root) :])
        if fd is None:
            return None
        survey = Survey(root, self.max_walk_entries)
        try:
            folder_paths.walk(fd, workspace[len(root) :], survey, 0)
        finally:
            os.close(fd)
        return survey

    def is_consumed(self, nonce: str) -> bool:
        """True when this confirmation was consumed by any instance sharing the nonce database."""
        return self.nonces.is_consumed(nonce)

    def close(self) -> None:
        """Stop watching the folders and close the nonce database (checkpointing it); later calls do nothing."""
        # The text index first: a background step still running reads through the folders'
        # descriptors, and would take every file for gone once they are closed.
        self.text_index.close()
        for index in self.indexes.values():
            index.close()
        self.close_dirs()
        self.nonces.close()

    def close_dirs(self) -> None:
        """Close the folders' start-up descriptors."""
        for opened in self.dirs.values():
            opened.close()

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
                self.dirs[root].check(
                    main.format_file_uri(root + rel[:-1])
                )  # swapped since the re-check: nothing moves
                moved = folder_trash.delete(self.dirs[root], rel, seen, trash_name, not self.retention.trash, self._ops)
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
        record: stores.Record,
        chosen: list[tuple[main.Path, main.Path, tuple[int, ...], str]],
    ) -> main.Settlement:
        """Inside the claim transaction: re-walk, re-read and re-check; DELETED (pending), CHANGED or CONSUMED."""
        if target is None:
            return main.Settlement.CONSUMED
        note_id, version = target
        rel = folder_paths.id_path(note_id) or ()  # () for an id no path spells: nothing to walk
        for root in self.roots if rel else ():
            fd = folder_paths.open_below(self.dirs[root], rel[:-1])
            if fd is None:
                # Replaced since start-up, and the root the caller's workspace is in (the
                # re-check passes on the note's place there): refused (rolled back) saying
                # so, never "changed". Another principal's replaced root is passed over.
                if self.dirs[root].replaced() and recheck(
                    main.Note(note_id, note_id, main.format_file_uri(root + rel), 0)
                ):
                    self.dirs[root].check(main.format_file_uri(root + rel[:-1]))
                continue
            try:
                loaded = folder_paths.load_note(fd, rel[-1], root, rel)
            finally:
                os.close(fd)
            # The version binds path, title, inode, size, mtime and ctime: a file replaced by
            # another with the same name, edited, or renamed here from elsewhere fails it.
            if loaded is None or loaded[0].version != version or not recheck(loaded[0]):
                continue
            note, info = loaded
            # The very file, read through the start-up descriptor, but its folder's path now
            # leads elsewhere: refused (rolled back), the URI the audit would name is no longer it.
            self.dirs[root].check(main.format_file_uri(root + rel[:-1]))
            # In unlink mode too the file passes through the trash, checked there, then unlinked.
            trash_name = folder_trash.trash_name_for(rel[-1], self.nonces.now())
            chosen.append((root, rel, folder_paths.facts(info), trash_name))
            record(
                main.Settlement.DELETED,
                audit.Facts(note.id, note.title, note.uri, trash_name if self.retention.trash else None),
                pending=True,
            )
            return main.Settlement.DELETED
        record(main.Settlement.CHANGED, audit.Facts(note_id))
        return main.Settlement.CHANGED

    def preview(self, note: main.Note) -> tuple[float, list[str]] | None:
        """(last change, the first lines after the heading) of `note` as listed, read through the descriptors; None if
        it changed."""
        rel = folder_paths.id_path(note.id) or ()  # () for an id no path spells: nothing to walk
        for root in self.roots if rel else ():
            fd = folder_paths.open_below(self.dirs[root], rel[:-1])  # None when replaced: nothing shown
            if fd is None:
                continue
            try:
                read = folder_paths.read_head(fd, rel[-1], PREVIEW_BYTES)
            finally:
                os.close(fd)
            # Shown only if it is the very file listed (same inode, size and times): never another's text.
            if read is None or folder_paths.revision(folder_paths.facts(read[1])) != note.revision:
                continue
            text = read[0].decode("utf-8", "replace").splitlines()
            body = (
                [line for line in text[1:] if line.strip()]
                if text and text[0].startswith("#")
                else [line for line in text if line.strip()]
            )
            lines = [stores.blank_controls(line)[:PREVIEW_LINE_CHARS] for line in body[:PREVIEW_LINES]]
            return read[1].st_mtime, lines
        return None

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
            if located is not None and self.dirs[located[0]].replaced():
                continue  # its folder cannot be looked at: left pending until a restart serves it again
            if located is not None and folder_trash.settled(
                self.dirs[located[0]], located[1], entry["trash"] and str(entry["trash"])
            ):
                self.nonces.complete_audit(entry["id"], audit.DELETED, audit.PENDING)
            elif now - float(entry["at"]) >= audit.PENDING_GRACE_SECONDS:  # not another instance's move in flight
                self.nonces.complete_audit(entry["id"], audit.INTERRUPTED, audit.PENDING)

    def empty_trash(self) -> None:
        """Unlink up to PRUNE_BATCH trashed files older than the retention, in each root's trash only."""
        cutoff = self.nonces.now() - self.retention.trash_seconds
        budget = audit.PRUNE_BATCH
        for root in self.roots:
            if not self.dirs[root].replaced():  # a swapped folder's trash is not ours to empty
                budget = folder_trash.empty(self.dirs[root], cutoff, budget, self.max_walk_entries)

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """The confirmations database's audit entries (pending ones completed first where they can be)."""
        self.recover()
        return self.nonces.audit_entries(principal, since, outcome)

    def complete_audit(self, entry_id: int, outcome: str, expected: str) -> None:
        """As the confirmations database's."""
        self.nonces.complete_audit(entry_id, outcome, expected)

    def restore(self, entry_id: int) -> dict[str, object]:
        """Move a trashed file back to where it was, refusing (StoreRefused) if anything is there now; audited."""
        entry = self.nonces.audit_entry(entry_id)
        if entry is not None and entry["outcome"] in (audit.UPDATED, audit.APPENDED) and entry["trash"]:
            return self.undo_update(entry)
        if entry is not None and entry["outcome"] == audit.MOVED:
            return self.undo_move(entry)
        trash_name = entry["trash"] if entry is not None and entry["outcome"] == audit.DELETED else None
        located = self.locate(str(entry["uri"])) if trash_name and entry is not None else None
        if entry is None or not trash_name or located is None:
            raise stores.StoreRefused(f"entry {entry_id} is not a deletion into the trash of a folder served here")
        root, rel = located
        # Replaced since start-up: the trash and the place the path now reaches are another folder's.
        self.dirs[root].check(main.format_file_uri(root))
        folder_trash.restore_file(self.dirs[root], rel, str(trash_name), entry_id)
        return self.nonces.record_restore(
            entry_id, audit.Facts(str(entry["note_id"]), entry["title"], entry["uri"], str(trash_name))
        )

    # ---------------------------------------------------------------- note bodies (code/folder_bodies.py)

    def _opened(self, workspace: main.Path, note_id: str) -> tuple[main.Path, main.Path, int] | None:
        """(root, path below it, descriptor of its folder) of the note `note_id` in the root serving `workspace`."""
        root, rel = self._served(workspace), folder_paths.id_path(note_id)
        if root is None or rel is None:
            return None
        fd = folder_paths.open_below(self.dirs[root], rel[:-1])
        return None if fd is None else (root, rel, fd)

    def _loaded(self, root: main.Path, rel: main.Path, fd: int) -> tuple[main.Note, folder_bodies.Loaded] | None:
        """The note at `rel` in the open folder `fd`, as the store names it, and what was read."""
        loaded = folder_bodies.load(fd, rel[-1])
        note = folder_paths.indexed_note(root, rel, loaded.title, loaded.facts) if loaded is not None else None
        return None if note is None or loaded is None else (note, loaded)

    def note_text(self, note_id: str, workspace: main.Path) -> tuple[main.Note, str] | None:
        """The note `note_id` of the folder serving `workspace` and its text after the frontmatter, read now; None if it
        cannot be."""
        opened = self._opened(workspace, note_id)
        if opened is None:
            return None
        root, rel, fd = opened
        try:
            found = self._loaded(root, rel, fd)
        finally:
            os.close(fd)
        return None if found is None else (found[0], found[1].text)

    def search_text(
        self, workspace: main.Path, query: str, limit: int, offset: int = 0
    ) -> tuple[list[tuple[main.Note, str]], bool]:
        """Notes in `workspace` holding every term of `query`, ranked by the text index, `limit` from `offset`; True
        when its row bound was met or the index is not yet up to date."""
        root = self._served(workspace)
        parsed = text_index.parse(query)
        if root is None or not parsed.terms:
            return [], False
        try:
            complete = self.text_index.catch_up(root, self.dirs[root], self.indexes[root].with_changes)
            paths, stopped = self.text_index.search(root, workspace[len(root) :], parsed, limit, offset)
            stopped = stopped or not complete
        except sqlite3.OperationalError as exc:
            # Another instance holding the index past the busy timeout, or a full disk: the
            # search says the store is busy (one line, no path); the index is as it was.
            raise (
                stores.StoreBusy()
                if "locked" in str(exc)
                else stores.StoreRefused("The search index could not be read or written.")
            ) from None

        def load(rel: main.Path) -> tuple[main.Note, folder_bodies.Loaded] | None:
            fd = folder_paths.open_below(self.dirs[root], rel[:-1])
            if fd is None:
                return None
            try:
                return self._loaded(root, rel, fd)
            finally:
                os.close(fd)

        return text_index.folder_hits(paths, load, parsed), stopped

    def audit_refusal(self, principal: str, facts: audit.Facts) -> None:
        """One `refused` audit entry for `principal` (a call refused before any store step), in the confirmations
        database."""
        self.nonces.audit_refusal(principal, facts)

    def create_note(self, principal: str, workspace: main.Path, title: str, body: str) -> main.Note | str:
        """A new file `title.md` (or `title-2.md`, ...) in `workspace`, never over one (audited `created`); or why not
        (audited `refused`)."""
        root = self._root_of(workspace)
        data = f"# {title}\n\n{body}".encode()

        def act(record: note_bodies.Record) -> main.Note | str:
            self._served(workspace)  # replaced: StoreRefused, the transaction (and its audit entry) rolled back
            # A folder deeper than the index walks would hold a note no tool reaches again.
            if root is not None and len(workspace) - len(root) > folder_paths.MAX_WALK_DEPTH:
                record(audit.REFUSED, audit.Facts(None, title, None))
                return TOO_DEEP
            fd = folder_paths.open_below(self.dirs[root], workspace[len(root) :]) if root is not None else None
            if root is None or fd is None:
                record(audit.REFUSED, audit.Facts(None, title, None))
                return NO_FOLDER
            try:
                for place in note_bodies.new_place(workspace, title):
                    rel = place[len(root) :]
                    if folder_paths.indexed_note(root, rel, title, (0, 0, 0, 0, 0)) is None:
                        break  # its id or URI would be too long: so would every later one
                    if folder_bodies.create(fd, rel[-1], data):
                        found = self._loaded(root, rel, fd)
                        assert found is not None
                        record(audit.CREATED, audit.Facts(found[0].id, found[0].title, found[0].uri))
                        return found[0]
            finally:
                os.close(fd)
            record(audit.REFUSED, audit.Facts(None, title, None))
            return note_bodies.NO_PLACE

        return self.nonces.audited(principal, act)

    def _checked(
        self, workspace: main.Path, note_id: str, check: note_bodies.Check, record: note_bodies.Record
    ) -> tuple[Any, ...] | str:
        """(root, rel, fd, note, loaded) of the note `note_id` if `check` passes on it as it is now (the caller closes
        fd); else CHANGED, audited `refused`."""
        opened = self._opened(workspace, note_id)
        if opened is None:
            record(audit.REFUSED, audit.Facts(note_id))
            return note_bodies.CHANGED
        root, rel, fd = opened
        try:
            found = self._loaded(root, rel, fd)
        except BaseException:
            os.close(fd)
            raise
        if found is None or not check(found[0], found[1].text):
            os.close(fd)
            record(audit.REFUSED, audit.Facts(note_id))
            return note_bodies.CHANGED
        return root, rel, fd, found[0], found[1]

    def append_note(
        self, principal: str, workspace: main.Path, note_id: str, text: str, check: note_bodies.Check
    ) -> tuple[main.Note, str] | str:
        """`text` written at the end of the very file `check` passed on (audited `appended`); or why not (audited
        `refused`)."""

        def act(record: note_bodies.Record) -> tuple[main.Note, str] | str:
            if self.retention.trash:  # the version before the append kept in the trash, restorable like an update's
                return self._rewrite(record, workspace, note_id, lambda old: old + text, check, audit.APPENDED)
            checked = self._checked(workspace, note_id, check, record)
            if isinstance(checked, str):
                return checked
            root, rel, fd, note, loaded = checked
            try:
                added = text.encode("utf-8")
                if len(loaded.front) + len(loaded.text.encode("utf-8")) + len(added) > folder_bodies.MAX_FILE_BYTES:
                    record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
                    return note_bodies.TOO_LONG
                after = self._loaded(root, rel, fd) if folder_bodies.append(fd, rel[-1], loaded.facts, added) else None
                if after is None:
                    record(audit.REFUSED, audit.Facts(note_id))
                    return note_bodies.CHANGED
                record(audit.APPENDED, audit.Facts(note.id, note.title, note.uri))
                return after[0], after[1].text
            finally:
                os.close(fd)

        return self.nonces.audited(principal, act)

    def update_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        body: str,
        check: note_bodies.Check,
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """One claim transaction: claim, re-read and re-check, old bytes to the trash, new bytes (frontmatter kept)
        renamed over the note; audited."""

        def act(record: note_bodies.Record) -> main.Note | str:
            done = self._rewrite(record, workspace, note_id, lambda old: body, check, audit.UPDATED)
            return done if isinstance(done, str) else done[0]

        return self.nonces.consume_act(principal, nonce, expires_at, act)

    def _rewrite(
        self,
        record: note_bodies.Record,
        workspace: main.Path,
        note_id: str,
        make: Callable[[str], str],
        check: note_bodies.Check,
        outcome: str,
    ) -> tuple[main.Note, str] | str:
        """Re-read and re-check the note, old bytes to the trash, make(old text) (frontmatter kept) renamed over it;
        audited `outcome`, or why not."""
        checked = self._checked(workspace, note_id, check, record)
        if isinstance(checked, str):
            return checked
        root, rel, fd, note, loaded = checked
        try:
            body = make(loaded.text)
            new = loaded.front + body.encode("utf-8")  # the frontmatter, byte for byte, then the confirmed text
            if len(new) > folder_bodies.MAX_FILE_BYTES:
                record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
                return note_bodies.TOO_LONG
            trash_name = folder_trash.trash_name_for(rel[-1], self.nonces.now()) if self.retention.trash else ""
            old = loaded.front + loaded.text.encode("utf-8")
            done = folder_bodies.replace(
                self.dirs[root], fd, rel[-1], loaded.facts, old, new, trash_name, self._ops.mkdir
            )
            if not isinstance(done, tuple):
                record(audit.REFUSED, audit.Facts(note_id))
                return (
                    done if isinstance(done, str) else note_bodies.CHANGED
                )  # why its new version could not be written, or changed since read
            # The file written, and the one it replaced: `audit restore` follows the note by them.
            record(
                outcome,
                audit.Facts(
                    note.id, note.title, note.uri, trash_name or None, identity(done, new, was=loaded.facts[:2])
                ),
            )
            after = self._loaded(root, rel, fd)
            return (after[0], after[1].text) if after is not None else (note, body)
        finally:
            os.close(fd)

    def _holds(self, workspace: main.Path, note_id: str, check: note_bodies.Check) -> bool:
        """True when the note `note_id` of `workspace` passes `check` as it is read now (nothing audited)."""
        found = self.note_text(note_id, workspace)
        return found is not None and check(*found)

    def move_refusal(self, workspace: main.Path, note: main.Note, place: main.Path) -> str | None:
        """Why `note` cannot be moved to `place` here, read now (id or URI too long, too deep, no such folder, a file
        there), or None."""
        root = self._served(workspace)
        target = (
            place[len(root) :] if root is not None and main.is_within(place, root) and len(place) > len(root) else None
        )
        if root is None or target is None or not all(folder_paths.plain(name) for name in target):
            return NO_FOLDER
        # Moved where the index, a search or a deletion never looks, the note would be on
        # disk and out of every tool's reach: each rule is the one that skips such a file.
        if len(target[-1].encode("utf-8", "surrogateescape")) > folder_paths.NAME_MAX:
            return NAME_TOO_LONG
        if folder_paths.indexed_note(root, target, note.title, (0, 0, 0, 0, 0)) is None:
            return UNREACHABLE
        if len(target) - 1 > folder_paths.MAX_WALK_DEPTH:
            return TOO_DEEP
        dst = folder_paths.open_below(self.dirs[root], target[:-1])
        if dst is None:
            return NO_FOLDER
        try:
            os.stat(target[-1], dir_fd=dst, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError:
            return NO_FOLDER  # a component that is a file, or unreadable
        finally:
            os.close(dst)
        return note_bodies.TAKEN

    def move_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        place: main.Path,
        check: note_bodies.Check,
        rewrites: tuple[stores.Rewrite, ...] = (),
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """One claim transaction: claim, re-read and re-check, renameat2(RENAME_NOREPLACE) to `place` in the same folder
        tree; audited."""

        def act(record: note_bodies.Record) -> main.Note | str:
            opened = self._opened(workspace, note_id)
            if opened is None:
                record(audit.REFUSED, audit.Facts(note_id))
                return note_bodies.CHANGED
            root, rel, fd = opened
            # Both ends inside the one root that serves the workspace (layer 2 at the destination too).
            target = place[len(root) :] if main.is_within(place, root) and len(place) > len(root) else None
            dst = None
            try:
                dst = folder_paths.open_below(self.dirs[root], target[:-1]) if target else None
                found = self._loaded(root, rel, fd)
                if found is None or not check(found[0], found[1].text):
                    record(audit.REFUSED, audit.Facts(note_id))
                    return note_bodies.CHANGED
                note = found[0]
                refusal = NO_FOLDER if target is None or dst is None else self.move_refusal(workspace, note, place)
                # Every note whose links the person saw rewritten is re-read and re-checked
                # before the rename: one changed since the form refuses the whole step.
                if refusal is None and not all(self._holds(workspace, rid, rcheck) for rid, _, rcheck in rewrites):
                    refusal = stores.LINKS_CHANGED
                if refusal is not None and refusal != note_bodies.TAKEN:  # taken: renameat2 below says so, atomically
                    record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
                    return refusal
                assert target is not None and dst is not None
                why = folder_bodies.move(fd, rel[-1], found[1].facts, dst, target[-1])
                if why is not None:
                    record(audit.REFUSED, audit.Facts(note.id, note.title, note.uri))
                    return note_bodies.TAKEN if why == "taken" else note_bodies.CHANGED
                moved = identity(
                    found[1].facts,
                    found[1].front + found[1].text.encode("utf-8"),
                    to=main.format_file_uri(root + target),
                )
                record(audit.MOVED, audit.Facts(note.id, note.title, note.uri, None, moved))
                # Then each linking note, each replaced atomically on its own (renamed over, its
                # old bytes to the trash under an `updated` entry): files share no transaction,
                # so a note changed in the instant since its re-check keeps its old link, and
                # its refused entry says so.
                for rid, body, rcheck in rewrites:
                    try:
                        self._rewrite(record, workspace, rid, _always(body), rcheck, audit.UPDATED)
                    except stores.StoreRefused:
                        # The OS refused this one file: the move is done and audited; this note keeps its link.
                        record(audit.REFUSED, audit.Facts(rid))
                after = self._loaded(root, target, dst)
                # Edited again since the rename, the file is read as nothing: the result still names the new place.
                return (
                    after[0]
                    if after is not None
                    else note._replace(id=folder_paths.note_id(target), uri=main.format_file_uri(root + target))
                )
            finally:
                os.close(fd)
                if dst is not None:
                    os.close(dst)

        return self.nonces.consume_act(principal, nonce, expires_at, act)

    def undo_update(self, entry: dict[str, object]) -> dict[str, object]:
        """Restore an `updated` entry: the kept bytes back over the very file it wrote, wherever it moved since.

        The bytes now there go to the trash.

        StoreRefused when the note, its folder or its kept version is gone, or when the file
        at the note's place now is another file than the one the update wrote.
        """
        entry_id = int(str(entry["id"]))
        place, written = self.follow(entry)
        located = self.locate(place)
        if located is None:
            raise stores.StoreRefused(f"entry {entry_id} is not an edit of a note in a folder served here")
        root, rel = located
        # Replaced since start-up: the note and the trash the path now reaches are another folder's.
        self.dirs[root].check(main.format_file_uri(root))
        fd = folder_paths.open_below(self.dirs[root], rel[:-1])
        trash = None
        try:
            trash = folder_trash.open_trash(self.dirs[root], create=False)
            current = self._loaded(root, rel, fd) if fd is not None else None
            kept = folder_bodies.load(trash, str(entry["trash"])) if trash is not None else None
            if fd is None or current is None or kept is None:
                raise stores.StoreRefused(
                    f"entry {entry_id}: the note or its kept version is gone (or not text); nothing restored"
                )
            # Restore by note, not by place: another note moved to where this one was must
            # not be overwritten with this one's old text.
            if written is not None and tuple(current[1].facts[:2]) != written:
                raise stores.StoreRefused(
                    f"entry {entry_id}: the file at {current[0].id} is another note than the one the update wrote; "
                    "nothing restored"
                )
            name = folder_trash.trash_name_for(rel[-1], self.nonces.now())
            now_bytes = current[1].front + current[1].text.encode("utf-8")
            old_bytes = kept.front + kept.text.encode("utf-8")
            done = folder_bodies.replace(
                self.dirs[root], fd, rel[-1], current[1].facts, now_bytes, old_bytes, name, self._ops.mkdir
            )
            if not isinstance(done, tuple):
                why = done if isinstance(done, str) else "the note changed while it was restored; nothing restored"
                raise stores.StoreRefused(f"entry {entry_id}: {why}")
            os.unlink(str(entry["trash"]), dir_fd=trash)
        finally:
            for opened in (fd, trash):
                if opened is not None:
                    os.close(opened)
        facts = audit.Facts(
            current[0].id, current[0].title, current[0].uri, name, identity(done, old_bytes, was=current[1].facts[:2])
        )
        return self.nonces.record_restore(entry_id, facts)

    def undo_move(self, entry: dict[str, object]) -> dict[str, object]:
        """Restore a `moved` entry: the very file the move renamed, where the move put it, renamed back to where it was.

        Never over anything.

        StoreRefused when the entry recorded no file, the file there now is another one (moved
        on, replaced), or a file now takes the old place.
        """
        entry_id = int(str(entry["id"]))
        place, current = self.follow(entry)  # the very file the move renamed, wherever later edits left it
        here = self.locate(place) if current is not None else None
        back = self.locate(str(entry["uri"]))
        if current is None or here is None or back is None or here[0] != back[0]:
            raise stores.StoreRefused(f"entry {entry_id} is not a move of a note in a folder served here")
        root, rel = here
        self.dirs[root].check(main.format_file_uri(root))
        src = folder_paths.open_below(self.dirs[root], rel[:-1])
        dst = folder_paths.open_below(self.dirs[root], back[1][:-1])
        try:
            loaded = folder_bodies.load(src, rel[-1]) if src is not None else None
            # Restore by note, not by place: only the very file the move renamed goes back.
            if src is None or dst is None or loaded is None or tuple(loaded.facts[:2]) != current:
                raise stores.StoreRefused(
                    f"entry {entry_id}: the note the move renamed is no longer where it put it; nothing restored"
                )
            why = folder_bodies.move(src, rel[-1], loaded.facts, dst, back[1][-1])
            if why is not None:
                raise stores.StoreRefused(
                    f"entry {entry_id}: "
                    + (
                        "a file now takes the note's old place"
                        if why == "taken"
                        else "the note changed while it was restored"
                    )
                    + "; nothing restored"
                )
        finally:
            for opened in (src, dst):
                if opened is not None:
                    os.close(opened)
        title = entry["title"]
        facts = audit.Facts(
            folder_paths.note_id(back[1]),
            title if isinstance(title, str) else None,
            str(entry["uri"]),
            None,
            identity(loaded.facts, loaded.front + loaded.text.encode("utf-8"), to=str(entry["uri"])),
        )
        return self.nonces.record_restore(entry_id, facts)

    def follow(self, entry: dict[str, object]) -> tuple[str, tuple[int, int] | None]:
        """(where the file an update wrote, or a move renamed, is now, its device and inode) by the later entries that
        moved or rewrote it; (its URI, None) for an entry without them."""
        recorded = read_identity(entry.get("file_identity"))
        place = str(entry["uri"])
        if recorded is None:
            return place, None  # written before file identities were recorded: by place, as then
        if entry["outcome"] == audit.MOVED:
            place = str(recorded.get("to"))  # a move's file starts where the move put it
        current = (int(recorded["dev"]), int(recorded["ino"]))
        later = sorted(
            (
                e
                for outcome in (audit.MOVED, audit.UPDATED, audit.APPENDED, audit.RESTORED)
                for e in self.nonces.audit_entries(outcome=outcome)
                if int(str(e["id"])) > int(str(entry["id"]))
            ),
            key=lambda e: int(str(e["id"])),
        )
        for step in later:
            facts = read_identity(step.get("file_identity"))
            if facts is None or step["uri"] != place:
                continue
            if step["outcome"] == audit.MOVED and (int(facts["dev"]), int(facts["ino"])) == current:
                place = str(facts["to"])  # this very file, moved
            elif step["outcome"] != audit.MOVED and tuple(facts.get("was") or ()) == current:
                current = (int(facts["dev"]), int(facts["ino"]))  # this note, rewritten (a later update or a restore)
        return place, current


def identity(facts: tuple[int, ...], data: bytes, **more: object) -> str:
    """What an audit entry records of the file a folder write produced or moved: device, inode, size, sha256 (and
    `more`), as JSON."""
    fields = {"dev": facts[0], "ino": facts[1], "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), **more}
    return json.dumps(fields, sort_keys=True)


def read_identity(text: object) -> dict[str, Any] | None:
    """An entry's recorded file identity, or None where it has none (or not one this store wrote)."""
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return (
        value
        if isinstance(value, dict) and isinstance(value.get("dev"), int) and isinstance(value.get("ino"), int)
        else None
    )


class Survey:
    """One bounded count of a folder's notes for the start-up report, by the one tree walk: no note is opened."""

    def __init__(self, root: main.Path, limit: int = folder_paths.MAX_WALK_ENTRIES) -> None:
        self.root = root
        self.limit = limit
        self.budget = limit
        self.surveyed = 0
        self.skipped: collections.Counter[str] = collections.Counter()  # reason -> entries not served

    def entering(self, fd: int, rel: main.Path) -> None:
        """Nothing to do before a listing."""

    def listed(self, fd: int, rel: main.Path, names: set[str]) -> None:
        """Nothing kept of a listing."""

    def counted(self) -> None:
        """One more entry listed: past the limit the count fails, never reporting fewer notes than the folder holds."""
        # A folder with millions of entries must not make start-up unbounded.
        if self.budget <= 0:
            raise folder_paths.too_large(self.limit)
        self.budget -= 1

    def descend(self, rel: main.Path) -> bool:
        """Every real sub-folder within the depth limit is counted."""
        return True

    def known(self, rel: main.Path) -> bool:
        """Every file is lstat-ed: only a regular file is counted."""
        return True

    def note(self, fd: int, rel: main.Path, info: os.stat_result | None) -> None:
        """Count one regular `*.md` file: a note if readable and its id and URI fit (load_note's checks, without the
        open)."""
        if not os.access(rel[-1], os.R_OK, dir_fd=fd):
            self.skip(folder_paths.SKIP_UNREADABLE)
            return
        # Every component is plain (listed names were checked), so only the lengths can fail.
        if (
            len(folder_paths.note_id(rel)) > stores.MAX_NOTE_ID_LENGTH
            or len(main.format_file_uri(self.root + rel)) > main.MAX_URI_LENGTH
        ):
            self.skip(folder_paths.SKIP_UNUSABLE)
            return
        self.surveyed += 1

    def skip(self, reason: str) -> None:
        """Count an entry not served, by reason."""
        self.skipped[reason] += 1


def _always(text: str) -> Callable[[str], str]:
    """A rewrite that gives `text` whatever the old text was (a linking note's body, prepared under the form's
    check)."""
    return lambda _old: text
