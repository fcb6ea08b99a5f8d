"""Figures for docs/tools.md: one folder-store text search over many large notes in one folder, its time and whether it stopped early.

    python3 docs/measure_folder_search.py [NOTES] [KB] [CODE]

NOTES notes of KB kilobytes each (2,000 and 200 by default: 400 MB) in one folder; a
query no note holds, so the search reads until a bound stops it. CODE: the folder holding
the server's modules (this checkout's code/ by default; another checkout's to compare).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
notes, kb = (int(sys.argv[1]) if len(sys.argv) > 1 else 2000), (int(sys.argv[2]) if len(sys.argv) > 2 else 200)
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "code"))
import main  # noqa: E402
import markdown_store  # noqa: E402
import sqlite_store  # noqa: E402

base = tempfile.mkdtemp(prefix="folder-search-")
try:
    folder = os.path.join(base, "Notes")
    os.makedirs(folder)
    # Text a model could write: words with combining accents (NFC must compose them) and
    # Greek and CJK (casefolding is no ASCII fast path), 200 kB a note.
    line = "Cafe\u0301 cre\u0300me Ελληνικά 漢字かな lorem ipsum dolor sit amet\n"
    body = (line * (kb * 1024 // len(line.encode()) + 1)).encode()[: kb * 1024 - 20].decode("utf-8", "ignore")
    for k in range(notes):
        with open(os.path.join(folder, f"note-{k:05d}.md"), "w", encoding="utf-8") as handle:
            handle.write(f"# Note {k:05d}\n{body}")
    nonces = sqlite_store.open_ledger(os.path.join(base, "nonces.db"), clock=time.time)
    store = markdown_store.MarkdownNotesStore([folder], nonces)
    workspace = main.parse_file_uri(store.workspace_uris()[0])
    store.search_text(workspace, "warm the title index", 10)  # the title index is built once, at the first lookup
    for run in range(3):
        started = time.monotonic()
        found, stopped = store.search_text(workspace, "zebra crossing", 10)
        print(f"run {run + 1}: {notes} notes of {kb} kB: {time.monotonic() - started:.2f} s, {len(found)} found, stoppedEarly {stopped}")
    store.close()
finally:
    shutil.rmtree(base, ignore_errors=True)
