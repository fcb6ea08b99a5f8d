"""The ledger in SQL: what every confirmation writes, kept beside the notes in SQLite or PostgreSQL.

One confirmation consumed writes, in ONE transaction with the note's re-check and change:
the nonce (consumed_nonces, with the clock's high-water mark), the audit entry (audit), a
deleted note's row or an edit's old text (deleted_notes), and, for the confirmation page,
the person's decision (browser_confirmations). `SqlLedger` is stores.Ledger over a
`Database` (the store's own transaction: SQLite's BEGIN IMMEDIATE, PostgreSQL's BEGIN
with its lock budget), so the SQLite store, the PostgreSQL store and the folder store's
confirmation database share one ledger and one set of statements. The statements are
written once with `?` and sent in the driver's style by the one `Dialect` of each driver.

Tables (created where missing, whatever the notes schema's version; older servers ignore them):

    audit(id, at, principal, tool, outcome, note_id, title, workspace, uri, request_id,
          client_name, trash, restores, channel, approved_by, approved_at, principal_seq, refused_seq)
    deleted_notes(audit_id PRIMARY KEY, id, title, uri, revision, deleted_at, body)
    browser_confirmations(nonce PRIMARY KEY, handle UNIQUE, principal, workspace, title,
          expires_at, status, note_id, version, decided_by, decided_at, tool, detail, decided_with)
    passkeys(credential_id PRIMARY KEY, principal, public_key, sign_count, created_at,
          last_used_at, label)

consumed_nonces and the high-water row are the notes schema's own (each store's _SCHEMA):
their layout is part of its version. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import audit
import main
import stores

__all__ = [
    "POSTGRES",
    "PRUNE_NONCES",
    "SQLITE",
    "AuditSql",
    "Dialect",
    "SqlConfirmations",
    "SqlLedger",
    "add_tables",
]

T = TypeVar("T")

PRUNE_NONCES = 64  # expired nonces deleted per claim: bounded work, still drains faster than one insert a call
PRUNE_DECISIONS = 64  # expired page records removed per new confirmation: bounded work per call


class Dialect:
    """How one driver spells what the ledger's statements leave open: its parameter marker, its high-water row, its
    types."""

    def __init__(self, placeholder: str, high_water: str, greatest: str, sqlite: bool) -> None:
        self.placeholder = placeholder
        self.high_water = high_water  # the one-row table holding the highest clock reading committed
        self.greatest = greatest  # the SQL function of the larger of two values
        self.sqlite = sqlite  # column types: SQLite's (True) or PostgreSQL's

    def run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute `sql` with its `?` markers in this driver's style."""
        return conn.execute(sql.replace("?", self.placeholder), tuple(params))

    def many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute `sql` once per row of `rows`."""
        conn.cursor().executemany(sql.replace("?", self.placeholder), rows)


SQLITE = Dialect("?", "high_water", "max", sqlite=True)
POSTGRES = Dialect("%s", "clock_high_water", "GREATEST", sqlite=False)


class Database(Protocol):
    """What a SQL store gives its ledger: its own transactions, its clock, its test hook."""

    def write_with(self, work: Callable[[Any], T], durable: bool = False) -> T:
        """`work(conn)` in one write transaction of the store's: COMMIT when it returns, ROLLBACK when it raises."""
        ...

    def read_with(self, work: Callable[[Any], T]) -> T:
        """`work(conn)` on the reader connection (never waits for a write)."""
        ...

    def now(self) -> float:
        """The store's clock."""
        ...

    def pause(self, stage: str) -> None:
        """The test-only hook at a stage of a transaction (None in service: nothing)."""
        ...

    def close(self) -> None:
        """Close the database."""
        ...


# =====================================================================================
# Tables
# =====================================================================================

