"""Configuration: one JSON file, checked strictly at start-up, one validator per key.

    {"principals": {"alice": {"token": "...", "workspaces": ["file:///..."], "notesDirs": ["..."]}},
     "stdioPrincipal": "alice", "notes": [...], "db": "notes.db", "keys": ["<hex>"],
     "stateTtlSeconds": 300, "allowedOrigins": [...], "connectPort": 0, "publish": false, "confirmInBrowser": false,
     "notesTools": false, "publicUrl": "https://notes.example.com", "passkeys": "off"}

CONFIG_FIELDS and PRINCIPAL_FIELDS list every key allowed; anything else is refused with
one line naming the field. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import main
import stores

# audit is imported where a config file's retention keys are read (read_deletion, read_days, read_entries):
# the command line's usage errors, --help and --version load this module, never the audit behind it.

__all__ = [
    "ConfigError",
    "PASSKEY_MODES",
    "POSTGRES_SCHEMES",
    "db_location",
    "MAX_CONFIG_BYTES",
    "MIN_KEY_BITS",
    "MIN_TOKEN_BITS",
    "estimated_bits",
    "lesson_config",
    "load_config",
    "one_line",
    "read_keys",
    "read_path",
    "read_public_url",
    "read_token",
]

MIN_TOKEN_LENGTH = 16  # characters in a bearer token
MAX_TOKEN_LENGTH = 512
MAX_PRINCIPAL_NAME_LENGTH = 64

# RFC 6750 b64token: what a bearer token may contain (no spaces, quotes or controls).
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_HEX_DIGITS_RE = re.compile(r"[0-9a-fA-F]+")
# What a signing key looks like, said in every error about one.
KEY_FORM = (
    f"a key is at least {2 * main.MIN_KEY_BYTES} hex digits ({main.MIN_KEY_BYTES} bytes), "
    'e.g. the output of python3 -c "import secrets; print(secrets.token_hex(32))"'
)
# An origin is scheme://host[:port] with nothing after it.
_ORIGIN_RE = re.compile(r"(https?)://([a-z0-9.\-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")


class ConfigError(ValueError):
    """A configuration value that cannot be used; str() is one line naming the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(one_line(f"{field}: {' '.join(problem.split())}"))


def one_line(text: str) -> str:
    """`text` with every non-printable character escaped, so it can never become two log lines."""
    # A config key or principal name holding a newline would otherwise print a second
    # line of the attacker's choosing (one that reads like "listening on ...").
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def read_token(value: Any, field: str) -> str:
    """A bearer token: RFC 6750 characters, MIN_TOKEN_LENGTH..MAX_TOKEN_LENGTH long."""
    if not isinstance(value, str) or not _TOKEN_RE.fullmatch(value):
        raise ConfigError(field, "must be a string of letters, digits and -._~+/ (RFC 6750)")
    if not MIN_TOKEN_LENGTH <= len(value) <= MAX_TOKEN_LENGTH:
        raise ConfigError(field, f"must be {MIN_TOKEN_LENGTH}..{MAX_TOKEN_LENGTH} characters")
    return value


MIN_TOKEN_BITS = 64  # below this estimate a token is reported as guessable at start-up
MIN_KEY_BITS = 128  # ... and a signing key


def estimated_bits(secret: str | bytes) -> float:
    """A rough strength estimate: length times the Shannon entropy of the symbols' frequencies."""
    # Catches what a person types instead of a random value ("aaaa...", an all-zero key,
    # "password1234567890"); a random value of the required length is far above the bounds.
    import math

    counts: dict[Any, int] = {}
    for symbol in secret:
        counts[symbol] = counts.get(symbol, 0) + 1
    total = len(secret)
    return -sum(n * math.log2(n / total) for n in counts.values())


