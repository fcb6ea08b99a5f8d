"""`--mode index-rebuild`: the folder index's first build, and the lookups after an inotify queue overflow.

The rebuild the overflow makes is timed with a note made after the overflow looked up; then a
first build while another process makes and removes notes, and what the lookups after it miss.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import main

from .common import RENAME_LOOP_FOLDERS, BenchError, folder_store_over, memory_notes, note_title, row, section, spawn

__all__ = ["overflow_queue", "run"]

INDEX_REBUILD_RUNS = 5  # --mode index-rebuild: builds and overflows measured, the median reported
INDEX_STORM_MADE, INDEX_STORM_REMOVED = (
    2000,
    400,
)  # --mode index-rebuild: notes another process makes and removes during a first build
_STORMER = """
import os, sys
folder, made, removed, folders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("ready", flush=True)
sys.stdin.readline()
every = made // removed
for i in range(made):
    with open(os.path.join(folder, f"f{i % folders:03d}", f"storm-{i:06d}.md"), "w", encoding="utf-8") as handle:
        handle.write(f"# Storm note {i:06d}\\n")
    if i % every == 0 and i // every < removed:
        k = i // every
        os.unlink(os.path.join(folder, f"f{k % folders:03d}", f"n{k:06d}.md"))
print("done", flush=True)
"""


def overflow_queue(path: str) -> None:
    """Queue more inotify events than the kernel holds (fs.inotify.max_queued_events): it reports IN_Q_OVERFLOW."""
    with open("/proc/sys/fs/inotify/max_queued_events", encoding="ascii") as limit:
        events = int(limit.read())
    other = path + ".other"
    with open(other, "w", encoding="utf-8"):
        pass
    # Through open descriptors: futimens queues the same IN_ATTRIB without a path lookup per call.
    handles = [os.open(name, os.O_RDONLY | os.O_CLOEXEC) for name in (other, path)]
    try:
        for k in range(events + 2):  # two files in turn: the kernel merges an event only into an identical last one
            os.utime(handles[k % 2])
    finally:
        for handle in handles:
            os.close(handle)
    os.unlink(other)


def index_storm(folder: str, root: main.Path, nonces_path: str) -> dict[str, int]:
    """What lookups miss after a first build during which another process made and removed notes (INDEX_STORM_*)."""
    import markdown_store
    import sqlite_store

    nonces = sqlite_store.open_ledger(nonces_path, clock=time.time)
    store = markdown_store.MarkdownNotesStore([folder], nonces)
    stormer = spawn(
        [
            sys.executable,
            "-c",
            _STORMER,
            folder,
            str(INDEX_STORM_MADE),
            str(INDEX_STORM_REMOVED),
            str(RENAME_LOOP_FOLDERS),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert stormer.stdin is not None and stormer.stdout is not None
        stormer.stdout.readline()  # ready
        stormer.stdin.write(b"go\n")
        stormer.stdin.flush()  # it makes and removes notes from now on, while the lookup builds
        store.candidates(root, note_title(INDEX_STORM_REMOVED))
        made_before = len(
            [
                name
                for sub in os.listdir(folder)
                for name in os.listdir(os.path.join(folder, sub))
                if name.startswith("storm-")
            ]
        )
        stormer.stdout.readline()  # done
        # Newest first: an index that applies changes oldest first, a few per lookup, cannot hide behind the order.
        missed = sum(
            1 for i in reversed(range(INDEX_STORM_MADE)) if len(store.candidates(root, f"Storm note {i:06d}")) != 1
        )
        stale = sum(1 for k in range(INDEX_STORM_REMOVED) if store.candidates(root, note_title(k)))
    finally:
        stormer.kill()
        stormer.wait()
        store.close()
        nonces.close()
    return {
        "made": INDEX_STORM_MADE,
        "before": made_before,
        "removed": INDEX_STORM_REMOVED,
        "missed": missed,
        "stale": stale,
    }


def skewed(skew: list[float]) -> Callable[[], float]:
    """A monotonic clock `skew[0]` seconds ahead (moved by whoever holds `skew`)."""
    return lambda: time.monotonic() + skew[0]


def run(args: argparse.Namespace) -> None:
    """The folder index's first build, and the lookups after an inotify queue overflow, at --notes notes."""
    import markdown_store
    import sqlite_store

    count = args.notes
    notes = memory_notes([note_title(i) for i in range(count)])
    builds: list[float] = []
    # Per run, the first lookup after the overflow and the first once a rescan is due:
    # (ms, whether it rebuilt, the note made after the overflow offered, the note removed after it offered).
    after: list[list[tuple[float, bool, bool, bool]]] = []
    with tempfile.TemporaryDirectory(prefix="notes-bench-rebuild-") as directory:
        folder, first, root = folder_store_over(directory, notes)
        first.close()
        first.nonces.close()
        for run_ in range(INDEX_REBUILD_RUNS):
            # Each run its own store: its first lookup builds the index. Its clock is moved
            # past the rescan interval after the first lookup that follows the overflow, so
            # that a rebuild is due by any rule the index follows and the second one makes it.
            skew = [0.0]
            nonces = sqlite_store.open_ledger(os.path.join(directory, f"rebuild-{run_}.db"), clock=time.time)
            store = markdown_store.MarkdownNotesStore([folder], nonces, clock=skewed(skew))
            (index,) = store.indexes.values()
            try:
                start = time.perf_counter()
                store.candidates(root, note_title(1))
                builds.append((time.perf_counter() - start) * 1000)
                gone = os.path.join(folder, "f001", f"gone-{run_}.md")
                with open(gone, "w", encoding="utf-8") as handle:
                    handle.write(f"# Removed note {run_}\n")
                if len(store.candidates(root, f"Removed note {run_}")) != 1:
                    raise BenchError("a note made before the overflow was not offered")
                overflow_queue(os.path.join(folder, "f000", "n000000.md"))
                newborn = os.path.join(folder, "f002", f"newborn-{run_}.md")
                with open(newborn, "w", encoding="utf-8") as handle:
                    handle.write(f"# Newborn note {run_}\n")
                os.unlink(gone)
                lookups = []
                for _ in range(2):
                    scanned, start = index.scanned_at, time.perf_counter()
                    seen = len(store.candidates(root, f"Newborn note {run_}")) == 1
                    taken = (time.perf_counter() - start) * 1000
                    lookups.append(
                        (taken, index.scanned_at != scanned, seen, bool(store.candidates(root, f"Removed note {run_}")))
                    )
                    skew[0] += 1e6
                after.append(lookups)
            finally:
                store.close()
                nonces.close()
        storm = index_storm(folder, root, os.path.join(directory, "storm.db"))
    built = statistics.median(builds)
    section(
        f"Folder index, {count:,} notes in {RENAME_LOOP_FOLDERS} folders, inotify (median of {INDEX_REBUILD_RUNS} runs)"
    )
    row("first build (the first lookup)", f"{built:,.0f} ms", "runs: " + " ".join(f"{ms:,.0f}" for ms in builds))
    row(
        "  notes made by another process meanwhile",
        f"{storm['made']:,}",
        f"{storm['before']:,} of them before the lookup returned, {storm['removed']:,} notes removed",
    )
    row(
        "  made, not offered by a lookup after", f"{storm['missed']:,}", "each looked up by its title, the newest first"
    )
    row("  removed, still offered by a lookup after", f"{storm['stale']:,}")
    for k, label in enumerate(("the first lookup after a queue overflow", "the first once a rescan is due")):
        taken = statistics.median(run_[k][0] for run_ in after)
        rebuilds, offered_new, offered_gone = (
            sum(run_[k][1] for run_ in after),
            sum(run_[k][2] for run_ in after),
            sum(run_[k][3] for run_ in after),
        )
        row(
            label,
            f"{taken:,.1f} ms",
            f"{taken / built:.0%} of the first build; runs: " + " ".join(f"{run_[k][0]:,.1f}" for run_ in after),
        )
        row("  rebuilt the index", f"{rebuilds} of {len(after)}")
        row("  offered the note made after the overflow", f"{offered_new} of {len(after)}")
        row("  offered the note removed after it", f"{offered_gone} of {len(after)}")
