"""Scope: file-URI normalization, component-wise containment, per-principal authorization."""

from __future__ import annotations

import json
import unittest
from typing import Any

from helpers import support
from helpers.support import PRINCIPAL, WORKSPACE, accept, call, contained, make_server, note_ids, server_over, tps

import config
import frame
import main
import stores


class UriNormalization(unittest.TestCase):
    def test_equivalent_spellings_of_one_folder_normalize_to_one_string(self) -> None:
        spellings = [
            "file:///Users/alice/Documents/Notes",
            "file:///Users/alice/Documents/Notes/",
            "FILE:///Users/alice/Documents/Notes",
            "file://localhost/Users/alice/Documents/Notes",
            "file://LOCALHOST/Users/alice/Documents/Notes",
            "file:///Users//alice/./Documents/Notes",
            "file:///Users/alice/Documents/%4Eotes",
        ]
        for uri in spellings:
            with self.subTest(uri=uri):
                self.assertEqual(stores.normalize_file_uri(uri), WORKSPACE)

    def test_spaces_and_unicode_survive_normalization(self) -> None:
        self.assertEqual(main.parse_file_uri("file:///a/My%20Notes/caf%C3%A9"), ("a", "My Notes", "café"))
        self.assertEqual(stores.normalize_file_uri("file:///a/My Notes/café"), "file:///a/My%20Notes/caf%C3%A9")

    def test_ambiguous_or_foreign_uris_are_refused(self) -> None:
        refused = {
            "encoded dot-dot": "file:///a/%2e%2e/b",
            "plain dot-dot": "file:///a/../b",
            "double encoded": "file:///a/%252e%252e/b",
            "literal percent": "file:///a/100%25/b",
            "bad escape": "file:///a/%zz/b",
            "backslash": "file:///a\\b",
            "encoded backslash": "file:///a/%5Cb",
            "nul": "file:///a/%00/b",
            "raw nul": "file:///a/\x00/b",
            "control": "file:///a/%0A/b",
            "query": "file:///a/b?x=1",
            "fragment": "file:///a/b#x",
            "other host": "file://example.com/a/b",
            "userinfo": "file://user@localhost/a",
            "no authority": "file:/a/b",
            "http": "http://localhost/a/b",
            "no scheme": "/a/b",
            "invalid utf-8": "file:///a/%FF",
            "empty": "",
            "not a string": 7,
            "too long": "file:///" + "a" * main.MAX_URI_LENGTH,
        }
        for label, uri in refused.items():
            with self.subTest(label):
                with self.assertRaises(main.ScopeError):
                    main.parse_file_uri(uri)

    def test_uri_length_limit_is_inclusive(self) -> None:
        at_limit = "file:///" + "a" * (main.MAX_URI_LENGTH - len("file:///"))
        self.assertEqual(len(main.parse_file_uri(at_limit)), 1)
        with self.assertRaises(main.ScopeError):
            main.parse_file_uri(at_limit + "a")

    def test_a_refused_uri_is_refused_every_time_and_an_accepted_one_parses_alike_every_time(self) -> None:
        self.assertEqual(main.parse_file_uri("file:///w/1"), ("w", "1"))
        self.assertEqual(main.parse_file_uri("file:///w/1"), main.parse_file_uri("file://localhost/w/1"))
        for _ in range(2):
            with self.assertRaises(main.ScopeError):
                main.parse_file_uri("file:///w/../etc")

    def test_a_file_uri_without_a_path_is_refused_rather_than_read_as_the_root(self) -> None:
        # `file://` and `file://localhost` have no path at all; read as `/` they would
        # authorize (or, as a grant, hand out) the whole file system.
        for uri in ("file://", "file://localhost", "FILE://LOCALHOST"):
            with self.subTest(uri=uri):
                with self.assertRaises(main.ScopeError):
                    main.parse_file_uri(uri)
        self.assertEqual(main.parse_file_uri("file:///"), ())  # the root, spelled with its slash

    def test_delete_and_unit_separator_controls_are_refused_and_their_neighbours_accepted(self) -> None:
        for encoded in ("%7F", "%1F", "\x7f", "\x1f"):
            with self.subTest(encoded=encoded):
                with self.assertRaises(main.ScopeError):
                    main.parse_file_uri(f"file:///a/x{encoded}y")
        self.assertEqual(main.parse_file_uri("file:///a/x%7Ey%20z"), ("a", "x~y z"))


