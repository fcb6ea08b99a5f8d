"""From a configuration to a built server: the store, the policy, the keys, the core server.

    settings = config.load_config(path)          (code/config.py; or config.lesson_config())
    keys = signing_keys(settings, os.environ)    the config's keys or NOTES_MCP_SECRET
    server = build_server(settings, keys)        notes_delete over the configured store, audited

What the command line (code/serve.py), the operator's `audit` command (code/audit_cli.py)
and the tests share: each builds its server or store here, and says what went wrong in
one stderr line. Signing keys come from the config's
`keys` or NOTES_MCP_SECRET (hex, comma-separated, newest first); the bearer token of the
no-config setup from NOTES_MCP_TOKEN. No credential is ever printed. A store module is
imported only when configured. Standard library only.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import config as configuration
import main
import stores
from config import ConfigError

if TYPE_CHECKING:  # imported where a server is built: the command line's usage errors never load them
    import audit
    import browser_confirm
    import frame

__all__ = [
    "EXIT_STORE_LOST",
    "EXIT_USAGE",
    "LOG_PREFIX",
    "StartupError",
    "StopOnLoss",
    "add_notes_dirs",
    "build_server",
    "build_store",
    "check_folders",
    "close_store",
    "confirmations_home",
    "default_nonce_db",
    "lesson_token",
    "note_count",
    "say",
    "signing_keys",
    "warn_weak_secrets",
]

LOG_PREFIX = "notes-mcp"
EXIT_USAGE = 2  # bad command line, configuration or environment
EXIT_STORE_LOST = 1  # the store reported itself lost while serving (its database file was replaced)
T = TypeVar("T")


def say(line: str) -> None:
    """One line to stderr, prefixed and escaped; stdout belongs to the protocol."""
    print(f"{LOG_PREFIX}: {configuration.one_line(line)}", file=sys.stderr, flush=True)


class StartupError(Exception):
    """A store that cannot be opened at start-up; str() is one line for the operator."""


class StopOnLoss:
    """stores.Store, delegated; the first time the store reports itself lost, say so once and stop serving."""

    def __init__(self, store: stores.Store) -> None:
        self.store = store
        self.lost = False
        self.ledger = (
            store.ledger
        )  # written only inside the store's own calls (guarded below) and by the page's decisions
        self.texts: stores.Texts | None = self if store.texts is not None else None

    @property
    def deletion(self) -> str:
        """As the store's."""
        return self.store.deletion

    @property
    def retention(self) -> audit.Retention:
        """The store's deletion mode, trash and audit bounds (its ledger's)."""
        return self.ledger.retention

    def _texts(self) -> stores.Texts:
        """The store's text side (declared present: `texts` is None otherwise, and no tool calls these)."""
        texts = self.store.texts
        assert texts is not None
        return texts

    def candidates(self, workspace: main.Path, title: str) -> list[main.Note]:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.candidates(workspace, title))

    def is_consumed(self, nonce: str) -> bool:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.is_consumed(nonce))

    def consume(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.consume(principal, nonce, expires_at, target, recheck))

    def settle(
        self,
        notes: object,
        principal: str,
        nonce: str,
        expires_at: float,
        target: tuple[str, str] | None,
        recheck: Callable[[main.Note], bool],
    ) -> main.Settlement:
        """The atomic step (the store's consume), stopping the process on loss."""
        return self.consume(principal, nonce, expires_at, target, recheck)

    def audit_refusal(self, principal: str, facts: audit.Facts) -> None:
        """As the store's, stopping the process on loss."""
        self._guard(lambda: self.store.audit_refusal(principal, facts))

    def audit_entries(
        self, principal: str | None = None, since: float | None = None, outcome: str | None = None
    ) -> list[dict[str, Any]]:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.audit_entries(principal, since, outcome))

    def count(self, workspace: main.Path) -> int:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.count(workspace))

    def preview(self, note: main.Note) -> tuple[float, list[str]] | None:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self.store.preview(note))

    def describe(self) -> str | list[str]:
        """As the store's."""
        return self.store.describe()

    def close(self) -> None:
        """As the store's."""
        self.store.close()

    def note_text(self, note_id: str, workspace: main.Path) -> tuple[main.Note, str] | None:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().note_text(note_id, workspace))

    def search_text(
        self, workspace: main.Path, query: str, limit: int, offset: int = 0
    ) -> tuple[list[tuple[main.Note, str]], bool]:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().search_text(workspace, query, limit, offset))

    def create_note(self, principal: str, workspace: main.Path, title: str, body: str) -> main.Note | str:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().create_note(principal, workspace, title, body))

    def append_note(
        self, principal: str, workspace: main.Path, note_id: str, text: str, check: stores.Check
    ) -> tuple[main.Note, str] | str:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().append_note(principal, workspace, note_id, text, check))

    def update_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        body: str,
        check: stores.Check,
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """As the store's, stopping the process on loss."""
        return self._guard(
            lambda: self._texts().update_note(principal, nonce, expires_at, workspace, note_id, body, check)
        )

    def move_note(
        self,
        principal: str,
        nonce: str,
        expires_at: float,
        workspace: main.Path,
        note_id: str,
        place: main.Path,
        check: stores.Check,
        rewrites: tuple[stores.Rewrite, ...] = (),
    ) -> tuple[main.Settlement, main.Note | str | None]:
        """As the store's, stopping the process on loss."""
        return self._guard(
            lambda: self._texts().move_note(principal, nonce, expires_at, workspace, note_id, place, check, rewrites)
        )

    def move_refusal(self, workspace: main.Path, note: main.Note, place: main.Path) -> str | None:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().move_refusal(workspace, note, place))

    def restore(self, entry_id: int) -> dict[str, Any]:
        """As the store's, stopping the process on loss."""
        return self._guard(lambda: self._texts().restore(entry_id))

    def _guard(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except stores.StoreLost as exc:
            # The client gets the store's isError result; the operator gets one line, and
            # the process ends non-zero so a supervisor restarts it on the right file.
            if not self.lost:
                self.lost = True
                say(str(exc))
                signal.raise_signal(signal.SIGTERM)
            raise


# =====================================================================================
# Building the server
# =====================================================================================


def build_store(config: Mapping[str, Any]) -> stores.Store:
    """Markdown folders (any notesDirs), else SQLite ("db"), else memory; StartupError if unusable."""
    folders = [path for entry in config["principals"].values() for path in entry.get("notesDirs", [])]
    if not folders and "db" not in config:
        return stores.MemoryStore(config.get("notes", []), main.MemoryReplayStore(time.time))
    if folders and "notes" in config:
        raise ConfigError("notes", "cannot be combined with notesDirs or --notes-dir (the files are the notes)")
    if not folders and config["db"].startswith(configuration.POSTGRES_SCHEMES):
        import postgres_store  # only here: psycopg is an optional dependency

        try:
            return postgres_store.open_store(
                config["db"], clock=time.time, seed_notes=config.get("notes", []), retention=retention(config)
            )
        except stores.StoreError as exc:
            raise StartupError(libpq_missing() or str(exc)) from None
    # Imported only when configured: serving from memory starts faster without them, and
    # the folder store needs POSIX-only O_NOFOLLOW.
    import sqlite_store

    try:
        if folders:
            import markdown_store
            import text_index

            database = config.get("db") or default_nonce_db()
            nonces = sqlite_store.open_ledger(database, clock=time.time)
            return markdown_store.MarkdownNotesStore(
                folders, nonces, retention=retention(config), text_index_path=text_index.index_path(database)
            )
        # Seeded only when this creates the database: from "notes", or the lesson fixture without --config.
        return sqlite_store.open_store(
            config["db"], clock=time.time, seed_notes=config.get("notes", []), retention=retention(config)
        )
    except stores.StoreError as exc:
        raise StartupError(str(exc)) from None


LIBPQ_HINT = (
    "psycopg is installed but cannot load libpq, the PostgreSQL client library; install it: "
    "Debian/Ubuntu: sudo apt install libpq5; Fedora: sudo dnf install libpq; macOS: brew install libpq "
    "(or pip install 'psycopg[binary]', which brings its own)"
)


def libpq_missing() -> str | None:
    """LIBPQ_HINT when psycopg is installed but its import fails for want of libpq; else None."""
    # The [postgres] extra installs psycopg alone, which loads the system's libpq when it is
    # imported: reinstalling the extra, as "psycopg is not installed" suggests, changes nothing.
    try:
        import psycopg  # noqa: F401  (the import postgres_store tried, to read why it failed)
    except ImportError as exc:
        return LIBPQ_HINT if "libpq" in str(exc) else None
    return None


def retention(config: Mapping[str, Any]) -> audit.Retention:
    """The deletion mode and the trash and audit bounds of a validated config (defaults in code/audit.py)."""
    import audit

    return audit.Retention(
        config.get("deletion", audit.DELETION_TRASH),
        config.get("trashDays", audit.DEFAULT_TRASH_DAYS) * audit.DAY_SECONDS,
        config.get("auditDays", audit.DEFAULT_AUDIT_DAYS) * audit.DAY_SECONDS,
        config.get("auditMaxEntries", audit.DEFAULT_AUDIT_MAX_ENTRIES),
    )


def default_nonce_db() -> str:
    """The Markdown store's confirmation database: $XDG_STATE_HOME/notes-mcp/nonces.db."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    folder = os.path.join(state, "notes-mcp")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create {folder} for the confirmation database: {exc.strerror}") from None
    return os.path.join(folder, "nonces.db")


def folder_grants(folders: Sequence[str]) -> list[str]:
    """A principal's notes folders as the workspace URIs the folder store spells them with."""
    if not folders:
        return []
    import folder_paths

    try:
        return [main.format_file_uri(folder_paths.root_path(path)) for path in folders]
    except stores.StoreError as exc:
        raise StartupError(str(exc)) from None


def build_server(
    config: Mapping[str, Any],
    keys: Sequence[bytes],
    log: Callable[[str], None] = main.stderr_log,
    browser: bool = False,
    confirmations: Callable[[stores.Confirmations], stores.Confirmations] = lambda records: records,
    links: browser_confirm.PageLinks | None = None,
) -> frame.Server:
    """The core server for a validated config, serving notes_delete (other tools are added by the caller).

    `log` takes every line the server logs; `browser` is --confirm-in-browser; `confirmations`
    gives the confirmation page's decisions as the tools and pages see them (a page keeper's view);
    `links` are the confirmation pages' links, made before the pages (none: no page is served).
    """
    import audit
    import browser_confirm
    import frame

    # A principal's notes folders are workspaces it may act on, spelled as the store spells them.
    grants = {
        name: entry["workspaces"] + folder_grants(entry.get("notesDirs", []))
        for name, entry in config["principals"].items()
    }
    store = build_store(config)
    records = confirmations(browser_confirm.records_for(store, time.time))  # the page's decisions, beside the nonces
    server = frame.notes_server(
        keys=keys,
        notes=store if isinstance(store, stores.MemoryStore) else StopOnLoss(store),  # the memory store cannot be lost
        policy=main.AuthorizationPolicy(grants),
        clock=time.time,
        state_ttl=config.get("stateTtlSeconds", main.DEFAULT_STATE_TTL_SECONDS),
        log=log,
        tool=lambda services: browser_confirm.ConfirmedNotesDelete(services, records, browser, links),
    )
    if not isinstance(store, stores.MemoryStore):
        audit.install(server)  # the memory store keeps no audit: it forgets everything at exit
    return server


# =====================================================================================
# Keys, tokens, folders
# =====================================================================================


def signing_keys(config: Mapping[str, Any], environ: Mapping[str, str]) -> list[bytes]:
    """Keys from the config or NOTES_MCP_SECRET (not both); none: a random per-process key."""
    secret = environ.get("NOTES_MCP_SECRET", "")
    if "keys" in config and secret:
        raise ConfigError("keys", "set either the config's keys or NOTES_MCP_SECRET, not both")
    if secret:
        return configuration.read_keys([part.strip() for part in secret.split(",")], "NOTES_MCP_SECRET")
    if "keys" in config:
        return config["keys"]
    say(
        "warning: no signing key (NOTES_MCP_SECRET or the config's keys): using a random key for this "
        "process; requestState from it will not survive a restart or work on another instance"
    )
    return [secrets.token_bytes(main.MIN_KEY_BYTES)]


def warn_weak_secrets(config: Mapping[str, Any], keys: Sequence[bytes]) -> None:
    """One warning line per token or signing key that looks typed rather than random (never the value)."""
    for name, entry in config["principals"].items():
        if entry.get("token") and configuration.estimated_bits(entry["token"]) < configuration.MIN_TOKEN_BITS:
            say(
                f"warning: the token of principal {name!r} looks easy to guess; "
                "use a random one, e.g. secrets.token_urlsafe(32)"
            )
    for index, key in enumerate(keys):
        if configuration.estimated_bits(key) < configuration.MIN_KEY_BITS:
            say(
                f"warning: signing key {index} looks easy to guess (repeated bytes); "
                "use a random one, e.g. secrets.token_hex(32)"
            )


def lesson_token(environ: Mapping[str, str], why: str) -> str:
    """NOTES_MCP_TOKEN for the no-config setup, or ConfigError saying why one is needed."""
    token = environ.get("NOTES_MCP_TOKEN", "")
    if not token:
        # Never invented and printed: a credential in a host's log is a leaked credential.
        raise ConfigError("NOTES_MCP_TOKEN", f"is required {why} (or give --config with tokens)")
    return configuration.read_token(token, "NOTES_MCP_TOKEN")


def add_notes_dirs(config: dict[str, Any], folders: list[str], from_file: bool) -> None:
    """`--notes-dir` folders for the stdio principal; without a config file they replace the lesson fixture."""
    if folders:
        entry = config["principals"][config["stdioPrincipal"]]
        if not from_file:
            # The lesson fixture: with folders, the files are the notes, and the folders asked
            # for are the only workspaces (no fictional one listed first in every refusal).
            del config["notes"]
            entry["workspaces"] = []
        entry["notesDirs"] = entry.get("notesDirs", []) + folders


def check_folders(config: Mapping[str, Any], config_path: str | None, notes_dirs: Sequence[str]) -> None:
    """Every notes folder usable, or ConfigError naming its field (`principals.bob.notesDirs[0]`, `--notes-dir`)."""
    places = [
        (f"config {config_path}: principals.{name}.notesDirs[{index}]", path)
        for name, entry in config["principals"].items()
        for index, path in enumerate(entry.get("notesDirs", []))
    ]
    places += [("--notes-dir", path) for path in notes_dirs]
    if not places:
        return
    import folder_paths  # only with folders: it needs POSIX-only O_NOFOLLOW

    for field, path in places:
        try:
            folder_paths.root_path(path)
        except stores.StoreError as exc:
            raise ConfigError(field, str(exc)) from None


# =====================================================================================
# What was built
# =====================================================================================


def note_count(store: stores.Store, uri: str) -> str:
    """How many notes the store offers in the workspace `uri` ("N notes"), or why it cannot tell."""
    try:
        workspace = main.parse_file_uri(uri)
        count = store.count(workspace)
    except (main.ScopeError, stores.StoreError) as exc:
        return f"cannot be listed ({exc})"
    return f"{count} note{'' if count == 1 else 's'}" + (" (nothing will be offered)" if count == 0 else "")


def confirmations_home(config: Mapping[str, Any]) -> str:
    """Where consumed confirmations are kept, with no credential (a PostgreSQL URL loses its user and password)."""
    folders = any(entry.get("notesDirs") for entry in config["principals"].values())
    db = config.get("db")
    if db is None and not folders:
        return "in memory (this process only; lost when it exits)"
    if db is not None and db.startswith(configuration.POSTGRES_SCHEMES):
        parts = urllib.parse.urlsplit(db)
        host = parts.hostname or "local socket"
        port = f":{parts.port}" if parts.port else ""
        return f"PostgreSQL {host}{port}{parts.path}"
    return f"SQLite {os.path.abspath(db or default_nonce_db())}"


def close_store(store: stores.Store) -> None:
    """Close the store on every exit path (SQLite checkpoints its log into the database file)."""
    store.close()
