"""The operator's commands: `python3 code/serve.py audit list|restore` and `passkeys list|remove` (or `notes-mcp ...`).

    audit [--config FILE | --db FILE|URL | --notes-dir DIR]... list [--principal P] [--since WHEN] [--outcome O]
          [--json]
    audit [store options] restore ENTRY
    passkeys [store options] list [--principal P] [--json]
    passkeys [store options] remove CREDENTIAL_ID

It opens the store the server uses (built by code/assemble.py from the same options),
prints its audit entries (code/audit.py) as a table or as JSON lines, or puts a trashed
note back; or lists and removes the passkeys people approve with on the confirmation page
(a lost one: remove it, and the principal's token registers a new one). It only reads,
except `restore` and `remove`; a database that does not exist is never
created. Every refusal is one line, and the exit status says which kind: 0 done, 1
refused or the store unavailable, 2 a usage error. Standard library only.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import assemble
import audit
import config as configuration
import stores
from assemble import EXIT_USAGE, say
from config import ConfigError

__all__ = ["command", "passkeys_command"]

EXIT_REFUSED = 1  # a restore refused, or the store unavailable: nothing changed


def when(text: str, now: float) -> float:
    """`--since`: `30m`, `12h`, `7d` ago, or an ISO date or UTC time (`2026-12-01`, `2026-12-01T20:00:00Z`)."""
    relative = re.fullmatch(r"(\d{1,6})([smhd])", text)
    if relative:
        return now - int(relative.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative.group(2)]
    for pattern in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S"):
        try:
            return float(calendar.timegm(time.strptime(text, pattern)))
        except ValueError:
            continue
    raise argparse.ArgumentTypeError("use 30m, 12h, 7d, 2026-12-01 or 2026-12-01T20:00:00Z")


def stamp(at: float) -> str:
    """A time as ISO 8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def shown(value: Any) -> str:
    """A field for one line of the table: escaped so no stored byte can start a new line; `-` when empty."""
    if value is None or value == "":
        return "-"
    text = str(value)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def approver(entry: dict[str, Any], labels: dict[str, str]) -> str:
    """Who approved on the page, when, and with which passkey (its label where it is still registered)."""
    text = shown(entry["approved_by"]) + (
        f" at {stamp(entry['approved_at'])}" if entry["approved_at"] is not None else ""
    )
    credential = entry.get("approved_with")
    if credential:
        label = labels.get(credential)
        text += f" with passkey {shown(credential)}" + (f" ({shown(label)})" if label is not None else "")
    return text


def table(entries: Sequence[dict[str, Any]], labels: dict[str, str] | None = None) -> list[str]:
    """The entries as aligned lines under one header (the client name is labelled self-reported)."""
    header = ("ID", "TIME (UTC)", "PRINCIPAL", "TOOL", "OUTCOME", "CHANNEL", "APPROVED BY", "NOTE", "TITLE",
              "WORKSPACE", "REQUEST", "CLIENT (self-reported)", "TRASH")  # fmt: skip
    rows = [header] + [
        (shown(e["id"]), stamp(e["at"]), shown(e["principal"]), shown(e["tool"]),
         shown(e["outcome"]) + (f" #{e['restores']}" if e["restores"] is not None else ""), shown(e["channel"]),
         approver(e, labels or {}),
         shown(e["note_id"]), shown(e["title"]), shown(e["workspace"]), shown(e["request_id"]),
         shown(e["client_name"]), shown(e["trash"]))
        for e in entries
    ]  # fmt: skip
    return aligned(rows)


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines of left-aligned columns two spaces apart."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def store_options(parser: argparse.ArgumentParser, default: Any) -> argparse.ArgumentParser:
    """The options naming the store the server uses, as serve.py takes them."""
    parser.add_argument(
        "--config", metavar="FILE", default=default, help="the server's JSON config (its db and notesDirs)"
    )
    parser.add_argument(
        "--db", metavar="FILE|URL", default=default, help="SQLite file or postgresql:// URL (overrides the config's db)"
    )
    parser.add_argument(
        "--notes-dir", metavar="DIR", action="append", default=default, help="a Markdown folder (repeatable)"
    )
    return parser


def parser(prog: str = "serve.py audit") -> argparse.ArgumentParser:
    """`PROG list|restore`: the store options serve.py takes, then the command's own; `prog` is what the user typed."""
    # The store options go before or after the command: `audit --db F list` and `audit list --db F`.
    after = store_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)
    p = argparse.ArgumentParser(
        prog=prog, description="List the audit of consumed confirmations, or restore a trashed note."
    )
    store_options(p, None)
    commands = p.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", parents=[after], help="print entries, oldest first")
    listing.add_argument("--principal", help="only this principal's entries")
    listing.add_argument(
        "--since", metavar="WHEN", help="only entries at or after WHEN (30m, 12h, 7d, 2026-12-01, ...)"
    )
    listing.add_argument("--outcome", choices=audit.OUTCOMES, help="only entries with this outcome")
    listing.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")
    restore = commands.add_parser(
        "restore", parents=[after], help="bring back the note a `deleted` entry moved to the trash"
    )
    restore.add_argument("entry", type=int, help="the id of the deletion's audit entry")
    return p