def read_workspaces(value: Any, field: str) -> list[str]:
    """A list of file:// workspace URIs, each one the core can parse."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of file:// URIs")
    for index, uri in enumerate(value):
        try:
            main.parse_file_uri(uri)
        except main.ScopeError as exc:
            raise ConfigError(f"{field}[{index}]", str(exc)) from None
    return list(value)


def read_path(value: Any, field: str) -> str:
    """A non-empty file system path (a config file's relative paths are made absolute by anchor_paths)."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(field, "must be a non-empty path")
    return value


def read_paths(value: Any, field: str) -> list[str]:
    """A list of paths (see read_path)."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of folder paths")
    return [read_path(item, f"{field}[{index}]") for index, item in enumerate(value)]


# The keys one principal entry may have; a later extension adds its own (e.g. "notesDirs").
PRINCIPAL_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "token": read_token,
    "workspaces": read_workspaces,
    "notesDirs": read_paths,  # Markdown folders this principal may delete notes in (code/markdown_store.py)
}
REQUIRED_PRINCIPAL_FIELDS = ("token", "workspaces")


def read_principals(value: Any, field: str) -> dict[str, dict[str, Any]]:
    """{name: {"token": ..., "workspaces": [...]}}, at least one principal."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(field, "must be an object with at least one principal")
    principals: dict[str, dict[str, Any]] = {}
    for name, entry in value.items():
        where = f"{field}.{name}"
        if not name or len(name) > MAX_PRINCIPAL_NAME_LENGTH or not name.isprintable():
            raise ConfigError(where, f"a principal name must be 1..{MAX_PRINCIPAL_NAME_LENGTH} printable characters")
        principals[name] = read_object(entry, where, PRINCIPAL_FIELDS, REQUIRED_PRINCIPAL_FIELDS)
    return principals


def read_principal_name(value: Any, field: str) -> str:
    """A principal's name (checked against `principals` once everything is read)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(field, "must be the name of a principal")
    return value


def read_notes(value: Any, field: str) -> list[main.Note]:
    """[{"id", "title", "uri", "revision"?}, ...] with unique ids."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of notes")
    notes: list[main.Note] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        where = f"{field}[{index}]"
        raw = read_object(entry, where, NOTE_FIELDS, ("id", "title", "uri"))
        note = main.Note(raw["id"], stores.blank_controls(raw["title"]), raw["uri"], raw.get("revision", 0))
        try:
            stores.check_note(note)
        except ValueError as exc:
            raise ConfigError(where, str(exc)) from None
        if note.id in seen:
            raise ConfigError(f"{where}.id", f"duplicate note id {note.id!r}")
        seen.add(note.id)
        notes.append(note)
    return notes


def read_string(value: Any, field: str) -> str:
    """Any string (checked in depth by whoever uses it)."""
    if not isinstance(value, str):
        raise ConfigError(field, "must be a string")
    return value


MAX_REVISION = 2**63 - 1  # a signed 64-bit integer: what SQLite INTEGER and PostgreSQL BIGINT hold


def read_revision(value: Any, field: str) -> int:
    """An integer in 0..MAX_REVISION."""
    # A larger one passed here and failed as a traceback where a store wrote it.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_REVISION:
        raise ConfigError(field, f"must be an integer from 0 to {MAX_REVISION}")
    return value


NOTE_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "id": read_string,
    "title": read_string,
    "uri": read_string,
    "revision": read_revision,
}


def read_bool(value: Any, field: str) -> bool:
    """true or false (JSON booleans only)."""
    if not isinstance(value, bool):
        raise ConfigError(field, "must be true or false")
    return value


def read_port(value: Any, field: str) -> int:
    """A TCP port, 0..65535 (0 picks a free one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise ConfigError(field, "must be a port number 0..65535 (0 picks a free port)")
    return value


def read_positive(value: Any, field: str, limit: float, unit: str) -> float:
    """A finite number in (0, limit] of `unit` (JSON numbers only, never a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, f"must be a number of {unit}")
    if not 0 < value <= limit:
        raise ConfigError(field, f"must be in (0, {limit:g}]")
    return float(value)


def read_ttl(value: Any, field: str) -> float:
    """Seconds a confirmation stays valid: finite, > 0, at most main.MAX_STATE_TTL_SECONDS."""
    return read_positive(value, field, main.MAX_STATE_TTL_SECONDS, "seconds")


