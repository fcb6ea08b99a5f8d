"""The stores' schemas as released before the lookup indexes, spelled out to build old databases in tests."""

from __future__ import annotations

import sqlite3
from typing import Any

from helpers import support  # noqa: F401 - puts code/ on the import path

import main
import stores

MAX_ID = stores.MAX_NOTE_ID_LENGTH

# SQLite schema version 2 (version 1 is the same without high_water).
SQLITE_V2 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE notes ("
    f" id TEXT PRIMARY KEY CHECK (typeof(id) = 'text' AND length(id) BETWEEN 1 AND {MAX_ID}),"
    " title TEXT NOT NULL CHECK (typeof(title) = 'text' AND length(trim(title)) > 0),"
    " uri TEXT NOT NULL CHECK (typeof(uri) = 'text'),"
    " revision INTEGER NOT NULL CHECK (typeof(revision) = 'integer'))",
    "CREATE TABLE consumed_nonces ("
    " nonce TEXT PRIMARY KEY CHECK (typeof(nonce) = 'text'),"
    " principal TEXT NOT NULL,"
    " expires_at REAL NOT NULL)",
    "CREATE INDEX consumed_by_principal ON consumed_nonces (principal, expires_at)",
    "CREATE INDEX consumed_by_expiry ON consumed_nonces (expires_at)",
)
SQLITE_HIGH_WATER = (
    "CREATE TABLE high_water (one INTEGER PRIMARY KEY CHECK (one = 1), seen REAL NOT NULL)",
    "INSERT INTO high_water (one, seen) VALUES (1, 0)",
)

# PostgreSQL schema version 1.
POSTGRES_V1 = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE notes ("
    f" id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND {MAX_ID}),"
    " title text NOT NULL CHECK (length(btrim(title)) > 0),"
    " uri text NOT NULL,"
    " revision bigint NOT NULL)",
    "CREATE TABLE consumed_nonces ("
    " nonce text PRIMARY KEY,"
    " principal text NOT NULL,"
    " expires_at double precision NOT NULL)",
    "CREATE INDEX consumed_by_principal ON consumed_nonces (principal, expires_at)",
    "CREATE INDEX consumed_by_expiry ON consumed_nonces (expires_at)",
    "CREATE TABLE clock_high_water (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seen double "
    "precision NOT NULL)",
    "INSERT INTO clock_high_water (seen) VALUES (0)",
)


def old_sqlite(path: str, notes: list[main.Note], version: int = 2) -> None:
    """An SQLite notes database as schema `version` (1 or 2) wrote it, holding `notes`."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in SQLITE_V2 + (SQLITE_HIGH_WATER if version == 2 else ()):
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(version),))
        conn.executemany("INSERT INTO notes VALUES (?, ?, ?, ?)", [tuple(note) for note in notes])
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def old_postgres(conn: Any, notes: list[main.Note]) -> None:
    """A PostgreSQL notes schema as version 1 wrote it, holding `notes`, through an autocommit connection."""
    with conn.transaction():
        for statement in POSTGRES_V1:
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO notes VALUES (%s, %s, %s, %s)", [tuple(note) for note in notes])
