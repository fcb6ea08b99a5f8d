"""`--mode checkpoint`: SQLite accepts with and without the checkpoint after each consume, in turns; their ratio."""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
from typing import Any

from .common import (
    PRINCIPAL,
    Ticker,
    bench_notes,
    handler,
    put_back_round_trips,
    row,
    section,
    server_over,
)

__all__ = ["run"]

CHECKPOINT_TURNS = 6  # --mode checkpoint: slices the measuring time is cut into, the two stores taking turns


def run(args: argparse.Namespace) -> dict[str, float]:
    """Accepts/s over two SQLite stores, with and without the checkpoint after each consume, in turns; their ratio."""
    import sqlite_store

    clock = Ticker()
    originals = {note.id: note for note in bench_notes(args.notes)}
    with tempfile.TemporaryDirectory(prefix="notes-bench-checkpoint-", dir=args.dir) as directory:
        section(
            f"SQLite accepts (first call + accept, in-process), {args.notes:,} notes, "
            "each deleted note put back off the clock"
        )
        row("database folder", directory)
        runs: dict[bool, list[Any]] = {}
        for checkpoint in (True, False):
            store = sqlite_store.open_store(
                os.path.join(directory, f"checkpoint-{checkpoint}.db"), clock=clock, seed_notes=list(originals.values())
            )
            store.checkpoint_each_consume = checkpoint
            runs[checkpoint] = [store, server_over(store, PRINCIPAL, clock=clock), 0, 0.0]
        picks = (k % args.notes for k in itertools.count())
        try:
            for turn in range(CHECKPOINT_TURNS + 1):  # the first turn warms up and is not counted
                for run in runs.values():
                    store, server, _, _ = run
                    budget = args.seconds / (2 * CHECKPOINT_TURNS)
                    done, elapsed = put_back_round_trips(
                        handler(server, PRINCIPAL), store, originals, clock, picks, budget
                    )
                    if turn:
                        run[2] += done
                        run[3] += elapsed
        finally:
            for store, *_ in runs.values():
                store.close()
    rates = {checkpoint: run[2] / run[3] for checkpoint, run in runs.items()}
    for checkpoint, label in ((True, "with the checkpoint (as served)"), (False, "without it")):
        row(
            f"{label}: accepts/s",
            f"{rates[checkpoint]:,.0f}",
            f"{runs[checkpoint][2]:,} in {runs[checkpoint][3]:.1f} s",
        )
    ratio = rates[True] / rates[False]
    added_ms = 1000 / rates[True] - 1000 / rates[False]
    row("ratio, with / without", f"{ratio:.2f}", f"{added_ms:+.2f} ms an accept")
    return {"with": rates[True], "without": rates[False], "ratio": ratio}