def read_keys(value: Any, field: str) -> list[bytes]:
    """Hex signing keys, newest first, each at least main.MIN_KEY_BYTES bytes."""
    if not isinstance(value, list) or not value:
        raise ConfigError(field, "must be a non-empty list of hex keys, newest first")
    keys = []
    for index, text in enumerate(value):
        where = f"{field}[{index}]"
        # Never the value itself in the message: it is (or was meant to be) a secret.
        if not isinstance(text, str) or not _HEX_DIGITS_RE.fullmatch(text):
            raise ConfigError(where, f"must be hex digits only (0-9, a-f): {KEY_FORM}")
        if len(text) % 2:
            raise ConfigError(where, f"has an odd number of hex digits ({len(text)}): {KEY_FORM}")
        key = bytes.fromhex(text)
        if len(key) < main.MIN_KEY_BYTES:
            raise ConfigError(where, f"is {len(text)} hex digits ({len(key)} bytes): {KEY_FORM}")
        keys.append(key)
    return keys


def read_origins(value: Any, field: str) -> frozenset[str]:
    """Extra browser origins allowed to call the endpoint, as scheme://host[:port]."""
    if not isinstance(value, list):
        raise ConfigError(field, "must be a list of origins like https://app.example")
    for index, origin in enumerate(value):
        if not isinstance(origin, str) or not _ORIGIN_RE.fullmatch(origin.lower()):
            raise ConfigError(f"{field}[{index}]", "must be scheme://host[:port] with scheme http or https")
    return frozenset(origin.lower() for origin in value)


def read_public_url(value: Any, field: str) -> str:
    """Where people open this server's pages (scheme://host[:port], no path), lowercased: links, Origin, cookies."""
    # A TLS proxy in front of the server: the browser is on https://notes.example.com, not on
    # the address the server listens on, and every link, Origin check and cookie must say so.
    if not isinstance(value, str) or not _ORIGIN_RE.fullmatch(value.lower()):
        raise ConfigError(
            field,
            "must be the address people open the pages at, scheme://host[:port] with scheme http or https "
            "and nothing after it, e.g. https://notes.example.com",
        )
    return value.lower()


PASSKEY_MODES = ("off", "offer", "require")  # the confirmation page's passkeys (code/passkey_pages.py)


def read_passkeys(value: Any, field: str) -> str:
    """Passkeys on the confirmation page: "off" (the default), "offer" (a sign-in) or "require" (every approval)."""
    if value not in PASSKEY_MODES:
        raise ConfigError(field, f"must be one of {', '.join(PASSKEY_MODES)}")
    return str(value)


def read_deletion(value: Any, field: str) -> str:
    """How a confirmed deletion is done: "trash" (the default: undoable) or "unlink"."""
    import audit

    if value not in audit.DELETION_MODES:
        raise ConfigError(field, f"must be one of {', '.join(audit.DELETION_MODES)}")
    return value


def read_days(value: Any, field: str) -> float:
    """A retention in days: a finite number in (0, audit.MAX_RETENTION_DAYS]."""
    import audit

    return read_positive(value, field, audit.MAX_RETENTION_DAYS, "days")


def read_entries(value: Any, field: str) -> int:
    """A count bound: an integer in 1..audit.MAX_AUDIT_ENTRIES."""
    import audit

    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= audit.MAX_AUDIT_ENTRIES:
        raise ConfigError(field, f"must be an integer 1..{audit.MAX_AUDIT_ENTRIES}")
    return value