# (name, SQLite type, PostgreSQL type) of each column added after the first audit schema.
ADDED_COLUMNS = (
    ("channel", "TEXT", "text"),
    ("approved_by", "TEXT", "text"),
    ("approved_at", "REAL", "double precision"),
    ("file_identity", "TEXT", "text"),
    ("approved_with", "TEXT", "text"),
)
_AUDIT_ADDED = (("refused_seq", "INTEGER", "bigint"), *ADDED_COLUMNS)  # after principal_seq, in this order
# Columns the confirmation pages' table gained after its first release: which tool asked, and
# what its page shows (notes_update's new text, notes_move's destination).
DECISIONS_ADDED_COLUMNS = (
    ("tool", "TEXT NOT NULL DEFAULT 'notes_delete'", "text NOT NULL DEFAULT 'notes_delete'"),
    ("detail", "TEXT", "text"),
    ("decided_with", "TEXT", "text"),
)
# `principal_seq` numbers each principal's entries 1, 2, 3, ... (the count bound keeps
# the newest `max_entries` of each); an audit from before it is numbered at start-up.
# A `refused` entry is numbered apart, in `refused_seq` (its principal_seq stays NULL),
# so the refusals' own bound keeps the newest of them without counting the others.
AUDIT_BY_PRINCIPAL = "CREATE INDEX IF NOT EXISTS audit_by_principal ON audit (principal, principal_seq)"
REFUSALS_BY_PRINCIPAL = "CREATE INDEX IF NOT EXISTS audit_refusals_by_principal ON audit (principal, refused_seq)"
# An entry whose kept text may still exist (`a`: the audit row): a trash row under it
# (SQL stores), or a trash file it names that trashDays and a grace have not yet expired
# (folders: the ledger cannot look in the folder). Parameters: SQL_TRASH, the time
# Retention.files_kept_after gives.
KEEPS_TEXT = (
    "(EXISTS (SELECT 1 FROM deleted_notes k WHERE k.audit_id = a.id)"
    " OR (a.trash IS NOT NULL AND a.trash <> ? AND a.at > ?))"
)


