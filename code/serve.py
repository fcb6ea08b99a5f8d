"""Serve the lesson server for real: `python3 code/serve.py --stdio | --http`.

    python3 code/serve.py --stdio [--config FILE] [--no-legacy]
    python3 code/serve.py --http [--host 127.0.0.1] [--port 8765] [--config FILE] [--no-auth] [--no-legacy]
    ... [--db FILE]            notes and consumed confirmations in SQLite (code/sqlite_store.py)
    ... [--notes-dir DIR]...   real Markdown folders (code/markdown_store.py)
    ... [--publish]            also serve notes_publish and its connect pages (code/connect.py)
    ... [--confirm-in-browser] notes_delete (and notes_update, notes_move) without a form: a link to the
                               server's confirmation page
    ... [--notes-tools]        also serve the note tools: search, read, create, append, update, move
                               (code/notes_tools.py)
    python3 code/serve.py audit [--config FILE | --db FILE|URL | --notes-dir DIR] list|restore ...
                               the audit of consumed confirmations; restore a trashed note (code/audit_cli.py)
    python3 code/serve.py --version

The command line only: it parses the flags, refuses the combinations that cannot work,
reads the config file (code/config.py), resolves both with the environment into one
Settings (code/settings.py), hands it to the builder (code/launch.py), which builds the
server and runs one transport until a signal stops it, and turns the outcome into an
exit status. Standard library only.
"""

# ruff: noqa: E402
# The imports come after the version check below, on purpose. No `from __future__` import
# here: this file must compile on an older Python 3 so that the check can say what is wrong.
import sys

# The first thing serve.py does: on Python 3.10 or older the imports below fail with a
# traceback that names sqlite3 or typing, not the interpreter. `python3` in a host's
# configuration is often an older system Python than the shell's.
if sys.version_info < (3, 11):  # noqa: UP036  (the check that says which interpreter is too old, on purpose)
    sys.stderr.write(
        "notes-mcp: needs Python 3.11 or later; this is Python %d.%d.%d (%s)\n"  # noqa: UP031  (compiles on any Python 3)
        % (sys.version_info[0], sys.version_info[1], sys.version_info[2], sys.executable or "python3")
    )
    raise SystemExit(2)

import argparse
import gc
import math
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import assemble
import config as configuration
import main
import settings
import stores
from assemble import EXIT_STORE_LOST, EXIT_USAGE, LOG_PREFIX, say  # noqa: F401  (LOG_PREFIX: what this command prefixes its lines with)
from config import ConfigError
from settings import Refused as StartupRefused

# The builder, and through it the server, its store's audit, its pages and its transports, is imported
# once the command line has parsed: a usage error, --help and --version load none of it (tests/test_first_run.py).
if TYPE_CHECKING:
    import launch

