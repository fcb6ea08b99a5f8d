"""`--mode rename-loop`: the folder store's lookups while another process renames one of its files in a loop."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .common import RENAME_LOOP_FOLDERS, BenchError, folder_store_over, memory_notes, note_title, row, section, spawn

__all__ = ["run"]

_RENAMER = """
import os, sys
first, fresh = sys.argv[1], sys.argv[2] == "fresh"
path, i = first, 0
print("renaming", flush=True)
while True:
    i += 1
    new = f"{first[:-3]}-{i if fresh else i % 2}.md"
    os.rename(path, new)
    path = new
"""


def run(args: argparse.Namespace) -> None:
    """Folder-store lookup times, idle and while another process renames one of its files in a loop."""
    count = args.notes
    with tempfile.TemporaryDirectory(prefix="notes-bench-rename-") as directory:
        notes = memory_notes([note_title(i) for i in range(count)])
        folder, store, root = folder_store_over(directory, notes)
        moving = os.path.join(folder, "f000", "moving.md")
        with open(moving, "w", encoding="utf-8") as handle:
            handle.write("# renamed in a loop\n")

        def lookups(seconds: float) -> list[float]:
            taken: list[float] = []
            end = time.perf_counter() + seconds
            i = 1
            while time.perf_counter() < end:
                start = time.perf_counter()
                found = store.candidates(root, note_title(i))
                taken.append((time.perf_counter() - start) * 1000)
                if len(found) != 1:
                    raise BenchError(f"a lookup during the rename loop found {len(found)} notes, not 1")
                i = i % (count - 1) + 1
            return taken

        def report(label: str, taken: list[float]) -> None:
            taken.sort()
            p90 = taken[int(len(taken) * 0.9)]
            row(
                label,
                f"median {statistics.median(taken):.2f} ms",
                f"p90 {p90:.2f} ms, max {taken[-1]:.1f} ms, {len(taken):,} lookups",
            )

        try:
            store.candidates(root, note_title(0))  # built
            section(f"Folder store lookups, {count:,} notes in {RENAME_LOOP_FOLDERS} folders, inotify")
            report("idle", lookups(args.seconds))
            for names, label in (("two", "between two names"), ("fresh", "to a new name each time")):
                renamer = spawn([sys.executable, "-c", _RENAMER, moving, names], stdout=subprocess.PIPE)
                try:
                    assert renamer.stdout is not None
                    renamer.stdout.readline()  # it renames from now on
                    report(f"another process renames one file {label}", lookups(args.seconds))
                finally:
                    renamer.kill()
                    renamer.wait()
                moving = next(
                    os.path.join(folder, "f000", name)
                    for name in os.listdir(os.path.join(folder, "f000"))
                    if name.startswith("moving")
                )
        finally:
            store.close()
            store.nonces.close()