def run(
    store: stores.Store, args: argparse.Namespace, out: Callable[[str], None], clock: Callable[[], float] = time.time
) -> int:
    """Run one parsed command against a store that keeps an audit; the exit status."""
    if args.command == "restore":
        try:
            entry = store.restore(args.entry)
        except stores.StoreRefused as exc:
            # The store's reason fits an entry that is there but cannot be restored; an id
            # that names no entry at all (a typo, another store's id) is told as such.
            if not any(entry["id"] == args.entry for entry in store.audit_entries()):
                out(f"refused: entry {args.entry} does not exist (audit list shows every entry)")
            else:
                out(f"refused: {exc}")
            return EXIT_REFUSED
        out(
            f"restored entry {args.entry}: note {shown(entry['note_id'])} ({shown(entry['title'])}),"
            f" recorded as entry {entry['id']}"
        )
        return 0
    since = None
    if args.since is not None:
        try:
            since = when(args.since, clock())
        except argparse.ArgumentTypeError as exc:
            out(f"--since: {exc}")
            return EXIT_USAGE
    entries = store.audit_entries(principal=args.principal, since=since, outcome=args.outcome)
    if args.json:
        for entry in entries:
            out(json.dumps(entry, ensure_ascii=True))
    else:
        labels = {key.credential_id: key.label for key in store.ledger.passkeys().of()}
        for line in table(entries, labels):
            out(line)
    return 0


def command(argv: Sequence[str], prog: str = "serve.py audit") -> int:
    """`PROG [--config F] [--db F|URL] [--notes-dir D]... list|restore ...`: the exit status."""
    return parse_then(parser(prog), argv, run)


def passkeys_parser(prog: str = "serve.py passkeys") -> argparse.ArgumentParser:
    """`PROG list|remove`: the store options, then the command's own."""
    after = store_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)
    p = argparse.ArgumentParser(
        prog=prog, description="List or remove the passkeys people approve with on the confirmation page."
    )
    store_options(p, None)
    commands = p.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", parents=[after], help="print every registered passkey, oldest first")
    listing.add_argument("--principal", help="only this principal's passkeys")
    listing.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")
    remove = commands.add_parser(
        "remove", parents=[after], help="forget a passkey (lost or retired): it approves nothing from now on"
    )
    remove.add_argument("credential", help="the passkey's credential id, as `list` shows it")
    return p


def run_passkeys(store: stores.Store, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    """Run one parsed passkeys command against a store's ledger; the exit status."""
    keys = store.ledger.passkeys()
    if args.command == "remove":
        key = keys.get(args.credential)
        if key is None or not keys.remove(args.credential):
            out(f"refused: no passkey {shown(args.credential)} (passkeys list shows every one)")
            return EXIT_REFUSED
        out(
            f"removed passkey {shown(key.credential_id)} ({shown(key.label)}) of {shown(key.principal)}; "
            "its principal's token registers a new one on the confirmation page"
        )
        return 0
    found = keys.of(args.principal)
    if args.json:
        for key in found:
            out(
                json.dumps(
                    {
                        "credential_id": key.credential_id,
                        "principal": key.principal,
                        "label": key.label,
                        "created_at": key.created_at,
                        "last_used_at": key.last_used_at,
                        "sign_count": key.sign_count,
                    },
                    ensure_ascii=True,
                )
            )
        return 0
    rows = [("CREDENTIAL", "PRINCIPAL", "LABEL", "CREATED (UTC)", "LAST USED (UTC)", "SIGN COUNT")] + [
        (
            shown(k.credential_id),
            shown(k.principal),
            shown(k.label),
            stamp(k.created_at),
            stamp(k.last_used_at) if k.last_used_at is not None else "-",
            str(k.sign_count),
        )
        for k in found
    ]
    for line in aligned(rows):
        out(line)
    return 0


def passkeys_command(argv: Sequence[str], prog: str = "serve.py passkeys") -> int:
    """`PROG [store options] list|remove ...`: the exit status."""
    return parse_then(passkeys_parser(prog), argv, run_passkeys)


def parse_then(
    p: argparse.ArgumentParser,
    argv: Sequence[str],
    act: Callable[[stores.Store, argparse.Namespace, Callable[[str], None]], int],
) -> int:
    """Parse `argv`, open the store the options name (never creating one), run `act` on it, close it; the exit
    status."""
    try:
        args = p.parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        config = configuration.load_config(args.config) if args.config else configuration.lesson_config()
        if args.db is not None:
            config["db"] = configuration.db_location(configuration.read_path(args.db, "--db"), "--db", os.getcwd())
    except ConfigError as exc:
        say(str(exc))
        return EXIT_USAGE
    assemble.add_notes_dirs(config, args.notes_dir or [], bool(args.config))
    folders = any(entry.get("notesDirs") for entry in config["principals"].values())
    db = config.get("db") or (assemble.default_nonce_db() if folders else None)
    if db is None:
        say("the memory store keeps no audit; name the store with --db, --notes-dir or --config")
        return EXIT_USAGE
    # Looking must not create: a mistyped path would otherwise become a new, seeded database.
    if not db.startswith(configuration.POSTGRES_SCHEMES) and not os.path.exists(db):
        say(f"no database at {db}")
        return EXIT_USAGE
    try:
        store = assemble.build_store(config)
    except (ConfigError, assemble.StartupError) as exc:
        say(str(exc))
        return EXIT_USAGE
    try:
        return act(store, args, print)
    except stores.StoreError as exc:
        say(str(exc))
        return EXIT_REFUSED
    finally:
        assemble.close_store(store)