# Every key the config file may have. An extension adds one line here and reads its
# value in assemble.build_store() (e.g. "db": read_string for an SQLite file).
CONFIG_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "principals": read_principals,
    "stdioPrincipal": read_principal_name,
    "notes": read_notes,
    "stateTtlSeconds": read_ttl,
    "keys": read_keys,
    "allowedOrigins": read_origins,
    "publish": read_bool,  # serve notes_publish and its connect pages (code/connect.py); off by default
    # serve the note tools (code/notes_tools.py: search, read, create, append, update, move); off by default
    "notesTools": read_bool,
    # notes_delete, notes_update, notes_move without a form: a link to the confirmation page; off by default
    "confirmInBrowser": read_bool,
    "connectPort": read_port,  # stdio with publish or confirmInBrowser: the loopback port of the pages
    # where people open the pages (a TLS proxy's https://...): links, the Origin rule, Secure cookies
    "publicUrl": read_public_url,
    # "offer": a passkey signs in to the confirmation page; "require": every approval needs one
    "passkeys": read_passkeys,
    "db": read_path,  # SQLite file: the notes store, or with notesDirs only the consumed confirmations
    "deletion": read_deletion,  # "trash" (default) or "unlink" (code/audit.py)
    "trashDays": read_days,  # how long a trashed note is kept (default audit.DEFAULT_TRASH_DAYS)
    "auditDays": read_days,  # how long an audit entry is kept (default audit.DEFAULT_AUDIT_DAYS)
    # how many audit entries each principal keeps (default audit.DEFAULT_AUDIT_MAX_ENTRIES)
    "auditMaxEntries": read_entries,
}
REQUIRED_CONFIG_FIELDS = ("principals",)


def read_object(
    value: Any, field: str, fields: dict[str, Callable[[Any, str], Any]], required: Sequence[str]
) -> dict[str, Any]:
    """Validate an object against a field table: unknown keys and missing required keys fail."""
    prefix = f"{field}." if field else ""
    if not isinstance(value, dict):
        raise ConfigError(field or "config", "must be a JSON object")
    for key in value:
        if key not in fields:
            raise ConfigError(prefix + key, f"unknown key (allowed: {', '.join(fields)})")
    for key in required:
        if key not in value:
            raise ConfigError(prefix + key, "is required")
    return {key: fields[key](item, prefix + key) for key, item in value.items()}