__all__ = ["serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class Stop(BaseException):
    """SIGTERM or SIGINT: unwind and exit 0 (BaseException, so no `except Exception` eats it)."""


# =====================================================================================
# The command line
# =====================================================================================


def timeout_seconds(text: str) -> float:
    """argparse type: a finite positive number of seconds, at most an hour."""
    value = float(text)
    if not (math.isfinite(value) and 0 < value <= 3600):
        raise argparse.ArgumentTypeError("must be in (0, 3600]")
    return value


def port_number(text: str) -> int:
    """argparse type: 0..65535 (0 picks a free port)."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be 0..65535")
    return value


# Every variable the server reads, for --help (tests/test_package.py checks the code reads no other).
ENVIRONMENT = (
    ("NOTES_MCP_SECRET", "signing keys as hex, comma-separated, newest first (instead of the config's keys)"),
    (
        "NOTES_MCP_TOKEN",
        f"the token of principal {main.LESSON_PRINCIPAL!r} without --config: the bearer token for --http, "
        "the pages' sign-in for --publish and --confirm-in-browser",
    ),
    ("XDG_STATE_HOME", "folders without --db keep consumed confirmations in $XDG_STATE_HOME/notes-mcp/nonces.db"),
    ("PGPASSWORD", "--db postgresql://...: the password, read by libpq (or ~/.pgpass)"),
    ("PGHOST, PGPORT", "--db postgresql://...: libpq's defaults for a URL without them (the sandbox allows them)"),
    (
        "PGPASSFILE, PGSERVICEFILE",
        "--db postgresql://...: libpq's password and service files (readable in the sandbox)",
    ),
)


def version() -> str:
    """The package's version: the server's own (main.SERVER_INFO), which pyproject.toml repeats."""
    return str(main.SERVER_INFO["version"])


class CommandLine(argparse.ArgumentParser):
    """argparse with every mistake on one prefixed line; an unknown option names the nearest known one."""

    # argparse's overloads type the namespace passed in; this override passes both arguments through unchanged.
    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Refuse an unknown option first: argparse would report a missing --stdio/--http and drop the typo."""
        words = list(sys.argv[1:] if args is None else args)
        unknown = self.unknown_option(words)
        if unknown is not None:
            import difflib  # only for the mistake: a correct command line never needs it

            nearest = difflib.get_close_matches(unknown, self.long_options(), n=1, cutoff=SUGGEST_CUTOFF)
            self.error(f"unknown option {unknown}" + (f": did you mean {nearest[0]}?" if nearest else ""))
        return super().parse_known_args(args, namespace)

    def long_options(self) -> list[str]:
        """Every --option this command takes, in the order --help lists them."""
        return [name for action in self._actions for name in action.option_strings if name.startswith("--")]

    def unknown_option(self, words: Sequence[str]) -> str | None:
        """The first word that looks like an option but names none nor abbreviates one (as argparse allows), or None."""
        for word in words:
            if word == "--":
                return None  # what follows is not an option
            if not word.startswith("-") or word == "-" or _NUMBER_RE.fullmatch(word):
                continue
            name = word.split("=", 1)[0]
            if name in self._option_string_actions:
                continue
            if name.startswith("--") and any(option.startswith(name) for option in self.long_options()):
                continue  # an abbreviation: argparse resolves it, or says it is ambiguous
            return name
        return None

    def error(self, message: str) -> NoReturn:
        """One line on stderr, then exit 2: the usage block would bury the one thing that is wrong."""
        say(f"{message} ({self.prog} --help lists every option)")
        raise SystemExit(EXIT_USAGE)


SUGGEST_CUTOFF = 0.6  # difflib's similarity an unknown option needs to a known one to be suggested
_NUMBER_RE = re.compile(r"-\d+(?:\.\d*)?")  # a negative number is a value, not an option


def parser(prog: str = "serve.py") -> CommandLine:
    """The serving command line; `prog` is how it was started (serve.py, or the installed notes-mcp)."""
    width = max(len(name) for name, _ in ENVIRONMENT)
    epilog = "\n".join(
        ["environment variables:", *(f"  {name.ljust(width)}  {meaning}" for name, meaning in ENVIRONMENT), "",
         "The audit subcommand lists consumed confirmations and restores a trashed note (audit --help); "
         "passkeys lists and removes the confirmation page's passkeys (passkeys --help)."]
    )  # fmt: skip
    if prog != "serve.py":
        epilog += f" {prog} demo runs the scripted demo (python3 code/main.py in a checkout)."
    p = CommandLine(
        prog=prog, description="Serve the notes MCP server (protocol 2026-07-28).", epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--version", action="version", version=f"{prog} {version()} (MCP {main.PROTOCOL_VERSION})")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="newline-delimited JSON-RPC on stdin/stdout")
    mode.add_argument("--http", action="store_true", help="Streamable HTTP, POST to the endpoint URL printed at start")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP listen address (default {DEFAULT_HOST})")
    p.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT,
        help=f"HTTP port, 0 = any free port (default {DEFAULT_PORT})",
    )  # fmt: skip
    p.add_argument("--config", metavar="FILE", help="JSON config: principals, tokens, workspaces, notes, keys")
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="HTTP without bearer tokens, acting as the stdio principal "
        "(loopback hosts only; development and conformance tests)",
    )
    p.add_argument(
        "--no-legacy",
        action="store_true",
        help="serve 2026-07-28 only, on stdio and HTTP (initialize gets -32601 naming the supported versions)",
    )
    p.add_argument(
        "--db",
        metavar="FILE|URL",
        help="SQLite file or postgresql:// URL shared by instances (overrides the config's db)",
    )
    p.add_argument(
        "--public-url", metavar="URL",
        help="the address people open the pages at, e.g. https://notes.example.com behind a TLS proxy: "
             "the pages' links, Origin rule and Secure cookies (overrides the config's publicUrl; "
             "required for pages on a non-loopback --host)",
    )  # fmt: skip
    p.add_argument(
        "--notes-dir",
        metavar="DIR",
        action="append",
        default=[],
        help="a folder of Markdown notes for the stdio principal (repeatable)",
    )
    p.add_argument("--publish", action="store_true", help="also serve notes_publish and its URL-mode connect pages")
    p.add_argument(
        "--confirm-in-browser", action="store_true",
        help="hosts without forms confirm notes_delete (with --notes-tools also notes_update and notes_move) "
             "on this server's page: the first call returns a link (off by default)",
    )  # fmt: skip
    p.add_argument(
        "--passkeys", choices=configuration.PASSKEY_MODES, default=None,
        help="passkeys on the confirmation page: offer (sign in with one instead of the token) or require "
             "(every approval needs one); off by default (overrides the config's passkeys; "
             "needs pip install 'notes-mcp[passkeys]')",
    )  # fmt: skip
    p.add_argument(
        "--notes-tools", action="store_true",
        help="also serve the note tools: notes_workspaces, notes_list, notes_search, notes_read, notes_create, "
             "notes_append, notes_update, notes_edit, notes_move",
    )  # fmt: skip
    p.add_argument(
        "--conformance-fixtures",
        action="store_true",
        help="HTTP: also serve the conformance suite's test tools, prompts and resources "
        "(testing only; docs/conformance.md)",
    )
    confinement = p.add_mutually_exclusive_group()
    confinement.add_argument(
        "--sandbox", choices=("auto", "require"), default="auto",
        help="Landlock confinement after start-up: auto (default: on where the kernel has it) "
             "or require (refuse to start without it)",
    )  # fmt: skip
    confinement.add_argument(
        "--no-sandbox", dest="sandbox", action="store_const", const="off", help="do not confine the process"
    )
    # Testing only (docs/http.md, "Limits"): shortens the slow-client deadline so tests run fast.
    # Default (None): streamable_http.REQUEST_TIMEOUT_SECONDS, read where HTTP is served.
    p.add_argument("--request-timeout", type=timeout_seconds, default=None, help=argparse.SUPPRESS)
    return p