def _tables(sqlite: bool) -> tuple[str, ...]:
    """The ledger's tables and indexes in one driver's types."""
    key, real, integer = (
        ("INTEGER PRIMARY KEY AUTOINCREMENT", "REAL", "INTEGER")
        if sqlite
        else ("bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "double precision", "bigint")
    )
    # A new audit has every column at once, in the order the additions give an older one
    # (each ALTER TABLE makes SQLite parse the whole schema again).
    added = "".join(f", {name} {kinds[0] if sqlite else kinds[1]}" for name, *kinds in _AUDIT_ADDED)
    return (
        f"CREATE TABLE IF NOT EXISTS audit (id {key}, at {real} NOT NULL, principal TEXT NOT NULL, tool TEXT,"
        " outcome TEXT NOT NULL, note_id TEXT, title TEXT, workspace TEXT, uri TEXT, request_id TEXT,"
        f" client_name TEXT, trash TEXT, restores {integer}, principal_seq {integer}{added})",
        "CREATE INDEX IF NOT EXISTS audit_by_time ON audit (at)",
        "CREATE INDEX IF NOT EXISTS audit_by_outcome ON audit (outcome, id)",
        f"CREATE TABLE IF NOT EXISTS deleted_notes (audit_id {integer} PRIMARY KEY, id TEXT NOT NULL,"
        " title TEXT NOT NULL,"
        f" uri TEXT NOT NULL, revision {integer} NOT NULL, deleted_at {real} NOT NULL, body TEXT)",
        "CREATE INDEX IF NOT EXISTS deleted_by_time ON deleted_notes (deleted_at)",
        # The confirmation page's decisions (code/browser_confirm.py), one row per nonce.
        "CREATE TABLE IF NOT EXISTS browser_confirmations ("
        " nonce TEXT PRIMARY KEY, handle TEXT NOT NULL UNIQUE, principal TEXT NOT NULL, workspace TEXT NOT NULL,"
        f" title TEXT NOT NULL, expires_at {real} NOT NULL, status TEXT NOT NULL, note_id TEXT, version TEXT,"
        f" decided_by TEXT, decided_at {real}, tool TEXT NOT NULL DEFAULT 'notes_delete', detail TEXT,"
        " decided_with TEXT)",
        "CREATE INDEX IF NOT EXISTS browser_confirmations_by_principal ON browser_confirmations"
        " (principal, status, expires_at)",
        "CREATE INDEX IF NOT EXISTS browser_confirmations_by_expiry ON browser_confirmations (expires_at)",
        # The passkeys people approve with on the page (code/passkey_pages.py), one row per credential.
        "CREATE TABLE IF NOT EXISTS passkeys (credential_id TEXT PRIMARY KEY, principal TEXT NOT NULL,"
        " public_key TEXT NOT NULL,"
        f" sign_count {integer} NOT NULL, created_at {real} NOT NULL, last_used_at {real}, label TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS passkeys_by_principal ON passkeys (principal, created_at)",
    )


def add_tables(conn: Any, dialect: Dialect, columns_of: Callable[[str], list[str]]) -> None:
    """The ledger's tables, added to a database that lacks them, and the columns added since (the caller's
    transaction)."""
    for statement in _tables(dialect.sqlite):
        dialect.run(conn, statement)
    _add_columns(
        conn,
        dialect,
        "audit",
        columns_of("audit"),  # the two numbers: an audit from before the bounds
        (("principal_seq", "INTEGER", "bigint"), *_AUDIT_ADDED),
    )
    AuditSql(dialect).number_entries(conn)
    _add_columns(conn, dialect, "browser_confirmations", columns_of("browser_confirmations"), DECISIONS_ADDED_COLUMNS)


def _add_columns(
    conn: Any, dialect: Dialect, table: str, present: Sequence[str], columns: Sequence[tuple[str, str, str]]
) -> None:
    """Add each of `columns` the table lacks (`present`: its columns now)."""
    for name, sqlite_type, postgres_type in columns:
        if name not in present:
            dialect.run(
                conn, f"ALTER TABLE {table} ADD COLUMN {name} {sqlite_type if dialect.sqlite else postgres_type}"
            )


# =====================================================================================
# The audit's statements
# =====================================================================================


class AuditSql:
    """The audit's statements in one driver's style, each inside the caller's transaction."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def insert(
        self,
        conn: Any,
        now: float,
        principal: str,
        outcome: str,
        facts: stores.Facts,
        context: audit.AuditContext | None = None,
        restores: int | None = None,
    ) -> int:
        """Write one entry; its id."""
        tool, workspace, request_id, client = audit.context_fields(context)
        channel = (
            (context.channel, context.approved_by, context.approved_at, context.approved_with)
            if context is not None
            else (None, None, None, None)
        )
        seq = "refused_seq" if outcome == audit.REFUSED else "principal_seq"  # numbered among its own kind
        (entry_id,) = self.dialect.run(
            conn,
            "INSERT INTO audit (at, principal, tool, outcome, note_id, title, workspace, uri, request_id,"
            f" client_name, trash, restores, channel, approved_by, approved_at, approved_with, file_identity, {seq})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            f" (SELECT COALESCE(MAX({seq}), 0) + 1 FROM audit WHERE principal = ?)) RETURNING id",
            (now, principal, tool, outcome, facts.note_id, audit.clip(facts.title), workspace, facts.uri, request_id,
             client, facts.trash, restores, *channel, facts.file_identity, principal),
        ).fetchone()  # fmt: skip
        return int(entry_id)

    def prune(self, conn: Any, now: float, principal: str, retention: stores.Retention) -> None:
        """Remove at most PRUNE_BATCH trashed notes past their age, entries past theirs, and of `principal`'s past
        each count bound.

        An entry whose kept text may still exist (KEEPS_TEXT) is never removed: `audit
        restore` needs it. The trash goes first, so an entry whose text just expired goes
        in the same call.
        """
        run = self.dialect.run
        run(
            conn,
            "DELETE FROM deleted_notes WHERE audit_id IN"
            " (SELECT audit_id FROM deleted_notes WHERE deleted_at <= ? ORDER BY deleted_at LIMIT ?)",
            (now - retention.trash_seconds, audit.PRUNE_BATCH),
        )
        kept = (stores.SQL_TRASH, retention.files_kept_after(now))
        run(
            conn,
            f"DELETE FROM audit WHERE id IN (SELECT a.id FROM audit a WHERE a.at <= ? AND NOT {KEEPS_TEXT}"
            " ORDER BY a.at LIMIT ?)",
            (now - retention.audit_seconds, *kept, audit.PRUNE_BATCH),
        )
        # The count bounds are per principal: with one bound for all, a principal confirming
        # in a loop would push every other principal's entries out of the audit. And
        # refusals are counted apart: a loop of refused calls (every refused call is an
        # entry) would otherwise push out the principal's own update, whose kept text
        # `audit restore` needs, or the moves a folder restore follows. A principal's
        # numbers only grow, so its newest `bound` of a kind are those within that many of
        # its newest number of that kind.
        for seq, bound in (("principal_seq", retention.max_entries), ("refused_seq", retention.refusals_kept)):
            run(
                conn,
                f"DELETE FROM audit WHERE id IN (SELECT a.id FROM audit a WHERE a.principal = ? AND a.{seq} <="
                f" (SELECT MAX({seq}) FROM audit WHERE principal = ?) - ? AND NOT {KEEPS_TEXT}"
                f" ORDER BY a.{seq} LIMIT ?)",
                (principal, principal, bound, *kept, audit.PRUNE_BATCH),
            )

    def number_entries(self, conn: Any) -> None:
        """Number each principal's entries by id where any lacks its number (a table from before it), and index them."""
        unnumbered = "principal_seq IS NULL AND refused_seq IS NULL"
        if self.dialect.run(conn, f"SELECT 1 FROM audit WHERE {unnumbered} LIMIT 1").fetchone() is not None:
            counts: dict[str, int] = {}
            # Refusals numbered apart keep their numbers; every other entry is numbered again, in id order.
            numbered = []
            for entry_id, principal in self.dialect.run(
                conn, "SELECT id, principal FROM audit WHERE refused_seq IS NULL ORDER BY id"
            ).fetchall():
                counts[principal] = counts.get(principal, 0) + 1
                numbered.append((counts[principal], entry_id))
            self.dialect.many(conn, "UPDATE audit SET principal_seq = ? WHERE id = ?", numbered)
        self.dialect.run(conn, AUDIT_BY_PRINCIPAL)
        self.dialect.run(conn, REFUSALS_BY_PRINCIPAL)

    def complete(self, conn: Any, entry_id: int, outcome: str, expected: str) -> None:
        """Set the outcome of an entry still holding `expected` (pending or consumed)."""
        self.dialect.run(
            conn, "UPDATE audit SET outcome = ? WHERE id = ? AND outcome = ?", (outcome, entry_id, expected)
        )

    def insert_restore(self, conn: Any, entry_id: int, now: float, facts: stores.Facts) -> int:
        """The entry recording that an operator restored `entry_id` (its workspace copied)."""
        row = self.dialect.run(conn, "SELECT workspace FROM audit WHERE id = ?", (entry_id,)).fetchone()
        context = audit.AuditContext(None, None, None, row[0] if row else None)
        return self.insert(conn, now, audit.OPERATOR, audit.RESTORED, facts, context, restores=entry_id)

    def keep(self, conn: Any, entry: int, note: main.Note, body: str | None, now: float) -> None:
        """Put one version of a note in the trash under the audit entry that removed or replaced it."""
        self.dialect.run(
            conn,
            "INSERT INTO deleted_notes (audit_id, id, title, uri, revision, deleted_at, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (entry, note.id, note.title, note.uri, note.revision, now, body),
        )

    def kept(self, conn: Any, entry_id: int) -> tuple[main.Note, str | None] | None:
        """The version the trash keeps under `entry_id`, or None."""
        row = self.dialect.run(
            conn, "SELECT id, title, uri, revision, body FROM deleted_notes WHERE audit_id = ?", (entry_id,)
        ).fetchone()
        return (main.Note(*row[:4]), row[4]) if row is not None else None

    def unkeep(self, conn: Any, entry_id: int) -> None:
        """Empty the trash row of `entry_id` (its version went back)."""
        self.dialect.run(conn, "DELETE FROM deleted_notes WHERE audit_id = ?", (entry_id,))

    def outcome(self, conn: Any, entry_id: int) -> str | None:
        """The outcome of entry `entry_id`, or None."""
        row = self.dialect.run(conn, "SELECT outcome FROM audit WHERE id = ?", (entry_id,)).fetchone()
        return row[0] if row is not None else None

    def entry(self, conn: Any, entry_id: int) -> dict[str, Any] | None:
        """One entry by id, or None."""
        row = self.dialect.run(
            conn, f"SELECT {', '.join(audit.COLUMNS)} FROM audit WHERE id = ?", (entry_id,)
        ).fetchone()
        return dict(zip(audit.COLUMNS, row, strict=True)) if row is not None else None

    def entries(
        self, conn: Any, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """Entries matching every filter given, oldest first."""
        where, params = [], []
        for column, op, value in (("principal", "=", principal), ("at", ">=", since), ("outcome", "=", outcome)):
            if value is not None:
                where.append(f"{column} {op} ?")
                params.append(value)
        sql = (
            f"SELECT {', '.join(audit.COLUMNS)} FROM audit"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id"
        )
        return [dict(zip(audit.COLUMNS, row, strict=True)) for row in self.dialect.run(conn, sql, params).fetchall()]


# =====================================================================================
# The ledger
# =====================================================================================

InTransaction = Callable[
    [Any, float, stores.Record], main.Settlement
]  # act(conn, now, record) inside the claim's transaction


class SqlLedger:
    """stores.Ledger over a SQL store's own transactions (`db`): one transaction claims, acts and audits."""

    def __init__(self, db: Database, dialect: Dialect, max_per_principal: int, retention: stores.Retention) -> None:
        self.db = db
        self.dialect = dialect
        self.sql = AuditSql(dialect)
        self.retention = retention
        self._limit = max_per_principal

    # ---------------------------------------------------------------- the claim

    def _raise_clock(self, conn: Any) -> float:
        """Raise the high-water mark to this host's clock; the result is "now" for this transaction."""
        # A clock stepped back (NTP, a VM restored, another instance's skewed clock) would
        # make a pruned nonce look unexpired again, and its replay would be accepted. So
        # time never runs backwards here: the highest reading any instance committed is
        # kept in the database, and it is committed with every prune that relied on it.
        # In PostgreSQL the row lock also puts every claim, on every host, in one order.
        d = self.dialect
        (now,) = d.run(
            conn, f"UPDATE {d.high_water} SET seen = {d.greatest}(seen, ?) RETURNING seen", (float(self.db.now()),)
        ).fetchone()
        return float(now)

    def _claim(self, conn: Any, principal: str, nonce: str, expires_at: float) -> float:
        """Claim the nonce inside the caller's transaction, or raise stores.Rollback(USED or FULL); "now" as
        committed."""
        run = self.dialect.run
        now = self._raise_clock(conn)
        run(
            conn,
            "DELETE FROM consumed_nonces WHERE nonce IN"
            " (SELECT nonce FROM consumed_nonces WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
            (now, PRUNE_NONCES),
        )
        # A state verified just before its expiry may reach us just after it. Its record of
        # an earlier use may already be pruned, so an expired nonce is refused here, with
        # the clock reading that pruning used; otherwise a replay could slip in at the edge.
        if not now < expires_at:
            raise stores.Rollback(main.Settlement.USED)
        claimed = run(
            conn,
            "INSERT INTO consumed_nonces (nonce, principal, expires_at) VALUES (?, ?, ?)"
            " ON CONFLICT (nonce) DO NOTHING RETURNING nonce",
            (nonce, principal, expires_at),
        ).fetchone()
        if claimed is None:
            raise stores.Rollback(main.Settlement.USED)  # replay: another call, on any instance, committed it first
        # Without a bound one principal confirming in a loop grows the table without limit.
        # Counted in SQL over unexpired rows (this one included), so rows not yet pruned
        # never count and every instance enforces the same bound.
        (held,) = run(
            conn, "SELECT COUNT(*) FROM consumed_nonces WHERE principal = ? AND expires_at > ?", (principal, now)
        ).fetchone()
        if held > self._limit:
            raise stores.Rollback(main.Settlement.FULL)
        return now

    def _entry(self, conn: Any, now: float, principal: str, outcome: str, facts: stores.Facts) -> int:
        """This request's entry, then a batch of old entries and trashed notes pruned; the id (the caller's
        transaction)."""
        entry_id = self.sql.insert(conn, now, principal, outcome, facts, audit.current())
        self.sql.prune(conn, now, principal, self.retention)
        audit.written(self, entry_id, outcome)
        return entry_id

    def consume_in(
        self, principal: str, nonce: str, expires_at: float, act: InTransaction
    ) -> tuple[main.Settlement, int | None]:
        """One durable write transaction: claim the nonce, run `act(conn, now, record)`, write the audit entry, COMMIT.

        `act` runs only after a successful claim; it returns CONSUMED, CHANGED or DELETED, or
        raises to roll everything back. It may call `record(settlement, facts, pending)` to
        write the audit entry with what it knows of the note (the id is returned); otherwise
        the entry is written after it, from its settlement. USED and FULL write nothing
        (None for the entry); a store's errors (StoreBusy, StoreGone) pass through.
        """

        def work(conn: Any) -> tuple[main.Settlement, int | None]:
            now = self._claim(conn, principal, nonce, expires_at)
            self.db.pause("claimed")
            entries: list[int] = []

            def record(
                settlement: main.Settlement,
                facts: stores.Facts = stores.Facts(),
                pending: bool = False,
                outcome: str | None = None,
            ) -> int:
                entries.append(
                    self._entry(conn, now, principal, outcome or audit.outcome_of(settlement, pending), facts)
                )
                return entries[-1]

            settled = act(conn, now, record)
            if not entries:
                record(settled)
            if settled is main.Settlement.DELETED:
                self.db.pause("deleted")
            return settled, entries[0]

        try:
            return self.db.write_with(work, durable=True)
        except stores.Rollback as refusal:
            return refusal.outcome, None

    def consume_with(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[stores.Record], main.Settlement]
    ) -> tuple[main.Settlement, int | None]:
        """As stores.Ledger.consume_with."""
        return self.consume_in(principal, nonce, expires_at, lambda conn, now, record: act(record))

    def act_in(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[Any, float, stores.Entry], T]
    ) -> tuple[main.Settlement, T | None]:
        """consume_in for a note tool's write, `act(conn, now, entry)`: CONSUMED with what it returned (CHANGED: a
        refusal), or USED/FULL with None."""
        done: list[T] = []

        def run(conn: Any, now: float, record: stores.Record) -> main.Settlement:
            done.append(act(conn, now, lambda outcome, facts: record(main.Settlement.CONSUMED, facts, outcome=outcome)))
            return main.Settlement.CHANGED if isinstance(done[0], str) else main.Settlement.CONSUMED

        settlement, _ = self.consume_in(principal, nonce, expires_at, run)
        return settlement, (done[0] if done else None)

    def consume_act(
        self, principal: str, nonce: str, expires_at: float, act: Callable[[stores.Entry], T]
    ) -> tuple[main.Settlement, T | None]:
        """As stores.Ledger.consume_act."""
        return self.act_in(principal, nonce, expires_at, lambda conn, now, entry: act(entry))

    # ---------------------------------------------------------------- writes without a nonce

    def audited_in(self, principal: str, act: Callable[[Any, float, stores.Entry], T]) -> T:
        """One write transaction: `act(conn, now, entry)` writes and calls entry(outcome, facts) for its audit entry;
        COMMIT."""

        def work(conn: Any) -> T:
            now = self._raise_clock(conn)
            return act(conn, now, lambda outcome, facts: self._entry(conn, now, principal, outcome, facts))

        return self.db.write_with(work)

    def audited(self, principal: str, act: Callable[[stores.Entry], T]) -> T:
        """As stores.Ledger.audited."""
        return self.audited_in(principal, lambda conn, now, entry: act(entry))

    def audit_refusal(self, principal: str, facts: stores.Facts) -> None:
        """As stores.Ledger.audit_refusal."""
        self.audited(principal, lambda entry: entry(audit.REFUSED, facts))

    def release(self, nonce: str, entry_id: int) -> None:
        """As stores.Ledger.release."""

        def work(conn: Any) -> None:
            self.dialect.run(conn, "DELETE FROM consumed_nonces WHERE nonce = ?", (nonce,))
            self.dialect.run(conn, "DELETE FROM audit WHERE id = ? AND outcome = ?", (entry_id, audit.PENDING))

        self.db.write_with(work)

    def complete_audit(self, entry_id: int, outcome: str, expected: str) -> None:
        """As stores.Ledger.complete_audit."""
        self.db.write_with(lambda conn: self.sql.complete(conn, entry_id, outcome, expected))

    def record_restore(self, entry_id: int, facts: stores.Facts) -> dict[str, Any]:
        """As stores.Ledger.record_restore."""
        return self.restore_in(lambda conn, now: self.sql.insert_restore(conn, entry_id, now, facts))

    def restore_in(self, act: Callable[[Any, float], int]) -> dict[str, Any]:
        """One write transaction: `act(conn, now)` puts something back and returns its restore entry's id; that
        entry."""

        def work(conn: Any) -> dict[str, Any] | None:
            return self.sql.entry(conn, act(conn, self.db.now()))

        entry = self.db.write_with(work)
        assert entry is not None  # written in this very transaction
        return entry

    # ---------------------------------------------------------------- reads

    def is_consumed(self, nonce: str) -> bool:
        """As stores.Ledger.is_consumed."""
        return (
            self.db.read_with(
                lambda conn: self.dialect.run(
                    conn, "SELECT 1 FROM consumed_nonces WHERE nonce = ?", (nonce,)
                ).fetchone()
            )
            is not None
        )

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """As stores.Ledger.audit_entries."""
        return self.db.read_with(lambda conn: self.sql.entries(conn, principal, since, outcome))

    def audit_entry(self, entry_id: int) -> dict[str, Any] | None:
        """As stores.Ledger.audit_entry."""
        return self.db.read_with(lambda conn: self.sql.entry(conn, entry_id))

    def decisions(self, clock: Callable[[], float]) -> stores.Confirmations:
        """The page's decisions in this database (every instance sees them)."""
        return SqlConfirmations(self.db, self.dialect, clock)

    def passkeys(self) -> stores.Passkeys:
        """The registered passkeys in this database (every instance sees them)."""
        return SqlPasskeys(self.db, self.dialect)

    def now(self) -> float:
        """As stores.Ledger.now: the database's clock."""
        return self.db.now()

    def stage(self, name: str) -> None:
        """As stores.Ledger.stage."""
        self.db.pause(name)

    def close(self) -> None:
        """As stores.Ledger.close."""
        self.db.close()


