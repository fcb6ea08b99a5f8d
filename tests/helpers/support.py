"""Shared test helpers: import path for code/ and code/scripts/, a controllable clock, request builders."""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import unittest
from typing import TYPE_CHECKING, Any


def _share_bytecode() -> None:
    """Let the Python processes the tests start keep the bytecode they compile (in __pycache__, which git ignores).

    The suite starts a few hundred of them (serve.py, the scripts). With
    PYTHONDONTWRITEBYTECODE inherited, each compiled every module of code/ it imports from
    source again; now the first one writes the bytecode and the others load it.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_share_bytecode()

SHM = "/dev/shm"  # Linux's tmpfs: files in memory, no journal, an fsync that has nothing to write
# A container's /dev/shm is often 64 MB: with less than this free, the tests keep the usual folder.
MIN_SHM_FREE_BYTES = 512 * 1024 * 1024
# Where temporary files go without the choice below: for the tests whose point is a disk file
# system's feature (user extended attributes, which this kernel's tmpfs does not keep).
DISK = tempfile.gettempdir()


def _scratch() -> str | None:
    """SHM where TMPDIR names no folder and SHM is a folder this process may write in with MIN_SHM_FREE_BYTES free;
    else None."""
    if os.environ.get("TMPDIR") or not os.path.isdir(SHM) or not os.access(SHM, os.W_OK | os.X_OK):
        return None
    free = os.statvfs(SHM)
    return SHM if free.f_bavail * free.f_frsize >= MIN_SHM_FREE_BYTES else None


# The tests' temporary folders (theirs, their servers', pip's, Chromium's profile): their
# thousands of small files and synced SQLite commits cost a disk file system's journal as
# much CPU as the tests themselves, and nothing a test asserts depends on the journal
# (a test about a disk's feature asks for DISK). TMPDIR set, everything goes where it says.
SCRATCH = _scratch()
if SCRATCH is not None:
    tempfile.tempdir = SCRATCH
    os.environ["TMPDIR"] = SCRATCH  # the processes the tests start


def python(site: bool = False) -> list[str]:
    """The command line that starts this interpreter for a child process: with `-S` unless `site` is asked for.

    The product, its scripts and the tests' own helpers need nothing outside the standard
    library, so most children skip the `site` module: it adds the site-packages folders and
    runs every `.pth` start-up hook in them, which on some installations imports packages at
    each start (tens of milliseconds of CPU, a few hundred times per run). A child that loads
    an optional package (psycopg, fido2, an MCP SDK) or a `sitecustomize` asks for `site`.
    """
    return [sys.executable] if site else [sys.executable, "-S"]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE = os.path.join(ROOT, "code")
SCRIPTS = os.path.join(CODE, "scripts")  # benchmarks and test-only helpers, apart from the server
for _folder in (SCRIPTS, CODE):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

import frame  # noqa: E402 - importable only once the loop above put code/ on the path
import main  # noqa: E402 - importable only once the loop above put code/ on the path
import stores  # noqa: E402 - importable only once the loop above put code/ on the path

KEY = bytes(range(32))  # a test key; never used outside tests
OTHER_KEY = bytes(range(100, 132))
WORKSPACE = main.LESSON_WORKSPACE
PRINCIPAL = main.LESSON_PRINCIPAL
FORM: dict[str, Any] = {"elicitation": {"form": {}}}

# The base of a test mixin (one contract run against several stores): a TestCase to the type
# checker, so the mixin's self.assertEqual(...) is checked; a plain object at run time, so the
# mixin alone is never collected and run as a test of nothing.
if TYPE_CHECKING:
    ContractCase = unittest.TestCase
else:
    ContractCase = object


def answered(server: main.Server, message: Any, principal: str) -> dict[str, Any]:
    """The server's response to a request: a request, unlike a notification, is always answered."""
    response = server.handle(message, principal)
    if response is None:
        raise AssertionError(f"no response to {message!r}")
    return response


