"""The one resolved configuration: the command line and the config file, merged once at start-up.

    settings = resolve(args, config, os.environ, os.getcwd(), say)    Settings, or Refused

Every flag that a config key can also set (--db and db, --public-url and publicUrl,
--passkeys and passkeys, --publish and publish, --confirm-in-browser and confirmInBrowser,
--notes-tools and notesTools, --notes-dir and notesDirs) is decided here and nowhere else;
a relative --db is made absolute against the working directory, the no-config setup gets
its token from the environment, and the signing keys are read. What comes out is a
Settings: immutable, read by the builder (code/launch.py) and never written. Every
refusal is one line said here, then Refused with the exit status. Standard library only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import assemble
import config as configuration
import main
from config import ConfigError

__all__ = ["Refused", "Settings", "resolve"]


class Refused(Exception):
    """Start-up stopped with this exit status (the reason is already said)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Settings(NamedTuple):
    """What this process serves and how: every field final once resolve() returns it (docs/configuration.md)."""

    http: bool  # --http (else --stdio)
    host: str  # --host
    port: int  # --port (0: any free port)
    config_path: str | None  # --config, as given
    no_auth: bool  # --no-auth
    legacy: bool  # not --no-legacy: 2025-11-25 clients served too
    publish: bool  # --publish or publish
    confirm_in_browser: bool  # --confirm-in-browser or confirmInBrowser
    notes_tools: bool  # --notes-tools or notesTools
    conformance_fixtures: bool  # --conformance-fixtures
    passkeys: str  # --passkeys, else passkeys, else "off"
    public_url: str | None  # --public-url, else publicUrl
    relative_db: str | None  # --db as typed when it was a relative path (resolved against the working directory)
    sandbox: str  # --sandbox auto|require, --no-sandbox: "off"
    request_timeout: float | None  # testing only; None: the HTTP transport's own default
    stdio_principal: str  # stdioPrincipal
    pages_on_loopback: bool  # the pages would be served on a loopback address (always under --stdio)
    keys: tuple[bytes, ...]  # signing keys, newest first: the config's keys, NOTES_MCP_SECRET, or one random key
    store: Mapping[
        str, Any
    ]  # what the store and the policy are built from (assemble.build_server): merged, paths absolute
    warnings: tuple[str, ...] = ()  # the config file's warnings, said once start-up has succeeded

    @property
    def tokens(self) -> dict[str, str]:
        """Each principal's bearer token (the pages' sign-in), for those that have one."""
        return {name: entry["token"] for name, entry in self.store["principals"].items() if entry["token"]}

    @property
    def folders(self) -> list[str]:
        """Every notes folder served, of every principal."""
        return [path for entry in self.store["principals"].values() for path in entry.get("notesDirs", [])]

    @property
    def db(self) -> str | None:
        """The SQLite path (absolute) or PostgreSQL URL of the shared database, if one is configured."""
        return self.store.get("db")

    @property
    def connect_port(self) -> int:
        """Under --stdio, the loopback port of the pages (connectPort; 0: any free port)."""
        return int(self.store.get("connectPort", 0))

    @property
    def allowed_origins(self) -> frozenset[str]:
        """Browser origins the HTTP transport accepts besides local pages: allowedOrigins, and the publicUrl."""
        origins = frozenset(self.store.get("allowedOrigins", frozenset()))
        return origins | {self.public_url} if self.public_url else origins

    @property
    def serves_pages(self) -> bool:
        """True when web pages are served: HTTP on loopback or with a publicUrl, --publish, or --confirm-in-browser."""
        # Without a public address, a non-loopback HTTP server serves no pages (URL-mode hosts get -32021, as hosts
        # without forms). Under --stdio without either flag, no socket is opened.
        return (
            (self.http and (self.pages_on_loopback or bool(self.public_url))) or self.publish or self.confirm_in_browser
        )

    @property
    def shares_decisions(self) -> bool:
        """True when the page's decisions live in a database other processes open (SQLite, PostgreSQL, the folders')."""
        return "db" in self.store or bool(self.folders)