class Containment(unittest.TestCase):
    def test_containment_compares_components_not_string_prefixes(self) -> None:
        self.assertTrue(contained(WORKSPACE, WORKSPACE + "/a.md"))
        self.assertTrue(contained(WORKSPACE, WORKSPACE + "/deep/er/a.md"))
        self.assertTrue(contained(WORKSPACE, WORKSPACE))
        self.assertFalse(contained(WORKSPACE, "file:///Users/alice/Documents/Notes-evil/a.md"))
        self.assertFalse(contained(WORKSPACE, "file:///Users/alice/Documents/NotesX"))
        self.assertFalse(contained(WORKSPACE, "file:///Users/alice/Documents"))
        self.assertFalse(contained(WORKSPACE, "file:///tmp/a.md"))
        self.assertFalse(contained("file:///bad/%2e%2e", WORKSPACE))

    def test_look_alike_notes_outside_the_workspace_are_never_offered(self) -> None:
        server = make_server()
        form = support.answered(server, call(tps()), PRINCIPAL)["result"]["inputRequests"]["delete_choice"]
        offered = [o["const"] for o in form["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]]
        self.assertNotIn("evil-1", offered)
        self.assertNotIn("tmp-1", offered)

    def test_an_outside_note_id_cannot_be_smuggled_into_the_accept(self) -> None:
        server = make_server()
        state = support.answered(server, call(tps()), PRINCIPAL)["result"]["requestState"]
        for outside in ("evil-1", "tmp-1", "note-99"):
            with self.subTest(note=outside):
                response = support.answered(
                    server, call(tps(), id=2, requestState=state, inputResponses=accept(outside)), PRINCIPAL
                )
                self.assertEqual(response["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(len(note_ids(server)), 6)
        # The refusals did not consume the state.
        done = support.answered(
            server, call(tps(), id=3, requestState=state, inputResponses=accept("note-3")), PRINCIPAL
        )["result"]
        self.assertEqual(done["structuredContent"], {"deleted": True, "noteId": "note-3"})

    def test_the_workspace_folder_itself_is_not_a_note_inside_it(self) -> None:
        note = main.Note("n", "TPS report", WORKSPACE)
        self.assertFalse(main.inside_workspace(note, main.parse_file_uri(WORKSPACE)))


class Authorization(unittest.TestCase):
    def test_a_workspace_uri_without_a_path_is_refused_as_an_argument_and_as_a_grant(self) -> None:
        server = server_over(main.lesson_notes(), grants={PRINCIPAL: ["file:///"]})  # alice may see everything
        for uri in ("file://", "file://localhost"):
            with self.subTest(uri=uri):
                result = support.answered(server, call(tps(workspace=uri)), PRINCIPAL)["result"]
                self.assertIs(result["isError"], True)
                self.assertIn("must name a local path", result["content"][0]["text"])
                self.assertNotIn("inputRequests", result)
                with self.assertRaises(ValueError):
                    main.AuthorizationPolicy({PRINCIPAL: [uri]})
        self.assertEqual(len(note_ids(server)), 6)

    def test_an_empty_workspace_uri_is_an_is_error_result_not_a_form(self) -> None:
        server = make_server()
        result = support.answered(server, call(tps(workspace="")), PRINCIPAL)["result"]
        self.assertIs(result["isError"], True)
        self.assertIn("workspaceUri must be a file:// URI string", result["content"][0]["text"])
        self.assertNotIn("inputRequests", result)

    def test_a_workspace_uri_of_exactly_the_limit_passes_the_schema_and_one_more_character_does_not(self) -> None:
        at_limit = WORKSPACE + "/" + "a" * (main.MAX_URI_LENGTH - len(WORKSPACE) - 1)
        self.assertEqual(len(at_limit), main.MAX_URI_LENGTH)
        server = make_server()
        inside = support.answered(server, call(tps(workspace=at_limit)), PRINCIPAL)["result"]
        self.assertIn("No note titled like", inside["content"][0]["text"])  # authorized and searched
        over = support.answered(server, call(tps(workspace=at_limit + "a")), PRINCIPAL)["result"]
        self.assertIn(
            f"workspaceUri must be a file:// URI string of 1..{main.MAX_URI_LENGTH}", over["content"][0]["text"]
        )
        # One character is inside the schema's bounds: it fails later, as an unparseable URI.
        short = support.answered(server, call(tps(workspace="x")), PRINCIPAL)["result"]
        self.assertIn("workspaceUri must use the file:// scheme", short["content"][0]["text"])
        self.assertEqual(len(note_ids(server)), 6)

    def test_a_one_character_title_is_accepted(self) -> None:
        result = support.answered(make_server(), call(tps(title="T")), PRINCIPAL)["result"]
        self.assertEqual(result["resultType"], "input_required")

    def test_a_refusal_names_the_callers_own_workspaces_and_nobody_elses_whatever_notes_exist(self) -> None:
        bob_ws = "file:///Users/bob/Notes"
        grants = {PRINCIPAL: [main.LESSON_WORKSPACE], "bob": [bob_ws, "file:///Users/bob/Work"]}
        full = support.server_over(main.lesson_notes(), grants=grants)
        empty = support.server_over([], grants=grants)
        cases = {
            PRINCIPAL: (tps(workspace=bob_ws), f"Your workspaces: {main.LESSON_WORKSPACE}."),
            "bob": (tps(), f"Your workspaces: {bob_ws}, file:///Users/bob/Work."),
            "mallory": (tps(), "You have no authorized workspaces."),
        }
        for principal, (arguments, said) in cases.items():
            for label, server in (("notes", full), ("no notes", empty)):
                with self.subTest(principal=principal, store=label):
                    text = support.answered(server, call(arguments), principal)["result"]["content"][0]["text"]
                    self.assertEqual(text, f"That workspace is not authorized for you. {said}")
        alice_text = support.answered(full, call(tps(workspace="https://x/")), PRINCIPAL)["result"]["content"][0][
            "text"
        ]
        self.assertIn(f"Your workspaces: {main.LESSON_WORKSPACE}.", alice_text)  # an unknown workspace too
        self.assertNotIn("bob", alice_text)
        self.assertEqual(len(note_ids(full)), 6)

    def test_a_principal_without_the_grant_gets_is_error_and_learns_nothing(self) -> None:
        server = make_server()
        for principal in ("bob", "", "ALICE"):
            with self.subTest(principal=principal):
                result = support.answered(server, call(tps()), principal)["result"]
                self.assertIs(result["isError"], True)
                text = result["content"][0]["text"]
                self.assertNotIn("TPS report 20", text)
                self.assertNotIn("note-", text)
                self.assertNotIn("inputRequests", result)
        self.assertEqual(len(note_ids(server)), 6)

    def test_an_unauthorized_workspace_and_a_missing_one_read_the_same(self) -> None:
        server = make_server()
        missing = support.answered(server, call(tps(workspace="file:///Users/alice/Nowhere")), PRINCIPAL)["result"]
        private = support.answered(server, call(tps(workspace="file:///Users/alice/Documents")), PRINCIPAL)["result"]
        self.assertEqual(missing, private)

    def test_a_sub_folder_of_an_authorized_workspace_is_authorized(self) -> None:
        policy = main.AuthorizationPolicy({"alice": [WORKSPACE]})
        self.assertTrue(policy.allows("alice", main.parse_file_uri(WORKSPACE + "/sub")))
        self.assertFalse(policy.allows("alice", main.parse_file_uri("file:///Users/alice/Documents")))
        self.assertFalse(policy.allows("bob", main.parse_file_uri(WORKSPACE)))

    def test_grants_are_normalized_at_construction_and_bad_ones_refused(self) -> None:
        policy = main.AuthorizationPolicy({"alice": ["file://localhost/Users/alice/Documents/Notes/"]})
        self.assertEqual(policy.workspaces("alice"), [WORKSPACE])
        grants: Any  # values of several types, on purpose
        for grants in (
            {"alice": ["http://x/y"]},
            {"alice": "file:///a"},
            {"": ["file:///a"]},
            {7: ["file:///a"]},
            {None: []},
        ):
            with self.subTest(grants=grants):
                with self.assertRaises(ValueError):
                    main.AuthorizationPolicy(grants)
        # A bare string would be read one character at a time; the operator is told why.
        with self.assertRaises(ValueError) as caught:
            main.AuthorizationPolicy({"alice": "file:///a"})
        self.assertIn("must be a list of URIs", str(caught.exception))

    def test_the_principal_comes_from_the_transport_not_the_arguments_or_client_info(self) -> None:
        server = make_server()
        message = call(tps())
        message["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": "alice", "version": "1"}
        message["params"]["arguments"]["principal"] = "alice"
        response = support.answered(server, message, "mallory")
        self.assertIn("unexpected property 'principal'", response["result"]["content"][0]["text"])  # unknown argument
        del message["params"]["arguments"]["principal"]
        self.assertIs(support.answered(server, message, "mallory")["result"]["isError"], True)

    def test_no_match_and_too_many_matches_are_tool_errors(self) -> None:
        server = make_server()
        self.assertIs(support.answered(server, call(tps(title="zzz")), PRINCIPAL)["result"]["isError"], True)

    def test_candidate_limit_is_enforced_on_both_sides(self) -> None:
        def server_with(count: int) -> frame.Server:
            return server_over([main.Note(f"n{i}", f"Memo {i:03}", f"{WORKSPACE}/m{i}.md") for i in range(count)])

        at_limit = support.answered(server_with(main.MAX_CANDIDATES), call(tps(title="Memo")), PRINCIPAL)["result"]
        options = at_limit["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"][
            "oneOf"
        ]
        self.assertEqual(len(options), main.MAX_CANDIDATES)
        self.assertLessEqual(len(at_limit["requestState"]), main.MAX_STATE_LENGTH)
        over = support.answered(server_with(main.MAX_CANDIDATES + 1), call(tps(title="Memo")), PRINCIPAL)["result"]
        self.assertIs(over["isError"], True)
        self.assertNotIn("inputRequests", over)

    def test_state_for_the_largest_form_with_the_longest_ids_fits_the_state_limit(self) -> None:
        notes = [
            main.Note(f"{i:03}".ljust(stores.MAX_NOTE_ID_LENGTH, "x"), f"Memo {i}", f"{WORKSPACE}/m{i}.md")
            for i in range(main.MAX_CANDIDATES)
        ]
        server = server_over(notes)
        state = support.answered(server, call(tps(title="Memo")), PRINCIPAL)["result"]["requestState"]
        self.assertLessEqual(len(state), main.MAX_STATE_LENGTH)
        answer = {"delete_choice": {"action": "accept", "content": {"note_id": notes[-1].id, "confirm": True}}}
        done = support.answered(
            server, call(tps(title="Memo"), id=2, requestState=state, inputResponses=answer), PRINCIPAL
        )
        self.assertIs(done["result"]["structuredContent"]["deleted"], True)

    def test_duplicate_titles_are_told_apart_in_the_form(self) -> None:
        server = server_over([main.Note("a", "Same", f"{WORKSPACE}/a.md"), main.Note("b", "Same", f"{WORKSPACE}/b.md")])
        form = support.answered(server, call(tps(title="Same")), PRINCIPAL)["result"]["inputRequests"]["delete_choice"]
        titles = [o["title"] for o in form["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]]
        self.assertEqual(len(set(titles)), 2)


class NoteVersions(unittest.TestCase):
    def test_equal_fields_give_equal_versions_and_an_edit_is_a_new_version(self) -> None:
        note = main.Note("n0", "t0", "file:///w/n0.md")
        first = note.version
        self.assertEqual(len(first), 32)
        self.assertEqual(main.Note("n0", "t0", "file:///w/n0.md").version, first)  # equal fields, equal version
        for edited in (
            note._replace(title="t0 (edited)"),
            note._replace(revision=1),
            note._replace(uri="file:///w/m.md"),
        ):
            with self.subTest(edited=edited):
                self.assertNotEqual(edited.version, first)


class MemoryLookup(unittest.TestCase):
    """The memory store finds exactly what the definition finds: title contains the query, inside the workspace."""

    def store(self, notes: list[main.Note]) -> stores.MemoryStore:
        return stores.MemoryStore(notes, main.MemoryReplayStore(support.Clock()))

    def brute(self, notes: list[main.Note], workspace: main.Path, query: str) -> list[str]:
        folded = stores.fold_title(query)
        return [
            n.id
            for n in stores.form_order(
                n for n in notes if folded in stores.fold_title(n.title) and main.inside_workspace(n, workspace)
            )
        ]

    def test_every_query_finds_what_a_scan_of_every_note_finds(self) -> None:
        import random

        rng = random.Random(7)  # fixed: the same titles and queries on every run
        words = ["TPS", "report", "Straße", "STRASSE", "café", "CAFÉ", "plan", "x", "ab", "İstanbul", "ﬁle"]
        workspace = main.parse_file_uri(WORKSPACE)
        for size in (32, 60):
            notes = [
                main.Note(f"n{i}", " ".join(rng.choice(words) for _ in range(rng.randint(1, 3))), f"{WORKSPACE}/{i}.md")
                for i in range(size)
            ]
            store = self.store(notes)
            queries = ["t", "ab", "x", "strasse", "ße", "SS", "café plan", "report tps", "fi", "ﬁle", "zzz", "i̇st"]
            queries += [rng.choice(notes).title[rng.randint(0, 2) :][: rng.randint(1, 8)] or "a" for _ in range(40)]
            for query in queries:
                with self.subTest(size=size, query=query):
                    self.assertEqual(
                        [n.id for n in store.candidates(workspace, query)], self.brute(notes, workspace, query)
                    )

    def test_an_edited_or_removed_note_is_found_by_its_new_title_only(self) -> None:
        store = self.store([main.Note("n1", "Quarterly plan", f"{WORKSPACE}/n1.md")])
        workspace = main.parse_file_uri(WORKSPACE)
        store.put(main.Note("n1", "Budget memo", f"{WORKSPACE}/n1.md", 1))
        self.assertEqual(store.candidates(workspace, "plan"), [])
        self.assertEqual([n.id for n in store.candidates(workspace, "memo")], ["n1"])
        store.remove("n1")
        self.assertEqual(store.candidates(workspace, "memo"), [])


class ConfiguredNotes(unittest.TestCase):
    """A notes list from an operator is checked once, at start-up, before anything is served."""

    BAD = {
        "empty id": main.Note("", "TPS report", f"{WORKSPACE}/a.md"),
        "numeric id": main.Note(7, "TPS report", f"{WORKSPACE}/a.md"),  # type: ignore[arg-type]
        "id over the limit": main.Note("x" * (stores.MAX_NOTE_ID_LENGTH + 1), "TPS report", f"{WORKSPACE}/a.md"),
        "empty title": main.Note("a", "", f"{WORKSPACE}/a.md"),
        "blank title": main.Note("a", "  ", f"{WORKSPACE}/a.md"),
        "numeric title": main.Note("a", 7, f"{WORKSPACE}/a.md"),  # type: ignore[arg-type]
        "foreign uri": main.Note("a", "TPS report", "http://x/a.md"),
        "traversal uri": main.Note("a", "TPS report", f"{WORKSPACE}/%2e%2e/a.md"),
    }

    def test_each_malformed_note_is_refused_by_the_check_and_by_the_memory_store(self) -> None:
        for label, note in self.BAD.items():
            with self.subTest(label):
                with self.assertRaises(ValueError):
                    stores.check_note(note)
                with self.assertRaises(ValueError):
                    stores.MemoryStore([note], main.MemoryReplayStore(support.Clock()))

    def test_a_note_id_of_exactly_the_limit_is_accepted(self) -> None:
        note = main.Note("x" * stores.MAX_NOTE_ID_LENGTH, "T", f"{WORKSPACE}/a.md")
        stores.check_note(note)
        store = stores.MemoryStore([note], main.MemoryReplayStore(support.Clock()))
        self.assertEqual([n.id for n in store.all()], [note.id])

    def test_duplicate_note_ids_are_refused_and_the_first_is_not_silently_replaced(self) -> None:
        first = main.Note("a", "TPS report", f"{WORKSPACE}/a.md")
        with self.assertRaises(ValueError):
            stores.MemoryStore(
                [first, main.Note("a", "Other", f"{WORKSPACE}/b.md")], main.MemoryReplayStore(support.Clock())
            )

    def test_the_config_file_refuses_duplicate_empty_and_non_string_ids_and_titles(self) -> None:
        good = {"id": "n1", "title": "TPS report", "uri": f"{WORKSPACE}/n1.md"}
        principals = {PRINCIPAL: {"token": "a" * config.MIN_TOKEN_LENGTH, "workspaces": [WORKSPACE]}}
        cases = {
            "duplicate id": [good, dict(good, title="Other")],
            "empty id": [dict(good, id="")],
            "numeric id": [dict(good, id=7)],
            "empty title": [dict(good, title="")],
            "numeric title": [dict(good, title=7)],
        }
        for label, notes in cases.items():
            with self.subTest(label):
                with self.assertRaises(config.ConfigError):
                    config.parse_config(json.dumps({"principals": principals, "notes": notes}))
        loaded = config.parse_config(json.dumps({"principals": principals, "notes": [good]}))
        self.assertEqual([note.id for note in loaded["notes"]], ["n1"])


if __name__ == "__main__":
    unittest.main()