# =====================================================================================
# The confirmation page's decisions
# =====================================================================================

_DECISION_COLUMNS = (
    "handle, nonce, principal, workspace, title, expires_at, status, note_id, version, decided_by, decided_at, tool,"
    " detail, decided_with"
)


class SqlConfirmations:
    """stores.Confirmations in the store's own database, table browser_confirmations, through its transactions."""

    def __init__(self, db: Database, dialect: Dialect, clock: Callable[[], float]) -> None:
        self.db = db
        self.dialect = dialect
        self.clock = clock

    def open(self, record: stores.Decision) -> bool:
        """As Confirmations.open, in one write transaction (the prune included)."""
        now = self.clock()
        run = self.dialect.run

        def work(conn: Any) -> bool:
            run(
                conn,
                "DELETE FROM browser_confirmations WHERE nonce IN"
                " (SELECT nonce FROM browser_confirmations WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
                (now, PRUNE_DECISIONS),
            )
            (pending,) = run(
                conn,
                "SELECT COUNT(*) FROM browser_confirmations WHERE principal = ? AND status = ? AND expires_at > ?",
                (record.principal, stores.DECISION_PENDING, now),
            ).fetchone()
            if pending >= stores.MAX_PENDING_PER_PRINCIPAL:
                return False
            run(
                conn,
                f"INSERT INTO browser_confirmations ({_DECISION_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                tuple(record),
            )
            return True

        return bool(self.db.write_with(work))

    def _one(self, column: str, value: str) -> stores.Decision | None:
        now = self.clock()
        rows = self.db.read_with(
            lambda conn: self.dialect.run(
                conn,
                f"SELECT {_DECISION_COLUMNS} FROM browser_confirmations WHERE {column} = ? AND expires_at > ?",
                (value, now),
            ).fetchall()
        )
        return stores.Decision(*rows[0]) if rows else None

    def by_handle(self, handle: str) -> stores.Decision | None:
        """As Confirmations.by_handle."""
        return self._one("handle", handle)

    def by_nonce(self, nonce: str) -> stores.Decision | None:
        """As Confirmations.by_nonce."""
        return self._one("nonce", nonce)

    def decide(
        self,
        handle: str,
        principal: str,
        status: str,
        note_id: str | None,
        version: str | None,
        credential: str | None = None,
    ) -> bool:
        """As Confirmations.decide: one UPDATE of a pending row, so two decisions on any instances: one wins."""
        now = self.clock()
        changed = self.db.write_with(
            lambda conn: (
                self.dialect.run(
                    conn,
                    "UPDATE browser_confirmations SET status = ?, note_id = ?, version = ?, decided_by = ?,"
                    " decided_at = ?, decided_with = ?"
                    " WHERE handle = ? AND principal = ? AND status = ? AND expires_at > ?",
                    (
                        status,
                        note_id,
                        version,
                        principal,
                        now,
                        credential,
                        handle,
                        principal,
                        stores.DECISION_PENDING,
                        now,
                    ),
                ).rowcount
            )
        )
        return changed == 1