def resolve(
    args: argparse.Namespace,
    config: dict[str, Any],
    environ: Mapping[str, str],
    cwd: str,
    say: Callable[[str], None],
    warnings: Sequence[str] = (),
) -> Settings:
    """The parsed command line merged with `config` (taken over: nobody reads it after), or Refused after one line.

    `warnings` (the config file's) are kept in the Settings, to be said once start-up has succeeded.
    """
    publish = args.publish or config.get("publish", False)
    browser = args.confirm_in_browser or config.get("confirmInBrowser", False)
    principals = config["principals"]
    pages_on_loopback = True
    try:
        if args.config and environ.get("NOTES_MCP_TOKEN"):
            say("warning: NOTES_MCP_TOKEN is ignored when --config is given (tokens come from the config)")
        if not args.config and args.http and not args.no_auth:
            principals[main.LESSON_PRINCIPAL]["token"] = assemble.lesson_token(
                environ, "for --http (the bearer token clients send)"
            )
        elif not args.config and (publish or browser):
            # stdio and --no-auth: the pages still need a sign-in (code/web_pages.py).
            why = (
                "for --publish (the connect pages' sign-in)"
                if publish
                else "for --confirm-in-browser (the confirmation page's sign-in)"
            )
            principals[main.LESSON_PRINCIPAL]["token"] = assemble.lesson_token(environ, why)
        if browser and args.stdio and not principals[config["stdioPrincipal"]].get("token"):
            # Without a token nobody can sign in to the page, and every link would be a dead end.
            raise ConfigError(
                f"principals.{config['stdioPrincipal']}.token",
                "is required for --confirm-in-browser (the page's sign-in)",
            )
        keys = assemble.signing_keys(config, environ)
        if args.db is not None:
            # As typed in a shell: the working directory's (a config's db is its folder's).
            config["db"] = configuration.db_location(configuration.read_path(args.db, "--db"), "--db", cwd)
        public_url = config.get("publicUrl")
        if args.public_url is not None:
            public_url = configuration.read_public_url(args.public_url, "--public-url")
        passkeys = args.passkeys if args.passkeys is not None else config.get("passkeys", "off")
        if args.http:
            import streamable_http

            pages_on_loopback = streamable_http.is_loopback(args.host)
        if args.http and (publish or browser) and not public_url and not pages_on_loopback:
            # http://0.0.0.0:PORT/confirm/... opens nowhere, and a sign-in there sends the
            # bearer token across the network in clear text: people need the real address.
            raise ConfigError(
                "publicUrl",
                f"is required to serve pages on --host {args.host}, which is not a loopback address: set "
                "publicUrl in the config or --public-url to the address people open them at (e.g. "
                "https://notes.example.com, a TLS proxy in front of this server); not serving",
            )
    except ConfigError as exc:
        say(str(exc))
        raise Refused(assemble.EXIT_USAGE) from None
    if passkeys != "off":  # with passkeys off there is nothing to refuse, and the pages' module stays unloaded
        import passkey_pages

        refusal = passkey_pages.refusal(passkeys, public_url)
        if refusal:
            say(refusal)
            raise Refused(assemble.EXIT_USAGE)
    try:
        assemble.check_folders(config, args.config, args.notes_dir)
    except ConfigError as exc:
        say(str(exc))
        raise Refused(assemble.EXIT_USAGE) from None
    assemble.add_notes_dirs(config, args.notes_dir, bool(args.config))
    settings = Settings(
        http=args.http, host=args.host, port=args.port, config_path=args.config, no_auth=args.no_auth,
        legacy=not args.no_legacy, publish=publish, confirm_in_browser=browser,
        notes_tools=args.notes_tools or config.get("notesTools", False), conformance_fixtures=args.conformance_fixtures,
        passkeys=passkeys, public_url=public_url,
        relative_db=None if not args.db or os.path.isabs(args.db) or args.db.startswith(configuration.POSTGRES_SCHEMES)
        else args.db,
        sandbox=args.sandbox, request_timeout=args.request_timeout, stdio_principal=config["stdioPrincipal"],
        pages_on_loopback=pages_on_loopback, keys=tuple(keys), store=MappingProxyType(config), warnings=tuple(warnings),
    )  # fmt: skip
    refusal = unsafe_for_sandbox(settings)
    if refusal:
        say(refusal)
        raise Refused(assemble.EXIT_USAGE)
    return settings


def unsafe_for_sandbox(settings: Settings) -> str | None:
    """The line refusing a notes folder or database the sandbox would leave writable on the import path, or None.

    Checked before the store is opened (a refusal creates nothing), with or without
    Landlock on this machine (one configuration behaves alike everywhere); not with
    --no-sandbox, which promises nothing.
    """
    db = settings.db
    # The default confirmation database is always nonces.db: never a name Python imports.
    state = db if db and not db.startswith(configuration.POSTGRES_SCHEMES) else None
    if settings.sandbox == "off" or not (settings.folders or state):
        return None  # nothing made writable: no import folder to compare with (the memory store, PostgreSQL)
    import sandbox

    here = os.path.dirname(os.path.abspath(__file__))
    return sandbox.unsafe_writes(settings.folders, state, sandbox.import_roots(here))
