"""code/main.py's own unit tests: the lesson's pieces, driven in process on main.py alone.

With the checkpoints, these are what the lesson's command runs
(`cd code && python3 -m unittest discover tests -v`); the product's tests live beside them.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any

from helpers.support import (
    KEY,
    OTHER_KEY,
    PRINCIPAL,
    WORKSPACE,
    Clock,
    Log,
    accept,
    answered,
    call,
    make_lesson_server,
    note_ids,
    request,
    tps,
)

import main

ALL = ["evil-1", "note-14", "note-3", "note-7", "note-99", "tmp-1"]


def first_state(server: main.Server, arguments: dict | None = None) -> str:
    """The requestState of a first call."""
    return answered(server, call(arguments or tps()), PRINCIPAL)["result"]["requestState"]


class Containment(unittest.TestCase):
    def test_every_ambiguous_spelling_is_refused_and_a_look_alike_folder_is_outside(self) -> None:
        for uri in (
            f"{WORKSPACE}/%2e%2e/private.md",
            f"{WORKSPACE}/../private.md",
            f"{WORKSPACE}/%252e%252e/x",
            f"{WORKSPACE}\\..\\x",
            f"{WORKSPACE}/a%00b",
            "file://evil.example/Users/alice",
            "http://x/y",
            f"{WORKSPACE}?q",
            f"{WORKSPACE}#f",
            "file://",
            "x" * (main.MAX_URI_LENGTH + 1),
        ):
            with self.subTest(uri=uri):
                with self.assertRaises(main.ScopeError):
                    main.parse_file_uri(uri)
        evil = main.parse_file_uri("file:///Users/alice/Documents/Notes-evil/secret.md")
        self.assertFalse(main.is_within(evil, main.parse_file_uri(WORKSPACE)))
        self.assertEqual(
            main.format_file_uri(main.parse_file_uri("file://localhost/Users/alice/Documents/./Notes/")), WORKSPACE
        )

    def test_a_workspace_not_granted_is_an_error_result_naming_only_the_callers_own(self) -> None:
        server = make_lesson_server()
        result = answered(server, call(tps(workspace="file:///Users/bob/Notes")), PRINCIPAL)["result"]
        self.assertIs(result["isError"], True)
        self.assertIn(WORKSPACE, result["content"][0]["text"])
        self.assertNotIn("bob", result["content"][0]["text"])
        self.assertEqual(note_ids(server), ALL)


class SignedState(unittest.TestCase):
    def test_a_state_verifies_only_with_its_key_and_unaltered(self) -> None:
        signer = main.StateSigner(KEY)
        token = signer.sign({"sub": PRINCIPAL})
        self.assertEqual(signer.verify(token), {"sub": PRINCIPAL})
        for forged in (
            main.StateSigner(OTHER_KEY).sign({"sub": PRINCIPAL}),
            token[:-2] + "AA",
            token + ".",
            "v2" + token[2:],
        ):
            with self.subTest(forged=forged[:20]):
                with self.assertRaises(main.StateError):
                    signer.verify(forged)

    def test_a_key_shorter_than_the_minimum_or_a_ttl_out_of_range_is_refused(self) -> None:
        main.StateSigner(b"k" * main.MIN_KEY_BYTES)
        for key, ttl in (
            (b"k" * (main.MIN_KEY_BYTES - 1), 300.0),
            (KEY, 0),
            (KEY, float("nan")),
            (KEY, main.MAX_STATE_TTL_SECONDS + 1),
        ):
            with self.subTest(key=len(key), ttl=ttl):
                with self.assertRaises(ValueError):
                    main.StateSigner(key, ttl)
        self.assertEqual(main.StateSigner(KEY, main.MAX_STATE_TTL_SECONDS).ttl, main.MAX_STATE_TTL_SECONDS)

    def test_an_expired_state_is_refused_and_deletes_nothing(self) -> None:
        clock = Clock()
        server = make_lesson_server(clock=clock)
        state = first_state(server)
        clock.now += main.DEFAULT_STATE_TTL_SECONDS
        response = answered(server, call(tps(), id=2, requestState=state, inputResponses=accept()), PRINCIPAL)
        self.assertEqual(response["error"], {"code": main.INVALID_PARAMS, "message": main.STATE_INVALID})
        self.assertEqual(note_ids(server), ALL)


class ReplayStore(unittest.TestCase):
    def test_a_nonce_is_claimed_once_and_forgotten_only_after_its_expiry(self) -> None:
        clock = Clock()
        replay = main.MemoryReplayStore(clock)
        self.assertIs(replay.claim(PRINCIPAL, "n", clock.now + 10), main.Settlement.CONSUMED)
        self.assertIs(replay.claim(PRINCIPAL, "n", clock.now + 10), main.Settlement.USED)
        clock.now += 9.99
        self.assertTrue(replay.is_consumed("n"))
        clock.now += 0.01
        self.assertFalse(replay.is_consumed("n"))
        self.assertIs(replay.claim(PRINCIPAL, "n", clock.now), main.Settlement.USED)  # expired: never claimable again

    def test_a_clock_stepped_back_does_not_revive_a_pruned_nonce(self) -> None:
        clock = Clock()
        replay = main.MemoryReplayStore(clock)
        replay.claim(PRINCIPAL, "n", clock.now + 10)
        clock.now += 20  # pruned
        self.assertFalse(replay.is_consumed("n"))
        clock.now -= 15  # stepped back inside the old lifetime
        self.assertIs(replay.claim(PRINCIPAL, "n", clock.now + 10 - 5), main.Settlement.USED)

    def test_one_principal_at_the_bound_blocks_nobody_else(self) -> None:
        clock = Clock()
        replay = main.MemoryReplayStore(clock, max_per_principal=2)
        self.assertIs(replay.claim("a", "1", clock.now + 10), main.Settlement.CONSUMED)
        self.assertIs(replay.claim("a", "2", clock.now + 10), main.Settlement.CONSUMED)
        self.assertIs(replay.claim("a", "3", clock.now + 10), main.Settlement.FULL)
        self.assertIs(replay.claim("b", "4", clock.now + 10), main.Settlement.CONSUMED)
        self.assertEqual(len(replay), 3)

    def test_the_atomic_step_rolls_its_claim_back_when_a_check_raises(self) -> None:
        clock = Clock()
        replay, notes = main.MemoryReplayStore(clock), main.MemoryNotesStore(main.lesson_notes())
        note = notes.get("note-14")
        assert note is not None

        def broken(live: main.Note) -> bool:
            raise OSError("disk")

        with self.assertRaises(OSError):
            replay.settle(notes, PRINCIPAL, "n", clock.now + 10, (note.id, note.version), broken)
        self.assertFalse(replay.is_consumed("n"))
        self.assertIsNotNone(notes.get("note-14"))
        self.assertIs(
            replay.settle(notes, PRINCIPAL, "n", clock.now + 10, (note.id, note.version), lambda live: True),
            main.Settlement.DELETED,
        )
        self.assertIsNone(notes.get("note-14"))

    def test_no_edit_can_land_between_the_atomic_steps_re_read_and_its_delete(self) -> None:
        clock = Clock()
        replay, notes = main.MemoryReplayStore(clock), main.MemoryNotesStore(main.lesson_notes())
        note = notes.get("note-14")
        assert note is not None
        writer_could_enter: list[bool] = []

        def recheck(live: main.Note) -> bool:  # runs after the re-read, before the delete
            def writer() -> None:  # another thread, as an edit from another request would be
                entered = notes.lock.acquire(blocking=False)
                writer_could_enter.append(entered)
                if entered:
                    notes.lock.release()

            probe = threading.Thread(target=writer)
            probe.start()
            probe.join()
            return True

        self.assertIs(
            replay.settle(notes, PRINCIPAL, "n", clock.now + 10, (note.id, note.version), recheck),
            main.Settlement.DELETED,
        )
        self.assertEqual(writer_could_enter, [False])
        edited = main.Note("note-7", "TPS report 2024 (edited)", f"{WORKSPACE}/tps-2024.md", 1)
        editor = threading.Thread(target=notes.put, args=(edited,))  # once the step is over, writers go on
        editor.start()
        editor.join()
        self.assertEqual(notes.get("note-7"), edited)


class Flow(unittest.TestCase):
    def test_a_note_edited_after_the_form_is_not_deleted_and_the_confirmation_ends(self) -> None:
        server = make_lesson_server()
        state = first_state(server)
        server.services.notes.put(main.Note("note-14", "TPS report 2025 (edited)", f"{WORKSPACE}/tps-2025.md", 1))
        result = answered(server, call(tps(), id=2, requestState=state, inputResponses=accept()), PRINCIPAL)["result"]
        self.assertIs(result["isError"], True)
        self.assertEqual(note_ids(server), ALL)
        again = answered(server, call(tps(), id=3, requestState=state, inputResponses=accept()), PRINCIPAL)
        self.assertEqual(again["error"]["code"], main.INVALID_PARAMS)

    def test_a_title_holding_a_nul_or_a_lone_surrogate_is_invalid_params_and_reaches_no_store(self) -> None:
        server = make_lesson_server()
        for title in ("TPS\x00", "TPS \ud800"):
            with self.subTest(title=repr(title)):
                response = answered(server, call(tps(title=title)), PRINCIPAL)
                self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(
            answered(server, call(tps(title="TPS\u00e9")), PRINCIPAL)["result"]["isError"], True
        )  # no match, no refusal

    def test_a_workspace_uri_holding_a_nul_or_a_lone_surrogate_is_invalid_params_and_reaches_no_store(self) -> None:
        server = make_lesson_server()
        server.services.notes.candidates = lambda workspace, title: 1 / 0  # type: ignore[method-assign, assignment, return-value]  # fails on purpose
        for uri in (f"{WORKSPACE}/\x00", f"{WORKSPACE}/\ud800", f"{WORKSPACE}/a\udfffb"):
            with self.subTest(uri=ascii(uri)):
                response = answered(server, call(tps(workspace=uri)), PRINCIPAL)
                self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
                self.assertIn("workspaceUri", response["error"]["message"])
        self.assertEqual(server.services.log, [])  # nothing was looked up, nothing was logged
        self.assertEqual(note_ids(server), ALL)

    def test_the_form_says_what_deleting_does_in_this_store(self) -> None:
        params = answered(make_lesson_server(), call(tps()), PRINCIPAL)["result"]["inputRequests"][main.INPUT_KEY][
            "params"
        ]
        self.assertIn(main.MemoryNotesStore.deletion, params["message"])

    def test_the_form_shows_the_person_the_folder_decoded_and_hidden_characters_spelled(self) -> None:
        message = main.delete_form("file:///Users/alice/My%20Notes", "TPS\u200breport", [], "")["params"]["message"]
        self.assertIn('"TPS\\u200breport" in file:///Users/alice/My Notes.', message)
        self.assertNotIn("%20", message)
        self.assertNotIn("\u200b", message)


class Frame(unittest.TestCase):
    def test_an_unexpected_error_is_32603_with_no_internals_and_the_traceback_in_the_log(self) -> None:
        log = Log()
        server = make_lesson_server(log=log)
        server.services.notes.candidates = lambda workspace, title: 1 / 0  # type: ignore[method-assign, assignment, return-value]  # fails on purpose
        response = server.handle(call(tps()), PRINCIPAL)
        self.assertEqual(
            response, {"jsonrpc": "2.0", "id": 1, "error": {"code": main.INTERNAL_ERROR, "message": "Internal error"}}
        )
        self.assertTrue(any("ZeroDivisionError" in line for line in log))

    def test_a_malformed_envelope_is_32600_and_an_unknown_method_32601(self) -> None:
        server = make_lesson_server()
        message: Any  # values of several types, on purpose
        for message in (
            [],
            {"jsonrpc": "1.0", "id": 1, "method": "x"},
            {"jsonrpc": "2.0", "id": True, "method": "x"},
            {"jsonrpc": "2.0", "id": 1, "method": 5},
        ):
            with self.subTest(message=message):
                self.assertEqual(answered(server, message, PRINCIPAL)["error"]["code"], main.INVALID_REQUEST)
        self.assertEqual(answered(server, request("initialize"), PRINCIPAL)["error"]["code"], main.METHOD_NOT_FOUND)

    def test_the_lesson_server_reports_the_tools_capability_and_its_one_tool(self) -> None:
        server = make_lesson_server()
        self.assertEqual(
            answered(server, request("server/discover"), PRINCIPAL)["result"]["capabilities"], {"tools": {}}
        )
        tools = answered(server, request("tools/list"), PRINCIPAL)["result"]["tools"]
        self.assertEqual([tool["name"] for tool in tools], [main.TOOL_NAME])


if __name__ == "__main__":
    unittest.main()