def parse_config(text: str) -> dict[str, Any]:
    """Parse and validate a config document; ConfigError names the first bad field."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # Two spellings of one key: which one wins differs between JSON parsers.
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise ConfigError(key, "appears twice in one object")
            seen[key] = item
        return seen

    def no_constant(name: str) -> Any:
        raise ConfigError("config", f"{name} is not JSON")

    try:
        document = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError("config", f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ConfigError:
        raise  # a duplicate key or a NaN, found by the hooks above
    except RecursionError:
        raise ConfigError("config", "is nested too deeply") from None
    except ValueError:
        # Python refuses to convert integers of more than 4,300 digits: no config needs one.
        raise ConfigError("config", "holds a number too large to read") from None
    config = read_object(document, "", CONFIG_FIELDS, REQUIRED_CONFIG_FIELDS)
    principals = config["principals"]
    if "stdioPrincipal" not in config:
        if len(principals) != 1:
            raise ConfigError("stdioPrincipal", "is required when there is more than one principal")
        config["stdioPrincipal"] = next(iter(principals))
    if config["stdioPrincipal"] not in principals:
        raise ConfigError("stdioPrincipal", f"{config['stdioPrincipal']!r} is not one of the principals")
    owners: dict[str, str] = {}
    for name, entry in principals.items():
        # One token for two principals would make "who is calling" ambiguous.
        if entry["token"] in owners:
            raise ConfigError(f"principals.{name}.token", f"is the same as the token of {owners[entry['token']]!r}")
        owners[entry["token"]] = name
    return config


MAX_CONFIG_BYTES = 1024 * 1024  # a config file larger than this is refused unread


def load_config(path: str, warn: Callable[[str], None] | None = None, euid: int | None = None) -> dict[str, Any]:
    """The validated config file at `path` (see parse_config), its relative paths made absolute against its folder."""
    config = parse_config(read_config_file(path, warn, euid))
    return anchor_paths(config, os.path.dirname(os.path.abspath(path)))


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def anchor_paths(config: dict[str, Any], folder: str) -> dict[str, Any]:
    """`config` with a relative `db` and relative `notesDirs` joined to `folder` (the config file's)."""
    # Against the working directory, two instances a host starts from two folders over one
    # config would keep two replay stores: a confirmation consumed on one, unused on the other.
    if "db" in config:
        config["db"] = db_location(config["db"], "db", folder)
    for entry in config["principals"].values():
        if "notesDirs" in entry:
            # `~` is left as written, for the folder check to refuse with the path meant.
            entry["notesDirs"] = [
                path if path.startswith("~") else os.path.join(folder, path) for path in entry["notesDirs"]
            ]
    return config


def db_location(value: str, field: str, folder: str) -> str:
    """A `db` value as used: a PostgreSQL URL as written, an SQLite path made absolute against `folder`; `~` refused."""
    if value.startswith(POSTGRES_SCHEMES):
        return value
    if value.startswith("~"):
        raise ConfigError(
            field,
            f"{value} starts with ~, which is not expanded here (hosts start servers without a shell); "
            f"write the absolute path, e.g. {os.path.expanduser(value)}",
        )
    return os.path.normpath(os.path.join(folder, value))


def read_config_file(path: str, warn: Callable[[str], None] | None = None, euid: int | None = None) -> str:
    """The text of a config file, or ConfigError: opened once, a regular file of at most MAX_CONFIG_BYTES.

    The server's user (`euid`, default ours) or root owns it, no one else may write it, and
    it is in no folder anyone else may replace it in.
    """
    import stat

    euid = os.geteuid() if euid is None else euid
    check_config_folders(path)
    try:
        # O_NONBLOCK: opening a FIFO (or a device) must not hang start-up; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.__class__.__name__}") from None
    try:
        # Checked on the descriptor we read from, not the path: the file cannot be
        # swapped between the check and the read.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("config", f"{path} is not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
        # Its owner can rewrite it: add a principal or a signing key of their own. Root is
        # trusted as ssh trusts it: a root-owned file in /etc for a server running as its own
        # user is the usual set-up, and root could change the server's own files anyway.
        if info.st_uid not in (euid, ROOT_UID):
            raise ConfigError(
                "config",
                f"{path} is owned by {user_name(info.st_uid)}, not by {user_name(euid)} who runs the server (or root); "
                f"anyone who owns it can add a principal or a key: chown {user_name(euid)} {path}",
            )
        mode = stat.S_IMODE(info.st_mode)
        # It holds bearer tokens and signing keys. Writable by others, anyone could add a
        # principal or a key: refused, as ssh refuses such a key file. Readable by others,
        # the tokens are leaked: a warning (a container may mount it so, on purpose).
        if mode & 0o022:
            raise ConfigError("config", f"{path} is writable by group or others (mode {mode:04o}); chmod 600 it")
        if warn is not None and mode & 0o044:
            warn(
                f"warning: config {path} is readable by group or others (mode {mode:04o}); "
                "it holds tokens and keys: chmod 600 it"
            )
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES and (chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size)):
            chunks.append(chunk)  # a file that grew since fstat is still read no further than the cap
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.__class__.__name__}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("config", f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("config", f"cannot read {path}: UnicodeDecodeError") from None


ROOT_UID = 0


def user_name(uid: int) -> str:
    """A user's login name, or `uid N` when the system has none for it."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_config_folders(path: str) -> None:
    """ConfigError if a folder on the way to the config file lets anyone replace it (world-writable, no sticky bit)."""
    import stat

    # In such a folder anyone may rename the file away and put a link in its place, to
    # another file the server's user owns: every check on the opened file would pass.
    folder = os.path.dirname(os.path.realpath(path))
    while True:
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            return  # the open that follows says why the file cannot be read
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            raise ConfigError(
                "config",
                f"{path} is in {folder}, which anyone can write to (mode {stat.S_IMODE(mode):04o}, no sticky bit), "
                f"so anyone could replace the file: chmod o-w {folder}, or move the config to a folder of your own",
            )
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def lesson_config() -> dict[str, Any]:
    """The no-config setup: the lesson fixture, one principal (`alice`), no token yet."""
    return {
        "principals": {main.LESSON_PRINCIPAL: {"token": None, "workspaces": [main.LESSON_WORKSPACE]}},
        "stdioPrincipal": main.LESSON_PRINCIPAL,
        "notes": main.lesson_notes(),
    }
