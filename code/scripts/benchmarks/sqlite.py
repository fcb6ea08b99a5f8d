"""`--mode sqlite`: round trips/s over the SQLite store, one process, then two sharing one file."""

from __future__ import annotations

import argparse
import tempfile

from .common import row, section, sqlite_rate

__all__ = ["run"]


def run(args: argparse.Namespace) -> dict[int, float]:
    """Round trips/s over the SQLite store: one process, then two sharing one file."""
    notes = args.notes
    section(f"SQLite store (code/sqlite_store.py), in-process handle_bytes; {notes:,} notes seeded, not put back")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="notes-bench-db-") as directory:
        for processes in (1, 2):
            rate, count, elapsed = sqlite_rate(directory, processes, notes, args.seconds)
            label = "one process" if processes == 1 else "two processes, one database file"
            row(f"{label}: round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s (all processes together)")
            figures[processes] = rate
    return figures