def unb64(text: str) -> bytes:
    """Unpadded base64url to bytes (reading a requestState's parts; not a check)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_of(state: str) -> dict[str, Any]:
    """The signed (not encrypted) claims of a requestState."""
    return json.loads(unb64(state.split(".")[2]))


def engine_headers(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header pairs as the HTTP engine hands them to an app: names lower-cased, values as sent."""
    return [(name.lower(), value) for name, value in pairs]


class Clock:
    """An injected clock the test moves by hand (no sleeps)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Log(list[str]):
    """A log sink that keeps every line, so tests can assert what went to stderr."""

    def __call__(self, line: str) -> None:
        self.append(line)


def logged(server: main.Server) -> Log:
    """The lines a server built here (make_server, make_lesson_server, server_over) logged."""
    sink = server.log if isinstance(server, frame.Server) else server.services.log
    if not isinstance(sink, Log):
        raise AssertionError("this server logs elsewhere")
    return sink


def make_server(clock: Clock | None = None, log: Log | None = None, **kwargs: Any) -> frame.Server:
    """The product's server over the lesson fixture (memory stores), with the test key, an injected clock and a captured
    log."""
    return server_over(main.lesson_notes(), clock=clock, log=log if log is not None else Log(), **kwargs)


def make_lesson_server(clock: Clock | None = None, log: Log | None = None, **kwargs: Any) -> main.Server:
    """The lesson's own server (main.lesson_server) with the test key, an injected clock and a captured log."""
    return main.lesson_server(KEY, clock=clock or Clock(), log=log if log is not None else Log(), **kwargs)


def request(method: str, params: dict[str, Any] | None = None, id: Any = 1, capabilities: Any = None) -> dict[str, Any]:
    """A modern JSON-RPC request with the required _meta merged into params."""
    body = dict(params or {})
    body["_meta"] = main.request_meta({} if capabilities is None else capabilities)
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": body}


def call(arguments: dict[str, Any], id: Any = 1, capabilities: Any = FORM, **extra: Any) -> dict[str, Any]:
    """A tools/call notes_delete request; extra keys (requestState, inputResponses) go in params."""
    return request(
        "tools/call", {"name": main.TOOL_NAME, "arguments": arguments, **extra}, id=id, capabilities=capabilities
    )


def tps(title: str = "TPS report", workspace: str = WORKSPACE) -> dict[str, Any]:
    """The lesson's arguments."""
    return {"workspaceUri": workspace, "title": title}


def accept(note_id: str = "note-14", confirm: bool = True) -> dict[str, Any]:
    """inputResponses for an accepted form."""
    return {main.INPUT_KEY: {"action": "accept", "content": {"note_id": note_id, "confirm": confirm}}}


def note_ids(server: main.Server) -> list[str]:
    """Ids of every note the server's in-memory store still holds."""
    return [note.id for note in server.services.notes.all()]


def contained(workspace_uri: str, uri: str) -> bool:
    """Containment as the server decides it: both parse, and `uri` is the workspace or inside it."""
    try:
        return main.is_within(main.parse_file_uri(uri), main.parse_file_uri(workspace_uri))
    except main.ScopeError:
        return False


def server_over(
    notes: list[main.Note], clock: Clock | None = None, grants: dict[str, list[str]] | None = None, **kwargs: Any
) -> frame.Server:
    """A server over the given notes in memory; alice is granted the lesson workspace by default."""
    clock = clock or Clock()
    store = stores.MemoryStore(
        notes, main.MemoryReplayStore(clock, kwargs.pop("max_replay", main.MAX_REPLAY_PER_PRINCIPAL))
    )
    return frame.notes_server(
        keys=[KEY],
        notes=store,
        replay=store.replay,
        policy=main.AuthorizationPolicy(grants or {PRINCIPAL: [WORKSPACE]}),
        clock=clock,
        log=kwargs.pop("log", Log()),
        **kwargs,
    )