def serve(argv: Sequence[str], prog: str = "serve.py") -> int:
    """Parse, resolve the settings, build the server, run its transport; returns the exit status."""
    if list(argv[:1]) == ["audit"]:
        import audit_cli  # the operator's command: serving never loads it

        return audit_cli.command(argv[1:], prog=f"{prog} audit")
    if list(argv[:1]) == ["passkeys"]:
        import audit_cli

        return audit_cli.passkeys_command(argv[1:], prog=f"{prog} passkeys")

    def stop(signum: int, frame: Any) -> None:
        raise Stop()

    try:
        args = arguments(argv, prog)  # nothing here can block: the builder is not loaded yet
    except StartupRefused as refused:
        return refused.status
    import launch

    # Set before anything can block (a locked database at start-up): SIGINT then ends
    # the start-up with one line, never a KeyboardInterrupt traceback.
    launch.stop_on_signals(stop)
    try:
        built: launch.Built = start(argv, prog, bind=True, args=args)
    except Stop:
        say("interrupted during start-up; nothing was served")
        return EXIT_USAGE
    except StartupRefused as refused:
        return refused.status
    # Start-up made some 20,000 objects that live as long as the process (modules, classes, the
    # server). The cyclic garbage collector would walk all of them again at each full pass and
    # once more at exit; frozen, every later pass leaves them out (the few cycles start-up
    # dropped and no pass has met yet stay until exit).
    gc.freeze()
    try:
        status = launch.run(built)
    except Stop:
        status = 0
    finally:
        assemble.close_store(stores.store_of(built.server.services))
    store = stores.store_of(built.server.services)
    return EXIT_STORE_LOST if isinstance(store, assemble.StopOnLoss) and store.lost else status


def arguments(argv: Sequence[str], prog: str = "serve.py") -> argparse.Namespace:
    """The parsed command line, its flags' combination checked; or StartupRefused after one line (or --help)."""
    try:
        args = parser(prog).parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        raise StartupRefused(int(exc.code or 0)) from None
    status = refuse_flags(args)
    if status is not None:
        raise StartupRefused(status)
    return args


def resolve(argv: Sequence[str], prog: str = "serve.py", args: argparse.Namespace | None = None) -> settings.Settings:
    """The command line (`args` if already parsed) and the config file as one Settings; or StartupRefused."""
    args = arguments(argv, prog) if args is None else args
    warnings: list[str] = []  # said once start-up has succeeded: a refusal stays one line
    try:
        config = (
            configuration.load_config(args.config, warnings.append) if args.config else configuration.lesson_config()
        )
    except ConfigError as exc:
        say(f"config {args.config}: {exc}")
        raise StartupRefused(EXIT_USAGE) from None
    return settings.resolve(args, config, os.environ, os.getcwd(), say, warnings)


def start(
    argv: Sequence[str], prog: str = "serve.py", bind: bool = False, args: argparse.Namespace | None = None
) -> "launch.Built":
    """Everything before serving: the resolved settings, then the built server (code/launch.py); or StartupRefused.

    With `bind` (the command, not a test building a server in its own process) the sockets are
    bound, and under --stdio the pages' keeper (code/page_keeper.py) forked before the store opens.
    """
    import launch

    resolved = resolve(argv, prog, args)
    built = launch.build(resolved, bind)
    for line in resolved.warnings:
        say(line)
    assemble.warn_weak_secrets(resolved.store, resolved.keys)  # once start-up has succeeded: a refusal stays one line
    return built


def refuse_flags(args: argparse.Namespace) -> int | None:
    """The exit status for a combination of flags that cannot work, after saying why; else None."""
    if args.stdio and args.no_auth:
        say("--no-auth applies to --http only (stdio has no tokens)")
        return EXIT_USAGE
    if args.stdio and args.conformance_fixtures:
        say("--conformance-fixtures applies to --http only (the suite drives HTTP)")
        return EXIT_USAGE
    if args.sandbox == "require":
        import sandbox

        abi = sandbox.kernel_abi()
        if isinstance(abi, str):
            say(f"sandbox: required, but {abi}; not serving")
            return EXIT_USAGE
    if args.http and args.no_auth:
        import streamable_http

        if not streamable_http.is_loopback(args.host):
            say(f"--no-auth refused: host {args.host!r} is not a loopback address")
            return EXIT_USAGE
    return None


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