# =====================================================================================
# Passkeys
# =====================================================================================

_PASSKEY_COLUMNS = "credential_id, principal, public_key, sign_count, created_at, last_used_at, label"


class SqlPasskeys:
    """stores.Passkeys in the store's own database, table passkeys, through its transactions."""

    def __init__(self, db: Database, dialect: Dialect) -> None:
        self.db = db
        self.dialect = dialect

    def add(self, passkey: stores.Passkey) -> bool:
        """As Passkeys.add, in one write transaction (the bound counted in it)."""
        run = self.dialect.run

        def work(conn: Any) -> bool:
            (held,) = run(conn, "SELECT COUNT(*) FROM passkeys WHERE principal = ?", (passkey.principal,)).fetchone()
            if held >= stores.MAX_PASSKEYS_PER_PRINCIPAL:
                return False
            added = run(
                conn,
                f"INSERT INTO passkeys ({_PASSKEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (credential_id) DO NOTHING RETURNING credential_id",
                tuple(passkey),
            ).fetchone()
            return added is not None

        return bool(self.db.write_with(work))

    def get(self, credential_id: str) -> stores.Passkey | None:
        """As Passkeys.get."""
        rows = self.db.read_with(
            lambda conn: self.dialect.run(
                conn, f"SELECT {_PASSKEY_COLUMNS} FROM passkeys WHERE credential_id = ?", (credential_id,)
            ).fetchall()
        )
        return stores.Passkey(*rows[0]) if rows else None

    def of(self, principal: str | None = None) -> list[stores.Passkey]:
        """As Passkeys.of."""
        where, params = (" WHERE principal = ?", (principal,)) if principal is not None else ("", ())
        rows = self.db.read_with(
            lambda conn: self.dialect.run(
                conn, f"SELECT {_PASSKEY_COLUMNS} FROM passkeys{where} ORDER BY created_at, credential_id", params
            ).fetchall()
        )
        return [stores.Passkey(*row) for row in rows]

    def use(self, credential_id: str, sign_count: int, at: float) -> bool:
        """As Passkeys.use: one conditional UPDATE, so an assertion's count is accepted once on any instance."""
        changed = self.db.write_with(
            lambda conn: (
                self.dialect.run(
                    conn,
                    "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE credential_id = ?"
                    " AND (sign_count < ? OR (sign_count = 0 AND ? = 0))",
                    (sign_count, at, credential_id, sign_count, sign_count),
                ).rowcount
            )
        )
        return changed == 1

    def remove(self, credential_id: str) -> bool:
        """As Passkeys.remove."""
        removed = self.db.write_with(
            lambda conn: (
                self.dialect.run(conn, "DELETE FROM passkeys WHERE credential_id = ?", (credential_id,)).rowcount
            )
        )
        return removed == 1
