"""`serve.py` start-up: the config file, the environment and the command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import unittest
from typing import Any
from unittest import mock

from helpers import procs, support
from helpers.support import Log, accept, call, tps

import assemble
import audit
import config as configuration
import launch
import main
import serve
import streamable_http
from config import ConfigError

ALICE = {"token": "a" * configuration.MIN_TOKEN_LENGTH, "workspaces": [support.WORKSPACE]}
BOB = {"token": "b" * configuration.MIN_TOKEN_LENGTH, "workspaces": ["file:///Users/bob/Notes"]}
NOTE = {"id": "n1", "title": "TPS report", "uri": support.WORKSPACE + "/n1.md"}


def config(**changes: Any) -> dict[str, Any]:
    """A valid config with some top-level keys replaced (a value of ... removes the key)."""
    document: dict[str, Any] = {"principals": {"alice": dict(ALICE)}, "notes": [dict(NOTE)]}
    document.update(changes)
    return {key: value for key, value in document.items() if value is not ...}


class StartupRefusalCase(unittest.TestCase):
    """Runs `serve` in-process with a clean environment and captures stderr."""

    def serve(self, *argv: str, **environ: str) -> tuple[int, list[str]]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("NOTES_MCP_")} | environ
        stderr = io.StringIO()
        # A refusal must come before serving; if it did not, fail instead of serving forever.
        started = AssertionError("the server started instead of refusing")
        with (
            mock.patch.dict(os.environ, clean, clear=True),
            contextlib.redirect_stderr(stderr),
            mock.patch.object(launch, "run", side_effect=started),
        ):
            status = serve.serve(list(argv))
        return status, stderr.getvalue().splitlines()

    def assert_refused(self, document: dict[str, Any] | str, field: str, *argv: str, **environ: str) -> None:
        """`serve --http --config` exits 2 with exactly one stderr line naming `field`."""
        path = procs.write_config(self, document)
        status, lines = self.serve("--http", "--port", "0", "--config", path, *argv, **environ)
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(f"{field}:", lines[0])


class ConfigRejectionTests(StartupRefusalCase):
    """Every malformed config is refused at start-up, naming the field."""

    def test_unknown_top_level_keys_are_refused(self) -> None:
        self.assert_refused(config(extra=1), "extra")

    def test_a_missing_or_empty_principals_object_is_refused(self) -> None:
        self.assert_refused(config(principals=...), "principals")
        self.assert_refused(config(principals={}), "principals")

    def test_a_principal_without_token_or_with_unknown_keys_is_refused(self) -> None:
        self.assert_refused(config(principals={"alice": {"workspaces": []}}), "principals.alice.token")
        self.assert_refused(config(principals={"alice": dict(ALICE, colour="red")}), "principals.alice.colour")
        self.assert_refused(config(principals={"alice": "token"}), "principals.alice")

    def test_tokens_outside_the_length_bounds_or_alphabet_are_refused(self) -> None:
        for token in (
            "a" * (configuration.MIN_TOKEN_LENGTH - 1),
            "a" * (configuration.MAX_TOKEN_LENGTH + 1),
            "a b" * 10,
            12345678901234567,
        ):
            with self.subTest(token=token):
                self.assert_refused(config(principals={"alice": dict(ALICE, token=token)}), "principals.alice.token")

    def test_tokens_at_the_length_bounds_are_accepted(self) -> None:
        for token in ("a" * configuration.MIN_TOKEN_LENGTH, "a" * configuration.MAX_TOKEN_LENGTH):
            with self.subTest(length=len(token)):
                loaded = configuration.parse_config(json.dumps(config(principals={"alice": dict(ALICE, token=token)})))
                self.assertEqual(loaded["principals"]["alice"]["token"], token)

    def test_duplicate_tokens_are_refused(self) -> None:
        both = {"alice": ALICE, "bob": dict(BOB, token=ALICE["token"])}
        self.assert_refused(config(principals=both, stdioPrincipal="alice"), "principals.bob.token")

    def test_malformed_workspace_uris_are_refused(self) -> None:
        for uri in ("https://example.com/notes", "file:///a/../b", "file://server/share", "file:///a?b", 7):
            with self.subTest(uri=uri):
                self.assert_refused(
                    config(principals={"alice": dict(ALICE, workspaces=[uri])}), "principals.alice.workspaces[0]"
                )

    def test_malformed_notes_are_refused(self) -> None:
        self.assert_refused(config(notes=[dict(NOTE, uri="http://x/n1.md")]), "notes[0]")
        self.assert_refused(config(notes=[dict(NOTE, tags=[])]), "notes[0].tags")
        self.assert_refused(config(notes=[dict(NOTE, title="  ")]), "notes[0]")
        self.assert_refused(config(notes=[NOTE, NOTE]), "notes[1].id")
        self.assert_refused(config(notes=[dict(NOTE, revision=-1)]), "notes[0].revision")
        self.assert_refused(config(notes={"n1": NOTE}), "notes")

    def test_a_state_ttl_outside_its_bounds_is_refused(self) -> None:
        for ttl in (0, -1, "300", True, main.MAX_STATE_TTL_SECONDS + 1):
            with self.subTest(ttl=ttl):
                self.assert_refused(config(stateTtlSeconds=ttl), "stateTtlSeconds")
        self.assert_refused(json.dumps(config())[:-1] + ', "stateTtlSeconds": 1e400}', "stateTtlSeconds")  # inf

    def test_a_state_ttl_at_the_maximum_is_accepted(self) -> None:
        loaded = configuration.parse_config(json.dumps(config(stateTtlSeconds=main.MAX_STATE_TTL_SECONDS)))
        self.assertEqual(loaded["stateTtlSeconds"], main.MAX_STATE_TTL_SECONDS)

    def test_deletion_modes_and_retention_bounds_outside_them_are_refused(self) -> None:
        for field, value in (
            ("deletion", "delete"), ("deletion", True), ("trashDays", 0), ("trashDays", audit.MAX_RETENTION_DAYS + 1),
            ("auditDays", -1), ("auditDays", "30"), ("auditDays", True), ("auditMaxEntries", 0),
            ("auditMaxEntries", audit.MAX_AUDIT_ENTRIES + 1), ("auditMaxEntries", 10.0),
        ):  # fmt: skip
            with self.subTest(field=field, value=value):
                self.assert_refused(config(**{field: value}), field)
        self.assert_refused(json.dumps(config())[:-1] + ', "trashDays": 1e400}', "trashDays")  # inf

    def test_deletion_modes_and_retention_at_their_bounds_are_accepted_and_reach_the_store(self) -> None:
        document = config(
            deletion="unlink",
            trashDays=audit.MAX_RETENTION_DAYS,
            auditDays=0.5,
            auditMaxEntries=audit.MAX_AUDIT_ENTRIES,
        )
        loaded = configuration.parse_config(json.dumps(document))
        self.assertEqual(
            assemble.retention(loaded),
            audit.Retention(
                "unlink", audit.MAX_RETENTION_DAYS * audit.DAY_SECONDS, 0.5 * audit.DAY_SECONDS, audit.MAX_AUDIT_ENTRIES
            ),
        )
        self.assertEqual(configuration.parse_config(json.dumps(config(auditMaxEntries=1)))["auditMaxEntries"], 1)
        self.assertEqual(assemble.retention(configuration.parse_config(json.dumps(config()))), audit.Retention())
        self.assertEqual(
            audit.Retention(),
            audit.Retention(
                "trash", 30 * audit.DAY_SECONDS, 365 * audit.DAY_SECONDS, 100_000
            ),  # the documented defaults
        )

    def test_short_or_non_hex_keys_are_refused(self) -> None:
        for keys in (["ab" * (main.MIN_KEY_BYTES - 1)], ["zz" * main.MIN_KEY_BYTES], ["abc"], [], "ab" * 32):
            with self.subTest(keys=keys):
                field = "keys[0]" if keys and isinstance(keys, list) else "keys"
                self.assert_refused(config(keys=keys), field)

    def test_a_key_of_the_minimum_length_is_accepted(self) -> None:
        loaded = configuration.parse_config(json.dumps(config(keys=["ab" * main.MIN_KEY_BYTES])))
        self.assertEqual(loaded["keys"], [b"\xab" * main.MIN_KEY_BYTES])

    def test_a_stdio_principal_that_is_not_a_principal_is_refused(self) -> None:
        self.assert_refused(config(stdioPrincipal="mallory"), "stdioPrincipal")

    def test_two_principals_need_an_explicit_stdio_principal(self) -> None:
        self.assert_refused(config(principals={"alice": ALICE, "bob": BOB}), "stdioPrincipal")

    def test_malformed_allowed_origins_are_refused(self) -> None:
        for origin in ("example.com", "https://app.example/path", "ftp://app.example", "https://app.example:99999x"):
            with self.subTest(origin=origin):
                self.assert_refused(config(allowedOrigins=[origin]), "allowedOrigins[0]")

    def test_duplicate_keys_non_json_and_nan_are_refused(self) -> None:
        self.assert_refused('{"principals": {}, "principals": {}}', "principals")
        self.assert_refused("{not json", "config")
        self.assert_refused(
            '{"principals": {"alice": {"token": "aaaaaaaaaaaaaaaa", "workspaces": []}}, "stateTtlSeconds": NaN}',
            "config",
        )
        self.assert_refused("[]", "config")

    def test_a_deeply_nested_config_or_a_huge_integer_is_one_line_and_exit_2(self) -> None:
        self.assert_refused("[" * 100_000 + "]" * 100_000, "config")
        self.assert_refused(
            '{"principals": {"alice": {"token": "aaaaaaaaaaaaaaaa", "workspaces": []}}, "connectPort": '
            + "9" * 5000
            + "}",
            "config",
        )

    def test_a_newline_in_a_key_or_principal_name_cannot_split_the_error_line(self) -> None:
        for document in (
            config(**{"bogus\nnotes-mcp: listening on http://127.0.0.1:1/mcp": 1}),
            config(principals={"eve\nnotes-mcp: listening on http://127.0.0.1:1/mcp": dict(ALICE)}),
        ):
            with self.subTest(document=list(document)):
                path = procs.write_config(self, document)
                status, lines = self.serve("--http", "--port", "0", "--config", path)
                self.assertEqual(status, serve.EXIT_USAGE)
                self.assertEqual(len(lines), 1, lines)
                self.assertIn("\\n", lines[0])  # escaped, visibly
                self.assertFalse(lines[0].startswith("notes-mcp: listening"))

    def test_an_empty_db_argument_is_refused_like_an_empty_db_in_the_config(self) -> None:
        status, lines = self.serve("--stdio", "--db", "", NOTES_MCP_SECRET="11" * 32)
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("--db:", lines[0])
        self.assert_refused(config(db=""), "db")

    def test_a_missing_config_file_is_refused(self) -> None:
        status, lines = self.serve("--stdio", "--config", "/nonexistent/notes-mcp.json")
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertEqual(len(lines), 1)
        self.assertIn("config:", lines[0])

    def test_a_revision_up_to_a_signed_64_bit_integer_is_accepted_and_one_more_refused(self) -> None:
        top = configuration.MAX_REVISION
        self.assertEqual(
            configuration.load_config(procs.write_config(self, config(notes=[dict(NOTE, revision=top)])))["notes"][
                0
            ].revision,
            top,
        )
        for revision in (top + 1, 2**64, -1):
            with self.subTest(revision=revision):
                self.assert_refused(config(notes=[dict(NOTE, revision=revision)]), "notes[0].revision")

    def test_a_config_that_is_not_a_regular_file_is_refused_unread(self) -> None:
        status, lines = self.serve(
            "--http", "--port", "0", "--config", os.path.dirname(procs.write_config(self, config()))
        )
        self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
        self.assertIn("is not a regular file", lines[0])

    def test_dev_zero_as_config_is_refused_unread(self) -> None:
        # In a child with its memory capped: read to the end, /dev/zero never ends.
        script = (
            "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            f"sys.path.insert(0, {support.CODE!r}); import serve; "
            "sys.exit(serve.serve(['--http', '--port', '0', '--config', '/dev/zero']))"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, timeout=procs.GUARD, env=procs.server_env()
        )
        self.assertEqual(done.returncode, serve.EXIT_USAGE, done.stderr)
        lines = done.stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("/dev/zero is not a regular file", lines[0])

    def test_a_config_at_the_size_cap_is_read_and_one_byte_more_is_refused(self) -> None:
        text = json.dumps(config())
        exact = procs.write_config(self, text + " " * (configuration.MAX_CONFIG_BYTES - len(text)))
        self.assertEqual(configuration.load_config(exact)["stdioPrincipal"], "alice")
        over = procs.write_config(self, text + " " * (configuration.MAX_CONFIG_BYTES + 1 - len(text)))
        status, lines = self.serve("--http", "--port", "0", "--config", over)
        self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
        self.assertIn(f"larger than {configuration.MAX_CONFIG_BYTES} bytes", lines[0])

    def test_a_config_writable_by_group_or_others_is_refused(self) -> None:
        path = procs.write_config(self, config())
        for mode in (0o620, 0o602):
            with self.subTest(mode=oct(mode)):
                os.chmod(path, mode)
                status, lines = self.serve("--http", "--port", "0", "--config", path)
                self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
                self.assertIn("writable by group or others", lines[0])

    def test_a_config_owned_by_another_user_is_refused_and_one_owned_by_the_server_s_user_is_read(self) -> None:
        path = procs.write_config(self, config())
        owner = os.stat(path).st_uid
        self.assertEqual(configuration.load_config(path, euid=owner)["stdioPrincipal"], "alice")
        # Served by someone else: the file's owner could rewrite what that server trusts.
        other = owner + 1 if owner != configuration.ROOT_UID else 65534
        if owner == configuration.ROOT_UID:
            os.chown(path, other, -1)  # we are root: give the file away, and serve as root
            server = configuration.ROOT_UID
        else:
            server = other  # a file of ours read by a server running as another user
        with self.assertRaises(ConfigError) as refused:
            configuration.load_config(path, euid=server)
        self.assertIn(
            f"is owned by {configuration.user_name(os.stat(path).st_uid)}, not by {configuration.user_name(server)}",
            str(refused.exception),
        )
        self.assertIn(f"chown {configuration.user_name(server)} {path}", str(refused.exception))

    @unittest.skipUnless(os.geteuid() == 0, "only root can make a file root's and give one away")
    def test_a_root_owned_config_is_read_by_a_server_of_another_user_and_a_given_away_one_refused_at_start_up(
        self,
    ) -> None:
        path = procs.write_config(self, config())
        self.assertEqual(os.stat(path).st_uid, configuration.ROOT_UID)
        self.assertEqual(configuration.load_config(path, euid=65534)["stdioPrincipal"], "alice")  # /etc, DynamicUser=
        os.chown(path, 65534, -1)
        status, lines = self.serve("--http", "--port", "0", "--config", path)
        self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
        self.assertIn("chown root", lines[0])

    def test_a_config_in_a_folder_anyone_may_write_is_refused_unless_the_folder_is_sticky(self) -> None:
        path = procs.write_config(self, config())
        folder = os.path.dirname(path)
        for mode, refused in ((0o777, True), (0o1777, False), (0o775, False), (0o755, False)):
            with self.subTest(mode=oct(mode)):
                os.chmod(folder, mode)
                if refused:
                    status, lines = self.serve("--http", "--port", "0", "--config", path)
                    self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
                    self.assertIn(
                        f"is in {os.path.realpath(folder)}, which anyone can write to (mode 0777, no sticky bit)",
                        lines[0],
                    )
                    self.assertIn(f"chmod o-w {os.path.realpath(folder)}", lines[0])
                else:
                    self.assertEqual(configuration.load_config(path)["stdioPrincipal"], "alice")
        os.chmod(folder, 0o700)

    def test_a_config_below_a_folder_anyone_may_write_is_refused_however_deep(self) -> None:
        outer = tempfile.TemporaryDirectory(prefix="config-outer-")
        self.addCleanup(outer.cleanup)
        inner = os.path.join(outer.name, "a", "b")
        os.makedirs(inner, mode=0o700)
        path = os.path.join(inner, "config.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
            json.dump(config(), handle)
        os.chmod(os.path.join(outer.name, "a"), 0o777)  # anyone may rename b away and put another b there
        self.addCleanup(os.chmod, os.path.join(outer.name, "a"), 0o700)
        with self.assertRaises(ConfigError) as refused:
            configuration.load_config(path)
        self.assertIn(
            f"is in {os.path.realpath(os.path.join(outer.name, 'a'))}, which anyone can write to",
            str(refused.exception),
        )
        os.chmod(os.path.join(outer.name, "a"), 0o1777)
        self.assertEqual(configuration.load_config(path)["stdioPrincipal"], "alice")

    def test_a_config_readable_by_others_is_served_with_one_warning_and_a_private_one_without(self) -> None:
        path = procs.write_config(self, config())
        warned: list[str] = []
        configuration.load_config(path, warned.append)
        self.assertEqual(warned, [])  # mode 600
        os.chmod(path, 0o640)
        self.assertEqual(configuration.load_config(path, warned.append)["stdioPrincipal"], "alice")
        self.assertEqual(len(warned), 1)
        self.assertIn("readable by group or others (mode 0640)", warned[0])

    def test_a_config_s_relative_paths_mean_its_own_folder_and_absolute_ones_and_urls_stay(self) -> None:
        alice = dict(ALICE, notesDirs=["notes", "/srv/notes", "../shared", "~/Notes"])
        path = procs.write_config(self, config(notes=..., db="state/nonces.db", principals={"alice": alice}))
        folder = os.path.dirname(path)
        loaded = configuration.load_config(path)
        self.assertEqual(loaded["db"], os.path.join(folder, "state", "nonces.db"))
        self.assertEqual(
            loaded["principals"]["alice"]["notesDirs"],
            [os.path.join(folder, "notes"), "/srv/notes", os.path.join(folder, "..", "shared"), "~/Notes"],
        )
        for db in ("/var/lib/notes-mcp/notes.db", "postgresql://db.example/notes", "postgres:///notes"):
            with self.subTest(db=db):
                self.assertEqual(configuration.load_config(procs.write_config(self, config(db=db)))["db"], db)

    def test_a_config_db_starting_with_a_tilde_is_refused_naming_the_path_meant(self) -> None:
        path = procs.write_config(self, config(db="~/notes.db"))
        status, lines = self.serve("--stdio", "--config", path)
        self.assertEqual((status, len(lines)), (serve.EXIT_USAGE, 1))
        self.assertIn("db: ~/notes.db starts with ~", lines[0])
        self.assertIn(os.path.expanduser("~/notes.db"), lines[0])

    def test_control_and_format_characters_in_a_note_title_are_blanked_and_a_title_of_only_them_refused(self) -> None:
        loaded = configuration.load_config(
            procs.write_config(self, config(notes=[dict(NOTE, title="\u202egnp.exe plan\x1b[0m")]))
        )
        self.assertEqual(loaded["notes"][0].title, " gnp.exe plan [0m")
        self.assert_refused(config(notes=[dict(NOTE, title="\u202e\u200b\t")]), "notes[0]")

    def test_a_full_config_loads_every_field(self) -> None:
        document = config(
            principals={"alice": ALICE, "bob": BOB},
            stdioPrincipal="bob",
            stateTtlSeconds=60,
            keys=["11" * 32, "22" * 40],
            allowedOrigins=["https://App.Example:8443"],
        )
        loaded = configuration.load_config(procs.write_config(self, document))
        self.assertEqual(loaded["stdioPrincipal"], "bob")
        self.assertEqual(loaded["keys"], [b"\x11" * 32, b"\x22" * 40])
        self.assertEqual(loaded["allowedOrigins"], frozenset({"https://app.example:8443"}))
        self.assertEqual([note.id for note in loaded["notes"]], ["n1"])


class EnvironmentTests(StartupRefusalCase):
    """NOTES_MCP_SECRET and NOTES_MCP_TOKEN are checked like the config."""

    def test_a_short_or_malformed_secret_is_refused(self) -> None:
        for secret in ("ab" * (main.MIN_KEY_BYTES - 1), "not hex", "ab" * 32 + ",abc"):
            with self.subTest(secret=secret):
                status, lines = self.serve("--stdio", NOTES_MCP_SECRET=secret)
                self.assertEqual(status, serve.EXIT_USAGE)
                self.assertEqual(len(lines), 1)
                self.assertIn("NOTES_MCP_SECRET[", lines[0])

    def test_a_secret_and_config_keys_together_are_refused(self) -> None:
        self.assert_refused(config(keys=["11" * 32]), "keys", NOTES_MCP_SECRET="22" * 32)

    def test_a_short_token_in_the_environment_is_refused(self) -> None:
        status, lines = self.serve("--http", "--port", "0", NOTES_MCP_TOKEN="short", NOTES_MCP_SECRET="11" * 32)
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertIn("NOTES_MCP_TOKEN:", lines[-1])

    def test_an_older_key_still_verifies_after_rotation_and_a_dropped_key_does_not(self) -> None:
        old, new = bytes(range(32)), bytes(range(1, 33))
        before = assemble.build_server(configuration.lesson_config(), [old])
        form = support.answered(before, call(tps()), main.LESSON_PRINCIPAL)["result"]
        retry = call(tps(), id=2, requestState=form["requestState"], inputResponses=accept("note-14"))
        dropped = assemble.build_server(configuration.lesson_config(), [new])
        dropped.log = Log()  # keep the refusal's reason off the test output, and check it
        self.assertEqual(support.answered(dropped, retry, main.LESSON_PRINCIPAL)["error"]["code"], main.INVALID_PARAMS)
        self.assertEqual(dropped.log, ["refused requestState: unknown key id"])
        rotated = assemble.build_server(configuration.lesson_config(), [new, old])
        self.assertEqual(
            support.answered(rotated, retry, main.LESSON_PRINCIPAL)["result"]["structuredContent"],
            {"deleted": True, "noteId": "note-14"},
        )
        self.assertEqual([n.id for n in dropped.notes.all() if n.id == "note-14"], ["note-14"])

    def test_secret_keys_are_comma_separated_newest_first(self) -> None:
        self.assertEqual(
            assemble.signing_keys({}, {"NOTES_MCP_SECRET": "11" * 32 + ", " + "22" * 32}), [b"\x11" * 32, b"\x22" * 32]
        )


class CommandLineTests(StartupRefusalCase):
    """The transport flags and --no-auth."""

    def test_no_auth_is_refused_unless_the_host_is_loopback(self) -> None:
        for host in ("0.0.0.0", "192.0.2.1", "example.com", "::"):
            with self.subTest(host=host):
                status, lines = self.serve(
                    "--http", "--host", host, "--port", "0", "--no-auth", NOTES_MCP_SECRET="11" * 32
                )
                self.assertEqual(status, serve.EXIT_USAGE)
                self.assertIn("loopback", lines[-1])

    def test_no_auth_is_refused_for_stdio(self) -> None:
        status, lines = self.serve("--stdio", "--no-auth")
        self.assertEqual(status, serve.EXIT_USAGE)
        self.assertIn("--no-auth", lines[-1])

    def test_exactly_one_transport_must_be_chosen(self) -> None:
        for argv in ((), ("--stdio", "--http")):
            with self.subTest(argv=argv):
                self.assertEqual(self.serve(*argv)[0], serve.EXIT_USAGE)

    def test_loopback_means_localhost_and_loopback_addresses_only(self) -> None:
        for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"):
            self.assertTrue(streamable_http.is_loopback(host), host)
        for host in ("0.0.0.0", "::", "192.168.1.10", "example.com", "localhost.example.com"):
            self.assertFalse(streamable_http.is_loopback(host), host)


class SubprocessExitStatusTests(unittest.TestCase):
    """The real process: exit status 2 and one stderr line, nothing on stdout."""

    def test_sigint_while_start_up_waits_on_a_locked_database_is_one_line_and_exit_2(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        db = os.path.join(folder.name, "locked.db")
        holder = sqlite3.connect(db, isolation_level=None)
        self.addCleanup(holder.close)
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")  # another instance stuck inside its transaction
        process = procs.Process(self, ["--stdio", "--db", db], procs.server_env(), stdin=subprocess.PIPE)
        # The key warning comes after the signal handlers are set and before the store opens.
        self.assertTrue(process.wait_for_line("no signing key"), process.stderr_text())
        process.proc.send_signal(signal.SIGINT)
        self.assertEqual(process.wait(), serve.EXIT_USAGE)
        text = process.stderr_text()
        self.assertNotIn("Traceback", text)
        self.assertNotIn("KeyboardInterrupt", text)
        self.assertIn("interrupted during start-up", process.stderr_lines[-1])

    def test_a_bad_config_exits_2_with_one_line_naming_the_field(self) -> None:
        path = procs.write_config(self, config(stateTtlSeconds=-5))
        process = procs.Process(self, ["--http", "--port", "0", "--config", path], procs.server_env())
        self.assertEqual(process.wait(), serve.EXIT_USAGE)
        self.assertEqual(len(process.stderr_lines), 1)
        self.assertIn("stateTtlSeconds:", process.stderr_lines[0])
        self.assertEqual(process.proc.stdout.read(), b"")  # type: ignore[union-attr]

    def test_a_guessable_token_or_key_is_warned_about_at_start_up_without_printing_it(self) -> None:
        weak_key = "00" * main.MIN_KEY_BYTES
        path = procs.write_config(
            self,
            config(
                keys=[weak_key, procs.SECRET],
                principals={"alice": dict(ALICE), "bob": {**BOB, "token": "bob-" + procs.TOKEN}},
                stdioPrincipal="alice",
            ),
        )
        process = procs.HttpServer(self, "--config", path, env=procs.server_env())
        self.assertTrue(process.wait_for_line("listening on"))
        text = process.stderr_text()
        warnings = [line for line in process.stderr_lines if "easy to guess" in line]
        self.assertEqual(len(warnings), 2, text)  # alice's "aaaa..." and key 0, not bob's token nor key 1
        self.assertIn("principal 'alice'", warnings[0])
        self.assertIn("signing key 0", warnings[1])
        self.assertNotIn(ALICE["token"], text)
        self.assertNotIn(weak_key, text)

    def test_strength_estimates_separate_typed_values_from_random_ones(self) -> None:
        self.assertEqual(configuration.estimated_bits("a" * 64), 0)
        self.assertEqual(configuration.estimated_bits(bytes(32)), 0)
        self.assertLess(configuration.estimated_bits("abababababababab"), configuration.MIN_TOKEN_BITS)
        self.assertGreaterEqual(configuration.estimated_bits(procs.TOKEN), configuration.MIN_TOKEN_BITS)
        self.assertGreaterEqual(configuration.estimated_bits(support.KEY), configuration.MIN_KEY_BITS)
        self.assertGreaterEqual(configuration.estimated_bits(bytes.fromhex(procs.SECRET)), configuration.MIN_KEY_BITS)

    def test_a_fifo_as_config_is_refused_at_once_instead_of_hanging_start_up(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        fifo = os.path.join(folder.name, "config.json")
        os.mkfifo(fifo, 0o600)  # nobody ever writes to it
        process = procs.Process(self, ["--http", "--port", "0", "--config", fifo], procs.server_env())
        self.assertEqual(process.wait(), serve.EXIT_USAGE)
        self.assertEqual(len(process.stderr_lines), 1, process.stderr_text())
        self.assertIn("is not a regular file", process.stderr_lines[0])

    def test_a_config_readable_by_others_is_warned_about_once_the_server_runs(self) -> None:
        path = procs.write_config(self, config(principals={"alice": {**ALICE, "token": procs.TOKEN}}))
        os.chmod(path, 0o644)
        process = procs.HttpServer(self, "--config", path, env=procs.server_env())
        self.assertTrue(process.wait_for_line("listening on"))
        self.assertEqual(
            sum("readable by group or others" in line for line in process.stderr_lines), 1, process.stderr_text()
        )

    def test_no_auth_on_a_public_address_exits_2(self) -> None:
        process = procs.Process(self, ["--http", "--host", "0.0.0.0", "--port", "0", "--no-auth"], procs.server_env())
        self.assertEqual(process.wait(), serve.EXIT_USAGE)
        self.assertIn("loopback", process.stderr_text())


if __name__ == "__main__":
    unittest.main()
