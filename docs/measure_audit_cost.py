"""Figures for docs/stores.md: what the audit entry and the trash cost an accepted deletion, per store and mode."""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "code"))
import audit, main, markdown_store, sqlite_store  # noqa: E401,E402

COUNT = 2000
WORKSPACE = "file:///notes"
ALWAYS = lambda note: True  # noqa: E731


def sqlite_run(deletion: str) -> float:
    folder = tempfile.mkdtemp()
    notes = [main.Note(f"n{k}", f"Note {k}", f"{WORKSPACE}/n{k}.md") for k in range(COUNT)]
    store = sqlite_store.open_store(os.path.join(folder, "notes.db"), clock=time.time, seed_notes=notes,
                                    retention=audit.Retention(deletion=deletion))  # fmt: skip
    start = time.perf_counter()
    for note in notes:
        store.consume(f"p{note.id}", "x" + note.id, time.time() + 300, (note.id, note.version), ALWAYS)
    elapsed = time.perf_counter() - start
    assert store.all() == [] and len(store.audit_entries()) == COUNT
    store.close()
    return elapsed


def folder_run(deletion: str) -> float:
    base = tempfile.mkdtemp()
    ws = os.path.join(base, "notes")
    os.makedirs(ws)
    for k in range(COUNT):
        with open(os.path.join(ws, f"n{k}.md"), "w", encoding="utf-8") as handle:
            handle.write(f"# Note {k}\n")
    nonces = sqlite_store.open_ledger(os.path.join(base, "nonces.db"), clock=time.time)
    store = markdown_store.MarkdownNotesStore([ws], nonces, retention=audit.Retention(deletion=deletion))
    targets = [(n.id, n.version) for n in store.candidates(main.parse_file_uri(main.format_file_uri(tuple(p for p in ws.split("/") if p))), "Note")]
    start = time.perf_counter()
    for target in targets:
        store.consume(f"p{target[0]}", "x" + target[0], time.time() + 300, target, ALWAYS)
    elapsed = time.perf_counter() - start
    assert len(store.audit_entries(outcome=audit.DELETED)) == COUNT
    store.close()
    return elapsed


for name, run in (("sqlite", sqlite_run), ("folder", folder_run))[int(sys.argv[1:] == ["folder"]):]:
    for deletion in audit.DELETION_MODES:
        seconds = run(deletion)
        print(f"{name:6} {deletion:6} {COUNT} accepts: {seconds:.2f} s, {seconds / COUNT * 1000:.2f} ms each")
