"""The ledger contract: the memory ledger and the SQL ledgers answer alike, each behaviour written once.

LedgerContract holds the behaviours of stores.Ledger (claim and settle in one atomic step
with the change and its audit entry, the refusals that write nothing, the audit's
completion and release, the page's decisions); one subclass per ledger says how to open
it: in memory on the lesson's replay store, in an SQLite file of its own (the folder
store's), and in PostgreSQL (tests/test_postgres_store.py, on its throwaway cluster).
"""

from __future__ import annotations

import os
import tempfile
import unittest
from typing import Any
from unittest import mock

from helpers.sql_stores import SCRATCH
from helpers.support import PRINCIPAL, Clock, ContractCase

import audit
import ledger
import main
import sqlite_store
import stores

LATER = 1_000_000.0 + 600  # an expiry well after the test clock's start
BOUND = 2  # the replay bound each ledger is opened with
MEMORY_BOUND = 40  # stores.MEMORY_AUDIT_MAX_ENTRIES lowered for the memory store's count test


class Boom(Exception):
    """Raised by an act to show what a failing change undoes."""


class LedgerContract(ContractCase):
    """The behaviours; a subclass opens one ledger as `self.ledger` with a replay bound of BOUND."""

    ledger: stores.Ledger
    clock: Clock

    def open(self) -> stores.Ledger:
        raise NotImplementedError

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.ledger = self.open()

    def consume(self, nonce: str, act: Any = None, principal: str = PRINCIPAL) -> tuple[main.Settlement, int | None]:
        return self.ledger.consume_with(principal, nonce, LATER, act or (lambda record: main.Settlement.CONSUMED))

    def outcomes(self) -> list[str]:
        return [entry["outcome"] for entry in self.ledger.audit_entries()]

    def test_a_claim_writes_its_entry_once_and_its_replay_is_used_and_writes_nothing(self) -> None:
        settled, entry = self.consume("n1")
        self.assertIs(settled, main.Settlement.CONSUMED)
        self.assertTrue(self.ledger.is_consumed("n1"))
        self.assertEqual(self.outcomes(), [audit.CONSUMED])
        self.assertEqual(
            self.ledger.consume_with(PRINCIPAL, "n1", LATER, lambda record: main.Settlement.DELETED),
            (main.Settlement.USED, None),
        )
        self.assertEqual(self.outcomes(), [audit.CONSUMED])  # the replay wrote no entry
        assert entry is not None
        self.assertEqual(self.ledger.audit_entry(entry)["principal"], PRINCIPAL)  # type: ignore[index]

    def test_an_act_that_raises_undoes_the_claim_and_its_entry_so_the_state_may_be_answered_again(self) -> None:
        def act(record: Any) -> main.Settlement:
            record(main.Settlement.DELETED, audit.Facts("n-1", "Plan", "file:///w/plan.md"))
            raise Boom()

        with self.assertRaises(Boom):
            self.consume("n1", act)
        self.assertFalse(self.ledger.is_consumed("n1"))
        self.assertEqual(self.outcomes(), [])
        self.assertIs(self.consume("n1")[0], main.Settlement.CONSUMED)

    def test_the_entry_the_act_writes_is_the_entry_and_none_is_added_after_it(self) -> None:
        settled, entry = self.consume(
            "n1", lambda record: (record(main.Settlement.CHANGED, audit.Facts("n-1")), main.Settlement.CHANGED)[1]
        )
        self.assertIs(settled, main.Settlement.CHANGED)
        (only,) = self.ledger.audit_entries()
        self.assertEqual((only["id"], only["outcome"], only["note_id"]), (entry, audit.REFUSED, "n-1"))

    def test_a_principal_at_the_bound_is_full_and_the_refusal_writes_nothing_while_another_is_served(self) -> None:
        for k in range(BOUND):
            self.assertIs(self.consume(f"n{k}")[0], main.Settlement.CONSUMED)
        self.assertEqual(self.consume("over"), (main.Settlement.FULL, None))
        self.assertFalse(self.ledger.is_consumed("over"))
        self.assertEqual(len(self.outcomes()), BOUND)
        self.assertIs(self.consume("other", principal="bob")[0], main.Settlement.CONSUMED)

    def test_an_expired_state_is_used_and_writes_nothing(self) -> None:
        self.assertEqual(
            self.ledger.consume_with(PRINCIPAL, "n1", self.clock.now, lambda record: main.Settlement.CONSUMED),
            (main.Settlement.USED, None),
        )
        self.assertEqual((self.ledger.is_consumed("n1"), self.outcomes()), (False, []))

    def test_consume_act_returns_what_the_write_returned_and_a_refusal_text_settles_as_changed(self) -> None:
        note = main.Note("n-1", "Plan", "file:///w/plan.md", 2)
        self.assertEqual(
            self.ledger.consume_act(
                PRINCIPAL, "n1", LATER, lambda entry: (entry(audit.UPDATED, audit.Facts("n-1")), note)[1]
            ),
            (main.Settlement.CONSUMED, note),
        )
        self.assertEqual(
            self.ledger.consume_act(
                PRINCIPAL, "n2", LATER, lambda entry: (entry(audit.REFUSED, audit.Facts("n-1")), "why")[1]
            ),
            (main.Settlement.CHANGED, "why"),
        )
        self.assertEqual(
            self.ledger.consume_act(PRINCIPAL, "n2", LATER, lambda entry: "never run"), (main.Settlement.USED, None)
        )
        self.assertEqual(self.outcomes(), [audit.UPDATED, audit.REFUSED])

    def test_a_pending_entry_is_completed_once_or_released_with_its_claim(self) -> None:
        _, first = self.consume(
            "n1",
            lambda record: (record(main.Settlement.DELETED, audit.Facts("n-1"), pending=True), main.Settlement.DELETED)[
                1
            ],
        )
        _, second = self.consume(
            "n2",
            lambda record: (record(main.Settlement.DELETED, audit.Facts("n-2"), pending=True), main.Settlement.DELETED)[
                1
            ],
        )
        assert first is not None and second is not None
        self.ledger.complete_audit(first, audit.DELETED, audit.PENDING)
        self.ledger.complete_audit(first, audit.INTERRUPTED, audit.PENDING)  # no longer pending: unchanged
        self.ledger.release("n2", second)
        self.assertEqual(self.outcomes(), [audit.DELETED])
        self.assertEqual((self.ledger.is_consumed("n1"), self.ledger.is_consumed("n2")), (True, False))

    def test_audited_writes_and_refusals_are_entries_of_their_principal(self) -> None:
        self.assertEqual(
            self.ledger.audited("bob", lambda entry: (entry(audit.CREATED, audit.Facts("n-9")), "made")[1]), "made"
        )
        self.ledger.audit_refusal(PRINCIPAL, audit.Facts())
        self.assertEqual(
            [(e["principal"], e["outcome"]) for e in self.ledger.audit_entries()],
            [("bob", audit.CREATED), (PRINCIPAL, audit.REFUSED)],
        )
        self.assertEqual([e["outcome"] for e in self.ledger.audit_entries(principal="bob")], [audit.CREATED])
        restored = self.ledger.record_restore(self.ledger.audit_entries()[0]["id"], audit.Facts("n-9"))
        self.assertEqual(
            (restored["outcome"], restored["restores"]), (audit.RESTORED, self.ledger.audit_entries()[0]["id"])
        )

    def test_the_page_s_decision_is_kept_beside_the_nonces_and_taken_once(self) -> None:
        decisions = self.ledger.decisions(self.clock)
        record = stores.Decision("h" * 43, "n1", PRINCIPAL, "file:///w", "plan", LATER)
        self.assertTrue(decisions.open(record))
        self.assertEqual(decisions.by_nonce("n1"), record)
        self.assertTrue(decisions.decide(record.handle, PRINCIPAL, "approved", "n-1", "7"))
        self.assertFalse(decisions.decide(record.handle, PRINCIPAL, "declined", None, None))  # decided once
        self.assertEqual(self.ledger.decisions(self.clock).by_handle(record.handle).status, "approved")  # type: ignore[union-attr]

    def test_the_decision_keeps_the_passkey_that_approved(self) -> None:
        decisions = self.ledger.decisions(self.clock)
        record = stores.Decision("k" * 43, "n2", PRINCIPAL, "file:///w", "plan", LATER)
        self.assertTrue(decisions.open(record))
        self.assertTrue(decisions.decide(record.handle, PRINCIPAL, "approved", "n-1", "7", "cred-1"))
        self.assertEqual(decisions.by_nonce("n2").decided_with, "cred-1")  # type: ignore[union-attr]

    def passkey(self, credential_id: str = "cred-1", principal: str = PRINCIPAL, count: int = 5) -> stores.Passkey:
        return stores.Passkey(credential_id, principal, "cose-key", count, self.clock.now, None, "Laptop")

    def test_a_passkey_is_kept_read_back_listed_by_principal_and_removed_once(self) -> None:
        keys = self.ledger.passkeys()
        self.assertTrue(keys.add(self.passkey()))
        self.assertTrue(keys.add(self.passkey("cred-2", "bob")))
        self.assertEqual(self.ledger.passkeys().get("cred-1"), self.passkey())
        self.assertEqual([k.credential_id for k in keys.of(PRINCIPAL)], ["cred-1"])
        self.assertEqual(sorted(k.credential_id for k in keys.of()), ["cred-1", "cred-2"])
        self.assertTrue(keys.remove("cred-1"))
        self.assertFalse(keys.remove("cred-1"))
        self.assertIsNone(keys.get("cred-1"))
        self.assertEqual([k.credential_id for k in keys.of()], ["cred-2"])  # bob's untouched

    def test_a_taken_credential_id_is_refused_and_the_first_stays(self) -> None:
        keys = self.ledger.passkeys()
        self.assertTrue(keys.add(self.passkey()))
        self.assertFalse(keys.add(self.passkey(principal="bob")))
        self.assertEqual(keys.get("cred-1").principal, PRINCIPAL)  # type: ignore[union-attr]

    def test_passkeys_per_principal_are_bounded_and_another_principal_keeps_registering(self) -> None:
        keys = self.ledger.passkeys()
        for k in range(stores.MAX_PASSKEYS_PER_PRINCIPAL):
            self.assertTrue(keys.add(self.passkey(f"cred-{k}")))
        self.assertFalse(keys.add(self.passkey("one-more")))
        self.assertEqual(len(keys.of(PRINCIPAL)), stores.MAX_PASSKEYS_PER_PRINCIPAL)
        self.assertTrue(keys.add(self.passkey("bob-1", "bob")))

    def test_a_sign_count_must_grow_and_a_replayed_or_lower_count_changes_nothing(self) -> None:
        keys = self.ledger.passkeys()
        keys.add(self.passkey(count=5))
        for replayed in (5, 4, 0):
            self.assertFalse(keys.use("cred-1", replayed, self.clock.now + 1))
        self.assertEqual((keys.get("cred-1").sign_count, keys.get("cred-1").last_used_at), (5, None))  # type: ignore[union-attr]
        self.assertTrue(keys.use("cred-1", 6, self.clock.now + 1))
        self.assertEqual((keys.get("cred-1").sign_count, keys.get("cred-1").last_used_at), (6, self.clock.now + 1))  # type: ignore[union-attr]
        self.assertFalse(keys.use("unknown", 9, self.clock.now))

    def test_an_authenticator_that_keeps_no_count_stays_usable_at_zero(self) -> None:
        keys = self.ledger.passkeys()
        keys.add(self.passkey(count=0))
        self.assertTrue(keys.use("cred-1", 0, self.clock.now))
        self.assertTrue(keys.use("cred-1", 0, self.clock.now))
        self.assertTrue(keys.use("cred-1", 3, self.clock.now))
        self.assertFalse(keys.use("cred-1", 0, self.clock.now))  # it counted once: from then on it must grow


