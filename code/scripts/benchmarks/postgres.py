"""`--mode postgres`: 1, 2 and 4 server processes on one PostgreSQL database, beside one SQLite file."""

from __future__ import annotations

import argparse
import tempfile

from .common import BenchError, row, section, sqlite_rate, store_rate

__all__ = ["run"]

POSTGRES_PROCESS_COUNTS = (1, 2, 4)


def run(args: argparse.Namespace) -> dict[str, dict[int, float]]:
    """Round trips/s with 1, 2 and 4 server processes on one PostgreSQL database, beside one SQLite file."""
    import postgres_cluster  # a throwaway, durable cluster in a temporary folder

    reason = postgres_cluster.missing()
    if reason is not None:
        raise BenchError(reason)
    figures: dict[str, dict[int, float]] = {"postgresql": {}, "sqlite": {}}
    cluster = postgres_cluster.Cluster(durable=True)
    try:
        cluster.start()
        section(f"Store seam, consume path (first call + accept), {args.notes:,} notes seeded, not put back")
        for processes in POSTGRES_PROCESS_COUNTS:
            rate, count, elapsed = store_rate(cluster.new_database(), processes, args.notes, args.seconds)
            figures["postgresql"][processes] = rate
            row(f"PostgreSQL, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
        with tempfile.TemporaryDirectory(prefix="notes-bench-db-") as directory:
            for processes in POSTGRES_PROCESS_COUNTS:
                rate, count, elapsed = sqlite_rate(directory, processes, args.notes, args.seconds)
                figures["sqlite"][processes] = rate
                row(f"SQLite, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
    finally:
        cluster.destroy()
    return figures
