"""The user's answer: cancel, decline, explicit no, bad content, live re-check, replay bound."""

from __future__ import annotations

import json
import threading
import unittest
from typing import Any

from helpers import support
from helpers.support import KEY, PRINCIPAL, WORKSPACE, Clock, Log, accept, call, make_server, note_ids, server_over, tps

import confirmations
import frame
import main
import stores

ALL = ["evil-1", "note-14", "note-3", "note-7", "note-99", "tmp-1"]


class Answers(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.server = make_server(clock=self.clock)
        self.state = support.answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        self.next_id = 2

    def answer(self, responses) -> dict:
        self.next_id += 1
        return support.answered(
            self.server, call(tps(), id=self.next_id, requestState=self.state, inputResponses=responses), PRINCIPAL
        )

    def test_cancel_completes_without_deleting_and_keeps_the_state_usable(self) -> None:
        result = self.answer({"delete_choice": {"action": "cancel"}})["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "cancelled"})
        self.assertIs(result["isError"], False)
        self.assertEqual(note_ids(self.server), ALL)
        again = self.answer({"delete_choice": {"action": "cancel"}})["result"]
        self.assertEqual(again["structuredContent"]["reason"], "cancelled")
        self.assertIs(self.answer(accept())["result"]["structuredContent"]["deleted"], True)

    def test_cancel_after_the_state_was_consumed_is_refused(self) -> None:
        self.answer(accept())
        self.assertEqual(self.answer({"delete_choice": {"action": "cancel"}})["error"]["code"], main.INVALID_PARAMS)

    def test_decline_is_terminal_for_the_confirmation_state(self) -> None:
        result = self.answer({"delete_choice": {"action": "decline"}})["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "declined"})
        for responses in (accept(), {"delete_choice": {"action": "decline"}}, {"delete_choice": {"action": "cancel"}}):
            with self.subTest(responses=responses):
                self.assertEqual(self.answer(responses)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), ALL)

    def test_accept_with_confirm_false_is_a_complete_no_that_consumes_the_state(self) -> None:
        result = self.answer(accept(confirm=False))["result"]
        self.assertEqual(result["structuredContent"], {"deleted": False, "reason": "not_confirmed"})
        self.assertIs(result["isError"], False)
        self.assertEqual(self.answer(accept())["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), ALL)

    def test_accept_content_that_fails_the_form_is_refused_and_the_state_stays_usable(self) -> None:
        bad = [
            {"delete_choice": {"action": "accept"}},
            {"delete_choice": {"action": "accept", "content": []}},
            {"delete_choice": {"action": "accept", "content": ["note-14"]}},
            {"delete_choice": {"action": "accept", "content": "note-14"}},
            {"delete_choice": {"action": "accept", "content": {"note_id": "note-14"}}},
            {"delete_choice": {"action": "accept", "content": {"confirm": True}}},
            {"delete_choice": {"action": "accept", "content": {"note_id": "note-14", "confirm": "true"}}},
            {"delete_choice": {"action": "accept", "content": {"note_id": "note-14", "confirm": 1}}},
            {"delete_choice": {"action": "accept", "content": {"note_id": ["note-14"], "confirm": True}}},
            {"delete_choice": {"action": "accept", "content": {"note_id": "note-99", "confirm": True}}},
            {"delete_choice": {"action": "ACCEPT"}},
            {"delete_choice": {}},
            {"delete_choice": "accept"},
        ]
        for responses in bad:
            with self.subTest(responses=responses):
                self.assertEqual(self.answer(responses)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), ALL)
        self.assertIs(self.answer(accept())["result"]["structuredContent"]["deleted"], True)

    def test_decline_and_cancel_ignore_stray_content(self) -> None:
        cancelled = self.answer({"delete_choice": {"action": "cancel", "content": "x"}})["result"]
        self.assertEqual(cancelled["structuredContent"], {"deleted": False, "reason": "cancelled"})
        declined = self.answer({"delete_choice": {"action": "decline", "content": ["x"]}})["result"]
        self.assertEqual(declined["structuredContent"], {"deleted": False, "reason": "declined"})
        self.assertEqual(note_ids(self.server), ALL)

    def test_read_answer_reads_absent_responses_as_no_answer(self) -> None:
        self.assertIsNone(main.read_answer(None, main.INPUT_KEY))
        self.assertIsNone(main.read_answer({}, main.INPUT_KEY))
        self.assertEqual(
            main.read_answer({main.INPUT_KEY: {"action": "decline"}}, main.INPUT_KEY), main.Answer("decline", {})
        )
        # A URL-mode accept carries no content: that is an answer, not a malformed one.
        self.assertEqual(
            main.read_answer({main.INPUT_KEY: {"action": "accept"}}, main.INPUT_KEY), main.Answer("accept", {})
        )

    def test_unrecognized_extra_answers_are_ignored(self) -> None:
        responses = {**accept(), "other_key": {"action": "accept", "content": {"x": 1}}}
        self.assertIs(self.answer(responses)["result"]["structuredContent"]["deleted"], True)

    def test_a_missing_delete_choice_answer_asks_again(self) -> None:
        for responses in ({}, {"something_else": {"action": "accept"}}):
            with self.subTest(responses=responses):
                result = self.answer(responses)["result"]
                self.assertEqual(result["resultType"], "input_required")
                self.assertIn("delete_choice", result["inputRequests"])
        self.assertEqual(note_ids(self.server), ALL)

    def test_a_replayed_accept_is_refused_and_deletes_nothing_more(self) -> None:
        self.answer(accept("note-14"))
        before = note_ids(self.server)
        self.assertEqual(self.answer(accept("note-7"))["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(note_ids(self.server), before)


class LiveRecheck(unittest.TestCase):
    """Between the form and the accept the world may change; the atomic step re-reads it."""

    def setUp(self) -> None:
        self.server = make_server()
        self.state = support.answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]

    def accept_and_replay(self) -> tuple[dict, dict]:
        first = support.answered(
            self.server, call(tps(), id=2, requestState=self.state, inputResponses=accept()), PRINCIPAL
        )
        second = support.answered(
            self.server, call(tps(), id=3, requestState=self.state, inputResponses=accept()), PRINCIPAL
        )
        return first, second

    def assert_changed_and_consumed(self, expected_ids: list[str]) -> None:
        first, second = self.accept_and_replay()
        self.assertIs(first["result"]["isError"], True)
        self.assertNotIn("structuredContent", first["result"])
        self.assertEqual(second["error"]["code"], main.INVALID_PARAMS)  # the nonce was consumed
        self.assertEqual(note_ids(self.server), expected_ids)

    def test_a_note_that_vanished_since_the_form_is_an_error_and_consumes_the_state(self) -> None:
        self.server.services.notes.remove("note-14")
        self.assert_changed_and_consumed([i for i in ALL if i != "note-14"])

    def test_a_note_edited_since_the_form_is_not_deleted(self) -> None:
        note = next(n for n in self.server.services.notes.all() if n.id == "note-14")
        self.server.services.notes.put(note._replace(title="TPS report 2025 (final)"))
        self.assert_changed_and_consumed(ALL)

    def test_a_note_moved_outside_the_workspace_since_the_form_is_not_deleted(self) -> None:
        note = next(n for n in self.server.services.notes.all() if n.id == "note-14")
        self.server.services.notes.put(note._replace(uri="file:///tmp/tps-2025.md"))
        self.assert_changed_and_consumed(ALL)

    def test_a_grant_revoked_since_the_form_refuses_the_deletion(self) -> None:
        self.server.tools[main.TOOL_NAME].policy = main.AuthorizationPolicy({})
        first, _ = self.accept_and_replay()
        self.assertIs(first["result"]["isError"], True)
        self.assertEqual(note_ids(self.server), ALL)

    def test_a_grant_revoked_inside_the_atomic_step_is_caught_by_the_recheck(self) -> None:
        original = self.server.services.replay.settle

        def revoke_then_consume(*args, **kwargs):
            self.server.tools[main.TOOL_NAME].policy = main.AuthorizationPolicy({})  # revoked after the early check
            return original(*args, **kwargs)

        self.server.services.replay.settle = revoke_then_consume  # type: ignore[method-assign]
        first, _ = self.accept_and_replay()
        self.assertIs(first["result"]["isError"], True)
        self.assertEqual(note_ids(self.server), ALL)

    def test_other_notes_are_untouched_when_the_chosen_one_changed(self) -> None:
        self.server.services.notes.remove("note-14")
        self.accept_and_replay()
        self.assertEqual(note_ids(self.server), [i for i in ALL if i != "note-14"])


class Atomicity(unittest.TestCase):
    def test_an_exception_inside_the_atomic_step_rolls_back_the_claim_and_deletes_nothing(self) -> None:
        log = Log()
        server = make_server(log=log)
        state = support.answered(server, call(tps()), PRINCIPAL)["result"]["requestState"]

        # Let the early authorization check pass, then fail inside the atomic step (the recheck),
        # the way a store's disk error would.
        calls = {"n": 0}

        def allows(principal: str, workspace: main.Path) -> bool:
            calls["n"] += 1
            if calls["n"] > 1:
                raise OSError("/secret/path/notes.db: disk I/O error")
            return True

        server.policy.allows = allows
        response = support.answered(server, call(tps(), id=2, requestState=state, inputResponses=accept()), PRINCIPAL)
        self.assertEqual(response["error"], {"code": main.INTERNAL_ERROR, "message": "Internal error"})
        self.assertNotIn("secret", str(response))
        self.assertTrue(any("Traceback" in line and "/secret/path" in line for line in log))
        self.assertEqual(note_ids(server), ALL)
        self.assertFalse(stores.store_of(server.services).is_consumed(frame.KeyRing([KEY]).verify(state)["nonce"]))


class ConsumeContract(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.server = make_server(clock=self.clock)
        self.store = self.server.notes
        self.note = {n.id: n for n in self.store.all()}["note-14"]

    def test_the_store_reports_consumed_deleted_and_changed_outcomes(self) -> None:
        exp = self.clock.now + 60
        self.assertIs(self.store.consume(PRINCIPAL, "n1", exp, None, lambda note: True), main.Settlement.CONSUMED)
        target = (self.note.id, self.note.version)
        self.assertIs(self.store.consume(PRINCIPAL, "n2", exp, target, lambda note: False), main.Settlement.CHANGED)
        self.assertIn("note-14", note_ids(self.server))
        self.assertIs(self.store.consume(PRINCIPAL, "n3", exp, target, lambda note: True), main.Settlement.DELETED)
        self.assertNotIn("note-14", note_ids(self.server))
        self.assertIs(self.store.consume(PRINCIPAL, "n3", exp, None, lambda note: True), main.Settlement.USED)

    def test_consuming_with_a_target_but_no_recheck_never_deletes(self) -> None:
        state = support.answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        payload = main.StatePayload.parse(frame.KeyRing([KEY]).verify(state))
        outcome = self.server.confirmations.consume(PRINCIPAL, payload, (self.note.id, self.note.version))
        self.assertIs(outcome, main.Settlement.CHANGED)  # the default re-check refuses
        self.assertEqual(note_ids(self.server), ALL)

    def test_a_racing_replay_on_one_nonce_deletes_once_and_the_other_is_used(self) -> None:
        barrier = threading.Barrier(2)
        outcomes: list[main.Settlement] = []
        target = (self.note.id, self.note.version)

        def race() -> None:
            barrier.wait()
            outcomes.append(self.store.consume(PRINCIPAL, "one-nonce", self.clock.now + 60, target, lambda note: True))

        threads = [threading.Thread(target=race) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(sorted(o.value for o in outcomes), ["deleted", "used"])
        self.assertEqual(len(note_ids(self.server)), len(ALL) - 1)
        self.assertEqual(len(self.store.replay), 1)


class ReplayBound(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        notes = [main.Note(f"n{i}", f"Memo {i}", f"{WORKSPACE}/m{i}.md") for i in range(10)]
        grants = {"alice": [WORKSPACE], "bob": [WORKSPACE]}
        self.server = server_over(notes, clock=self.clock, grants=grants, max_replay=3)

    def decline(self, principal: str, title: str = "Memo 1", request_id: int = 1) -> dict:
        state = support.answered(self.server, call(tps(title=title), id=request_id), principal)["result"][
            "requestState"
        ]
        responses = {"delete_choice": {"action": "decline"}}
        return support.answered(
            self.server,
            call(tps(title=title), id=request_id + 1, requestState=state, inputResponses=responses),
            principal,
        )

    def test_replay_capacity_is_per_principal_and_enforced_on_both_sides(self) -> None:
        for i in range(3):
            self.assertEqual(
                self.decline("alice", request_id=10 * i)["result"]["structuredContent"]["reason"], "declined"
            )
        full = self.decline("alice", request_id=100)["result"]
        self.assertIs(full["isError"], True)
        self.assertEqual(self.decline("bob")["result"]["structuredContent"]["reason"], "declined")
        self.assertEqual(len(self.server.services.replay), 4)

    def test_an_exhausted_principal_mutates_nothing_and_the_state_stays_unconsumed(self) -> None:
        for i in range(3):
            self.decline("alice", request_id=10 * i)
        state = support.answered(self.server, call(tps(title="Memo 2"), id=200), "alice")["result"]["requestState"]
        answer = {"delete_choice": {"action": "accept", "content": {"note_id": "n2", "confirm": True}}}
        refused = support.answered(
            self.server, call(tps(title="Memo 2"), id=201, requestState=state, inputResponses=answer), "alice"
        )
        self.assertIs(refused["result"]["isError"], True)
        self.assertIn("n2", [n.id for n in self.server.services.notes.all()])
        nonce = frame.KeyRing([KEY]).verify(state)["nonce"]
        self.assertFalse(stores.store_of(self.server.services).is_consumed(nonce))

    def test_expired_confirmations_are_pruned_by_the_injected_clock(self) -> None:
        for i in range(3):
            self.decline("alice", request_id=10 * i)
        self.clock.now += main.DEFAULT_STATE_TTL_SECONDS
        self.assertEqual(len(self.server.services.replay), 0)
        self.assertEqual(self.decline("alice", request_id=300)["result"]["structuredContent"]["reason"], "declined")


class ReplayStoreUnit(unittest.TestCase):
    def test_claim_then_claim_again_is_used_and_release_undoes_a_claim(self) -> None:
        clock = Clock()
        store = main.MemoryReplayStore(clock, max_per_principal=1)
        self.assertIs(store.claim("a", "n1", clock.now + 10), main.Settlement.CONSUMED)
        self.assertIs(store.claim("a", "n1", clock.now + 10), main.Settlement.USED)
        self.assertIs(store.claim("a", "n2", clock.now + 10), main.Settlement.FULL)
        store.release("n1")
        self.assertFalse(store.is_consumed("n1"))
        self.assertIs(store.claim("a", "n2", clock.now + 10), main.Settlement.CONSUMED)

    def test_a_claim_arriving_at_its_expiry_is_refused_even_after_pruning(self) -> None:
        clock = Clock()
        store = main.MemoryReplayStore(clock)
        self.assertIs(store.claim("a", "n1", clock.now + 10), main.Settlement.CONSUMED)  # the decline
        clock.now += 10  # the replayed accept was verified just before this instant
        self.assertIs(store.claim("a", "n1", clock.now), main.Settlement.USED)
        self.assertFalse(store.is_consumed("n1"))  # pruned, yet still refused

    def test_a_clock_stepped_back_after_pruning_cannot_revive_a_declined_state(self) -> None:
        clock = Clock()
        server = make_server(clock=clock)
        first = support.answered(server, call(tps()), PRINCIPAL)["result"]
        decline = {main.INPUT_KEY: {"action": "decline"}}
        self.assertEqual(
            support.answered(
                server, call(tps(), id=2, requestState=first["requestState"], inputResponses=decline), PRINCIPAL
            )["result"]["structuredContent"]["reason"],
            "declined",
        )
        clock.now += main.DEFAULT_STATE_TTL_SECONDS + 1
        self.assertEqual(len(server.services.replay), 0)  # the decline's record is pruned
        clock.now -= main.DEFAULT_STATE_TTL_SECONDS  # the wall clock steps back before the state's expiry
        replay = support.answered(
            server, call(tps(), id=3, requestState=first["requestState"], inputResponses=accept()), PRINCIPAL
        )
        self.assertEqual(replay["error"]["code"], main.INVALID_PARAMS)
        self.assertIn("note-14", note_ids(server))

    def test_pruning_with_mixed_expiries_frees_exactly_the_expired_claims(self) -> None:
        clock = Clock()
        store = main.MemoryReplayStore(clock, max_per_principal=3)
        # Claimed out of expiry order, so the heap's last entry is not its latest.
        for nonce, ttl in (("mid", 20), ("early", 10), ("late", 30)):
            self.assertIs(store.claim("a", nonce, clock.now + ttl), main.Settlement.CONSUMED)
        self.assertIs(store.claim("a", "over", clock.now + 40), main.Settlement.FULL)
        clock.now += 15  # "early" has expired, the other two have not
        self.assertEqual(len(store), 2)
        self.assertFalse(store.is_consumed("early"))
        self.assertTrue(store.is_consumed("mid") and store.is_consumed("late"))
        # Exactly one slot was freed: one new claim succeeds and the next is refused.
        self.assertIs(store.claim("a", "new-1", clock.now + 40), main.Settlement.CONSUMED)
        self.assertIs(store.claim("a", "new-2", clock.now + 40), main.Settlement.FULL)
        clock.now += 10  # "mid" expires too
        self.assertEqual(len(store), 2)
        self.assertIs(store.claim("a", "new-2", clock.now + 40), main.Settlement.CONSUMED)
        self.assertIs(store.claim("a", "new-3", clock.now + 40), main.Settlement.FULL)
        self.assertEqual(len(store), 3)

    def test_after_everything_expires_exactly_the_bounds_worth_of_new_claims_succeed(self) -> None:
        clock = Clock()
        store = main.MemoryReplayStore(clock, max_per_principal=3)
        for i, ttl in enumerate((30, 10, 20)):
            store.claim("a", f"old-{i}", clock.now + ttl)
        clock.now += 30
        outcomes = [store.claim("a", f"new-{i}", clock.now + 60) for i in range(4)]
        self.assertEqual(outcomes, [main.Settlement.CONSUMED] * 3 + [main.Settlement.FULL])
        self.assertEqual(len(store), 3)

    def test_a_bound_below_one_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            main.MemoryReplayStore(Clock(), max_per_principal=0)

    def test_memory_stays_bounded_under_a_flood(self) -> None:
        clock = Clock()
        store = main.MemoryReplayStore(clock, max_per_principal=main.MAX_REPLAY_PER_PRINCIPAL)
        outcomes = [store.claim("flooder", f"n{i}", clock.now + 60) for i in range(main.MAX_REPLAY_PER_PRINCIPAL + 500)]
        self.assertEqual(outcomes.count(main.Settlement.CONSUMED), main.MAX_REPLAY_PER_PRINCIPAL)
        self.assertEqual(outcomes.count(main.Settlement.FULL), 500)
        self.assertEqual(len(store), main.MAX_REPLAY_PER_PRINCIPAL)


if __name__ == "__main__":
    unittest.main()


class OneAnswerEntry(unittest.TestCase):
    """notes_delete, notes_publish and a fixture tool read answers through main.read_answer alone, and alike."""

    FLOWS = {
        # tool name: (arguments, the question's key, an accept that completes or moves on)
        main.TOOL_NAME: (
            tps(),
            main.INPUT_KEY,
            {"action": "accept", "content": {"note_id": "note-14", "confirm": True}},
        ),
        "notes_publish": (tps(), "publish_choice", {"action": "accept", "content": {"note_id": "note-7"}}),
        "test_input_required_result_elicitation": ({}, "user_name", {"action": "accept", "content": {"name": "Alice"}}),
    }

    def setUp(self) -> None:
        import conformance_fixtures
        import connect

        self.server = make_server()
        connect.install(self.server, {PRINCIPAL: "alice-token-0123456789abcdef"}, base_url="http://127.0.0.1:1")
        conformance_fixtures.install(self.server)
        self.next_id = 10

    def send(self, name: str, **extra) -> dict:
        self.next_id += 1
        arguments = self.FLOWS[name][0]
        message = call(arguments, id=self.next_id, capabilities={"elicitation": {"form": {}, "url": {}}}, **extra)
        message["params"]["name"] = name
        return support.answered(self.server, message, PRINCIPAL)

    def first(self, name: str) -> dict:
        result = self.send(name)["result"]
        self.assertEqual(result["resultType"], "input_required")
        self.assertEqual(list(result["inputRequests"]), [self.FLOWS[name][1]])
        return result

    def retry(self, name: str, first: dict, answer: dict) -> dict:
        return self.send(name, requestState=first["requestState"], inputResponses={self.FLOWS[name][1]: answer})

    def test_a_cancel_leaves_the_state_usable_for_every_tool_alike(self) -> None:
        for name in self.FLOWS:
            with self.subTest(tool=name):
                first = self.first(name)
                for _ in range(2):
                    cancelled = self.retry(name, first, {"action": "cancel"})["result"]
                    self.assertIs(cancelled["isError"], False)
                    self.assertIn("ancel", json.dumps(cancelled))
                accepted = self.retry(name, first, self.FLOWS[name][2])
                self.assertIn("result", accepted)  # the same state, still usable after two cancels
        self.assertNotIn("note-14", note_ids(self.server))  # notes_delete's accept went through

    def test_a_decline_consumes_the_state_for_every_tool_alike(self) -> None:
        for name in self.FLOWS:
            with self.subTest(tool=name):
                first = self.first(name)
                declined = self.retry(name, first, {"action": "decline"})["result"]
                self.assertIs(declined["isError"], False)
                self.assertIn("decline", json.dumps(declined))
                again = self.retry(name, first, self.FLOWS[name][2])
                self.assertEqual(again["error"], {"code": main.INVALID_PARAMS, "message": main.STATE_INVALID})
        self.assertEqual(note_ids(self.server), ALL)

    def test_no_answer_asks_again_in_the_same_flow_for_every_tool_alike(self) -> None:
        for name in self.FLOWS:
            with self.subTest(tool=name):
                first = self.first(name)
                asked = self.send(name, requestState=first["requestState"], inputResponses={})["result"]
                self.assertEqual(asked["resultType"], "input_required")
                nonces = [support.claims_of(state)["nonce"] for state in (first["requestState"], asked["requestState"])]
                self.assertEqual(nonces[0], nonces[1])

    def test_no_tool_reads_an_answers_action_itself(self) -> None:
        import ast
        import os

        # The lesson's flow reads its one answer with main.read_answer and branches in the open;
        # the product's asking tools go through Confirmations.answer, which calls read_answer.
        for module, classes, entry in (
            ("main.py", {"NotesDelete"}, "read_answer("),
            ("connect.py", {"NotesPublish"}, ".answer("),
            ("conformance_fixtures.py", {"AskingTool"}, ".answer("),
            ("confirmations.py", {"Confirmations"}, "main.read_answer("),
        ):
            with open(os.path.join(support.CODE, module), encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in classes]
            self.assertEqual(len(found), 1, module)
            with self.subTest(tool=found[0].name):
                source = ast.unparse(found[0])
                self.assertIn(entry, source)
                self.assertNotIn("['action']", source)  # nobody reads the raw answer past read_answer
                self.assertNotIn("get('action')", source)
                if entry == ".answer(":
                    for reading in ("read_answer", "'cancel'", "'decline'", "'accept'", ".action"):
                        self.assertNotIn(reading, source)


class TheAnswerEntryItself(unittest.TestCase):
    """Confirmations.answer called directly: what it returns, and that reading consumes nothing."""

    def setUp(self) -> None:
        self.server = make_server()
        self.state_text = support.answered(self.server, call(tps()), PRINCIPAL)["result"]["requestState"]
        self.state = main.StatePayload.parse(frame.KeyRing([KEY]).verify(self.state_text))

    def tool_call(self, responses: dict | None) -> main.ToolCall:
        meta = main.RequestMeta(main.PROTOCOL_VERSION, {"elicitation": {"form": {}}})
        return main.ToolCall(main.TOOL_NAME, tps(), meta, PRINCIPAL, self.state_text, responses)

    def test_no_responses_at_all_is_no_answer_to_a_form_or_to_any_other_question(self) -> None:
        forms: Any  # values of several types, on purpose
        for forms in (None, set()):
            with self.subTest(forms=forms):
                answered = self.server.confirmations.answer(self.tool_call(None), self.state, ["q"], forms=forms)
                self.assertEqual(answered, confirmations.Answered(confirmations.Reply.ASK_AGAIN, {}, None))
        self.assertFalse(stores.store_of(self.server.services).is_consumed(self.state.nonce))

    def test_a_choice_is_read_from_the_first_question_and_must_be_one_the_state_offered(self) -> None:
        responses = {
            "a": {"action": "accept", "content": {"note_id": "note-14"}},
            "b": {"action": "accept", "content": {"note_id": "evil-1"}},
        }
        answered = self.server.confirmations.answer(self.tool_call(responses), self.state, ["a", "b"], choice="note_id")
        self.assertEqual(answered.reply, confirmations.Reply.ACCEPTED)
        self.assertEqual(answered.chosen, ("note-14", dict(self.state.cands)["note-14"]))
        self.assertEqual(answered.content, {"a": {"note_id": "note-14"}, "b": {"note_id": "evil-1"}})
        with self.assertRaises(main.McpError) as refused:
            self.server.confirmations.answer(self.tool_call(responses), self.state, ["b", "a"], choice="note_id")
        self.assertEqual(refused.exception.code, main.INVALID_PARAMS)
        self.assertFalse(stores.store_of(self.server.services).is_consumed(self.state.nonce))
        self.assertEqual(note_ids(self.server), ALL)