class MemoryLedger(LedgerContract, unittest.TestCase):
    def open(self) -> stores.Ledger:
        return stores.MemoryStore([], main.MemoryReplayStore(self.clock, BOUND), self.clock).ledger

    def test_the_memory_store_refuses_every_restore_and_writes_no_entry(self) -> None:
        store = stores.MemoryStore([], main.MemoryReplayStore(self.clock, BOUND), self.clock)
        store.audit_refusal(PRINCIPAL, audit.Facts("n-1"))
        with self.assertRaises(stores.StoreRefused):
            store.restore(store.audit_entries()[0]["id"])
        self.assertEqual([e["outcome"] for e in store.audit_entries()], [audit.REFUSED])

    def test_a_principal_in_a_loop_keeps_its_newest_entries_up_to_the_bound_and_another_keeps_its_own(self) -> None:
        with mock.patch.object(stores, "MEMORY_AUDIT_MAX_ENTRIES", MEMORY_BOUND):  # each write scans every entry
            led = self.open()
        self.assertEqual(stores.MEMORY_AUDIT_MAX_ENTRIES, 1_000)  # the bound unpatched
        led.audit_refusal("bob", audit.Facts("bob-1"))
        for k in range(MEMORY_BOUND):
            led.audit_refusal(PRINCIPAL, audit.Facts(f"n-{k}"))
        mine = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL)]
        self.assertEqual((len(mine), mine[0]), (MEMORY_BOUND, "n-0"))  # at the bound: all kept
        led.audit_refusal(PRINCIPAL, audit.Facts("one-more"))
        mine = [e["note_id"] for e in led.audit_entries(principal=PRINCIPAL)]
        self.assertEqual((len(mine), mine[0], mine[-1]), (MEMORY_BOUND, "n-1", "one-more"))  # the oldest went
        self.assertEqual([e["note_id"] for e in led.audit_entries(principal="bob")], ["bob-1"])


class SqliteLedger(LedgerContract, unittest.TestCase):
    def open(self) -> stores.Ledger:
        folder = tempfile.TemporaryDirectory(dir=SCRATCH)
        self.addCleanup(folder.cleanup)
        opened = sqlite_store.open_ledger(
            os.path.join(folder.name, "nonces.db"), clock=self.clock, max_per_principal=BOUND
        )
        self.addCleanup(opened.close)
        return opened

    def test_the_folder_store_s_ledger_is_a_ledger_alone_in_a_file_a_notes_store_can_open(self) -> None:
        self.consume("n1")
        path = os.path.join(os.path.dirname(self.ledger.db._path), "nonces.db")  # type: ignore[attr-defined]  # noqa: SLF001
        self.assertIsInstance(self.ledger, ledger.SqlLedger)
        self.ledger.close()
        reopened = sqlite_store.open_store(path, clock=self.clock)
        self.addCleanup(reopened.close)
        self.assertEqual((reopened.is_consumed("n1"), reopened.all()), (True, []))


if __name__ == "__main__":
    unittest.main()
