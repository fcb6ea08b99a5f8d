"""`--mode index-memory`: what one note costs each store's title index.

At the bench titles and at the worst a title can do (random CJK characters: every trigram new).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import main

from .common import WORKSPACE, BenchError, folder_store_over, memory_notes, note_title, row, section

__all__ = ["run"]

INDEX_MEMORY_LENGTHS = (190, 200)  # characters of the random CJK titles measured (200 = main.MAX_TITLE_LENGTH)
INDEX_MEMORY_SEED_TIMEOUT_MS = 600_000  # the PostgreSQL seed's statement timeout in --mode index-memory


def cjk_titles(count: int, length: int, seed: int = 1) -> list[str]:
    """`count` distinct titles of `length` random CJK ideographs (every trigram is new: an index's worst case)."""
    rng = random.Random(seed)
    return ["".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(length)) for _ in range(count)]


def probe(title: str) -> str:
    """The query a memory run looks up: 20 characters from the middle of a long title, a short title whole."""
    return title[40:60] if len(title) >= 60 else title


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """(fn(), bytes it left allocated, its peak above the start) under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held - base, peak - base


def folder_memory(directory: str, notes: list[main.Note]) -> tuple[float, float]:
    """(bytes per note the folder index holds, peak bytes per note while it is built) in process."""
    folder, store, root = folder_store_over(directory, notes)
    try:
        found, held, peak = traced(lambda: store.candidates(root, probe(notes[0].title)))
        if [n.id.rsplit("/", 1)[-1] for n in found] != [notes[0].id + ".md"]:
            raise BenchError(f"folder lookup found {len(found)} notes, not the one asked for")
    finally:
        store.close()
        store.nonces.close()
    return held / len(notes), peak / len(notes)


def first_lookup_peak(store: Any, notes: list[main.Note], label: str) -> int:
    """Peak bytes of an SQL `store`'s first lookup of notes[0] (closed after); BenchError unless it finds that one."""
    try:
        found, _, peak = traced(lambda: store.candidates(main.parse_file_uri(WORKSPACE), probe(notes[0].title)))
        if [n.id for n in found] != [notes[0].id]:
            raise BenchError(f"{label} lookup found {len(found)} notes, not the one asked for")
    finally:
        store.close()
    return peak


def sqlite_memory(directory: str, notes: list[main.Note]) -> tuple[float, float]:
    """(database bytes per note, peak bytes per note of the first lookup in process) for an SQLite store."""
    import sqlite_store

    path = os.path.join(directory, "notes.db")
    empty = sqlite_store.open_store(os.path.join(directory, "empty.db"), clock=time.time, seed_notes=[])
    empty.close()
    peak = first_lookup_peak(sqlite_store.open_store(path, clock=time.time, seed_notes=notes), notes, "SQLite")
    grown = os.path.getsize(path) - os.path.getsize(os.path.join(directory, "empty.db"))
    return grown / len(notes), peak / len(notes)


def postgres_memory(cluster: Any, notes: list[main.Note]) -> tuple[float, float]:
    """(table and index bytes per note, peak bytes per note of the first lookup in process) for a PostgreSQL store."""
    import psycopg

    import postgres_store

    url = cluster.new_database()
    # The seed builds the pg_trgm index in one statement: at 10,000 random CJK titles that
    # outlasts the store's statement timeout on this machine, and the store would serve
    # without the index (saying so). Measured here with the index built.
    store = postgres_store.open_store(
        url, clock=time.time, seed_notes=notes, statement_timeout_ms=INDEX_MEMORY_SEED_TIMEOUT_MS
    )
    if "pg_trgm index" not in store.describe():
        raise BenchError(f"PostgreSQL store without its title index: {store.describe()}")
    peak = first_lookup_peak(store, notes, "PostgreSQL")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM notes")  # the GIN index's pending list merged, as it is in service
        sized = conn.execute("SELECT pg_total_relation_size('notes')").fetchone()
    assert sized is not None  # an aggregate answers one row
    (size,) = sized
    return size / len(notes), peak / len(notes)


def run(args: argparse.Namespace) -> None:
    """`--mode index-memory`: bytes per note of each store's title index, bench titles and random CJK ones."""
    import postgres_cluster

    count = args.notes
    kinds = [("bench titles", [note_title(i) for i in range(count)])]
    kinds += [(f"{length} random CJK", cjk_titles(count, length)) for length in INDEX_MEMORY_LENGTHS]
    reason = postgres_cluster.missing()
    cluster = None
    if reason is None:
        cluster = postgres_cluster.Cluster()
        cluster.start()
    try:
        section(
            f"Title index: bytes per note, {count:,} notes "
            "(folder: tracemalloc; SQL: file or relation size, and the first lookup's peak)"
        )
        for label, titles in kinds:
            notes = memory_notes(titles)
            with tempfile.TemporaryDirectory(prefix="notes-bench-memory-") as directory:
                held, peak = folder_memory(directory, notes)
            row(f"{label}: folder index held", f"{held:,.0f} bytes", f"building it peaked at {peak:,.0f} per note")
            with tempfile.TemporaryDirectory(prefix="notes-bench-memory-") as directory:
                size, peak = sqlite_memory(directory, notes)
            row(f"{label}: SQLite file", f"{size:,.0f} bytes", f"first lookup peaked at {peak:,.0f} per note")
            if cluster is not None:
                size, peak = postgres_memory(cluster, notes)
                row(
                    f"{label}: PostgreSQL notes + indexes",
                    f"{size:,.0f} bytes",
                    f"first lookup peaked at {peak:,.0f} per note",
                )
        if cluster is None:
            row("PostgreSQL", "not measured", str(reason))
    finally:
        if cluster is not None:
            cluster.destroy()
