"""What every benchmark mode shares: the workload, timing, the report's lines, the processes it starts.

The bench workspace and its notes, the client's two calls of one round trip, the injected
clock, the servers started over stdio or HTTP (and the canned responder beside them), the
store workers several modes race on one database, and the recorded-figures file.
"""

from __future__ import annotations

import contextlib
import gc
import http.client
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import frame
import main
import stores

__all__ = [
    "BENCH_PY",
    "BenchError",
    "CODE",
    "DISCOVER",
    "HttpClient",
    "HttpServer",
    "META",
    "PLOTS",
    "PRINCIPAL",
    "RECORDED_FIGURES",
    "RENAME_LOOP_FOLDERS",
    "ROOT",
    "SERVE_PY",
    "StdioServer",
    "TOKEN",
    "Ticker",
    "WORKSPACE",
    "bench_notes",
    "bench_server",
    "ceiling_argv",
    "encode",
    "first_call",
    "floor_argv",
    "folder_store_over",
    "gc_paused",
    "handler",
    "machine",
    "median_us",
    "memory_notes",
    "note_id",
    "note_title",
    "open_target",
    "percentile",
    "rate_runs",
    "record",
    "retry_call",
    "round_trip",
    "row",
    "section",
    "server_argv",
    "server_env",
    "server_over",
    "spawn",
    "sqlite_rate",
    "stop",
    "stop_all",
    "store_rate",
    "store_worker",
    "verdict",
    "write_config",
]

# The package sits in code/scripts/benchmarks; the server's modules are in code/.
BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.dirname(BENCHMARKS)
CODE = os.path.dirname(SCRIPTS)
ROOT = os.path.dirname(CODE)
BENCH_PY = os.path.join(SCRIPTS, "bench.py")  # the command line; every worker child is started through it

PRINCIPAL = "alice"
WORKSPACE = "file:///bench/ws"
TOKEN = "bench-" + secrets.token_hex(16)
META = main.request_meta()  # what a modern client sends: version, clientInfo, form elicitation


class BenchError(RuntimeError):
    """A round trip returned something other than the expected protocol answer."""


def note_id(i: int) -> str:
    """The id of bench note i."""
    return f"b{i}"


def note_title(i: int) -> str:
    """The title of bench note i (unique: matches only note i)."""
    # Fixed width: "Bench note 000012" is not a substring of any other title.
    return f"Bench note {i:06d}"


def bench_notes(count: int) -> list[main.Note]:
    """`count` notes in the bench workspace, plus two look-alikes outside it (never offered)."""
    notes = [main.Note(note_id(i), note_title(i), f"{WORKSPACE}/n{i}.md") for i in range(count)]
    notes.append(main.Note("evil-1", note_title(0), "file:///bench/ws-evil/n0.md"))
    notes.append(main.Note("tmp-1", note_title(0), "file:///tmp/n0.md"))
    return notes


_CLIENT_JSON = json.JSONEncoder(separators=(",", ":"))  # built once, as a lean client would


def encode(message: dict[str, Any]) -> bytes:
    """What a lean client sends: compact JSON."""
    return _CLIENT_JSON.encode(message).encode("utf-8")


def first_call(i: int, request_id: int) -> dict[str, Any]:
    """The first tools/call for note i (no state yet)."""
    arguments = {"workspaceUri": WORKSPACE, "title": note_title(i)}
    params = {"_meta": META, "name": main.TOOL_NAME, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def retry_call(i: int, request_id: int, state: str) -> dict[str, Any]:
    """The retry: the echoed state and an accepted form choosing note i."""
    message = first_call(i, request_id)
    message["params"]["requestState"] = state
    answer = {"action": "accept", "content": {"note_id": note_id(i), "confirm": True}}
    message["params"]["inputResponses"] = {main.INPUT_KEY: answer}
    return message


def handler(server: frame.Server, principal: str) -> Callable[[bytes], bytes]:
    """A `send` for round_trip: bytes through `server.handle_bytes` as `principal` (no answer: b"")."""
    return lambda raw: server.handle_bytes(raw, principal) or b""


def round_trip(send: Callable[[bytes], bytes], i: int) -> None:
    """One full MRTR flow for note i through `send` (bytes in, bytes out); checks both answers."""
    first = json.loads(send(encode(first_call(i, 2 * i + 1))))
    result = first.get("result") or {}
    if result.get("resultType") != "input_required":
        raise BenchError(f"first call for note {i}: expected input_required, got {str(first)[:300]}")
    final = json.loads(send(encode(retry_call(i, 2 * i + 2, result["requestState"]))))
    if (final.get("result") or {}).get("structuredContent") != {"deleted": True, "noteId": note_id(i)}:
        raise BenchError(f"retry for note {i}: expected deleted, got {str(final)[:300]}")


def put_back_round_trips(
    send: Callable[[bytes], bytes],
    store: Any,
    originals: dict[str, main.Note],
    clock: Ticker,
    picks: Iterator[int],
    budget: float,
) -> tuple[int, float]:
    """(round trips, seconds timed) on notes `next(picks)` through `send` until `budget` seconds are timed.

    Off the clock, each deleted note is put back (the store keeps its size) and the clock
    moves 1 s (~300 unexpired confirmations in the replay store at any time, far below the bound).
    """
    done, elapsed = 0, 0.0
    while elapsed < budget:
        i = next(picks)
        start = time.perf_counter()
        round_trip(send, i)
        elapsed += time.perf_counter() - start
        store.put(originals[note_id(i)])
        clock.now += 1.0
        done += 1
    return done, elapsed


class Ticker:
    """An injected clock that advances only when told to."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def bench_server(notes: int, clock: Callable[[], float]) -> tuple[frame.Server, stores.MemoryStore]:
    """A server over a memory store holding `notes` notes; one principal for the workspace."""
    store = stores.MemoryStore(bench_notes(notes), main.MemoryReplayStore(clock))
    return server_over(store, PRINCIPAL, clock=clock), store


def server_over(store: stores.NotesStore, principal: str, **options: Any) -> frame.Server:
    """A quiet server with a fresh key over `store`, `principal` granted the bench workspace."""
    policy = main.AuthorizationPolicy({principal: [WORKSPACE]})
    return frame.notes_server(
        keys=[secrets.token_bytes(32)], notes=store, policy=policy, log=lambda line: None, **options
    )


def median_us(fn: Callable[[], Any], number: int | None = None, repeat: int = 7) -> float:
    """Median over `repeat` runs of the mean µs per call of `fn` (each run ~30 ms unless `number`)."""
    start = time.perf_counter_ns()
    fn()  # warm-up, and a first estimate of the cost
    once = max(time.perf_counter_ns() - start, 1)
    if number is None:
        number = max(1, min(20_000, 30_000_000 // once))
    for _ in range(min(number, 200)):
        fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter_ns() - start) / number / 1000)
    return statistics.median(runs)


def rate_runs(
    run_for: Callable[[float], tuple[int, float]], seconds: float, repeat: int = 5
) -> tuple[float, float, float]:
    """(median, min, max) of `repeat` rates; `run_for(budget)` returns (count, elapsed s)."""
    rates = []
    for _ in range(repeat):
        count, elapsed = run_for(seconds / repeat)
        rates.append(count / elapsed)
    return statistics.median(rates), min(rates), max(rates)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic collector out of tight timing loops (it is re-enabled afterwards)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def section(title: str) -> None:
    """Print a report section heading."""
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)))


def row(label: str, value: str, note: str = "") -> None:
    """Print one aligned report line."""
    print(f"  {label:<46} {value:>14}  {note}".rstrip())


def verdict(ok: bool) -> str:
    """The word for a figure against its target."""
    return "OK" if ok else "BELOW TARGET"


_PROCESSES: list[subprocess.Popen[Any]] = []


def spawn(argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a server process and remember it so `stop_all` ends it on any exit path."""
    process = subprocess.Popen(argv, env=env, **kwargs)
    _PROCESSES.append(process)
    return process


def stop(process: subprocess.Popen[Any]) -> None:
    """End one process we started: EOF on stdin, terminate, kill if it lingers, close pipes."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()  # a stdio server exits on EOF
    try:
        process.wait(timeout=0.5 if process.stdin is not None else 0)
    except subprocess.TimeoutExpired:
        pass
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    # Only now: closing a pipe another thread is blocked reading would wait for that read.
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if process in _PROCESSES:
        _PROCESSES.remove(process)


def stop_all() -> None:
    """Stop every process this script started and has not stopped yet."""
    for process in list(_PROCESSES):
        stop(process)


SERVE_PY = os.path.join(CODE, "serve.py")
URL_RE = re.compile(r"http://([^\s/:]+|\[[^\]\s]+\]):(\d+)/mcp")


def server_env(pycache: str | None = None) -> dict[str, str]:
    """The environment for a server we start: our token, no inherited signing key.

    With `pycache`, bytecode is cached under that directory (as on a usual install);
    without it the inherited setting stands (this sandbox sets PYTHONDONTWRITEBYTECODE=1,
    so every start compiles every module from source).
    """
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    env["NOTES_MCP_TOKEN"] = TOKEN
    env.pop("NOTES_MCP_SECRET", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write_config(directory: str, notes: int) -> str:
    """A config with one principal, `notes` deletable notes and a fixed signing key."""
    path = os.path.join(directory, f"bench-{notes}.json")
    config = {
        "principals": {PRINCIPAL: {"token": TOKEN, "workspaces": [WORKSPACE]}},
        "stdioPrincipal": PRINCIPAL,
        "keys": [secrets.token_hex(32)],
        "notes": [{"id": n.id, "title": n.title, "uri": n.uri} for n in bench_notes(notes)],
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return path


DISCOVER = encode({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": main.request_meta({})}})

# The ceiling: a canned responder that answers this client's requests with fixed text of
# the server's shapes and sizes (a one-choice form, a 402-character state), checking and
# keeping nothing. What it reaches is what this client, the pipe or socket and the
# machine allow; the server's figures are reported as a share of it, measured in the same
# run. `python3 -c CEILING stdio|http`; http prints its URL the way serve.py does.
#
# With a third argument, the folder holding main.py, it becomes the floor: the same
# canned answers plus the state work this design requires of every request, done with
# main.py's own code. The first call signs a state binding the principal, the argument
# digest, the candidate and a fresh nonce; the retry verifies the MAC, compares the
# digest and expiry, and claims the nonce once. Nothing else the server does (the
# envelope and argument checks, authorization, the lookup, the form, the re-check and
# the delete) is there, so no server built on this design can be faster than the floor.
CEILING = r"""
import json, socket, socketserver, sys
INFO = {"io.modelcontextprotocol/serverInfo": {"name": "ceiling", "version": "0"}}
DISCOVER = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "_meta": INFO}
TOOLS = {"resultType": "complete", "tools": [{"name": "notes_delete", "inputSchema": {"type": "object"}}],
         "_meta": INFO}
CHOICE = {"type": "string", "title": "Note to delete", "oneOf": [{"const": "b0", "title": "Bench note 000000"}]}
CONFIRM = {"type": "boolean", "title": "Delete the chosen note",
           "description": "Tick to delete the chosen note. Deletion cannot be undone.", "default": False}
FORM = {"resultType": "input_required", "inputRequests": {"delete_choice": {"method": "elicitation/create", "params": {
    "mode": "form", "message": "1 note matches. Choose the note to delete and confirm. Deletion cannot be undone.",
    "requestedSchema": {"type": "object", "properties": {"note_id": CHOICE, "confirm": CONFIRM},
                        "required": ["note_id", "confirm"]}}}}, "requestState": "v1." + "s" * 399, "_meta": INFO}

FLOOR = len(sys.argv) > 2
if FLOOR:
    sys.path.insert(0, sys.argv[2])
    import secrets, time, main, frame
    SIGNER, REPLAY = frame.KeyRing([b"floor-key-" * 4]), main.MemoryReplayStore(time.time)
    VERSION = main.digest(["b0", "Bench note 000000", "file:///bench/ws/n0.md", 0])

def signed_form(params):
    now = time.time()
    state = SIGNER.sign({"sub": "alice", "method": "tools/call", "tool": params["name"],
                         "args": main.digest(params["arguments"]), "phase": main.PHASE_CONFIRM,
                         "cands": [["b0", VERSION]], "nonce": main.b64url_encode(secrets.token_bytes(16)),
                         "iat": now, "exp": now + 300})
    return dict(FORM, requestState=state)

def settled(params):
    try:
        payload = SIGNER.verify(params["requestState"])
    except main.StateError:
        return False
    if payload["args"] != main.digest(params["arguments"]) or not time.time() < payload["exp"]:
        return False
    return REPLAY.claim(payload["sub"], payload["nonce"], payload["exp"]) is main.Settlement.CONSUMED

def answer(raw):
    message = json.loads(raw)
    params = message.get("params") or {}
    if message.get("method") == "tools/list":
        result = TOOLS
    elif message.get("method") != "tools/call":
        result = DISCOVER
    elif "requestState" not in params:
        result = signed_form(params) if FLOOR else FORM
    elif FLOOR and not settled(params):
        error = {"code": -32602, "message": "Invalid params"}
        return json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": error}).encode()
    elif params["inputResponses"]["delete_choice"]["action"] != "accept":
        result = {"resultType": "complete", "content": [{"type": "text", "text": "Declined; nothing was deleted."}],
                  "structuredContent": {"deleted": False, "reason": "declined"}, "isError": False, "_meta": INFO}
    else:
        chosen = params["inputResponses"]["delete_choice"]["content"]["note_id"]
        result = {"resultType": "complete", "content": [{"type": "text", "text": "Deleted note %s." % chosen}],
                  "structuredContent": {"deleted": True, "noteId": chosen}, "isError": False, "_meta": INFO}
    return json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": result}).encode()

class Connection(socketserver.StreamRequestHandler):
    def handle(self):
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while self.rfile.readline():
            length = 0
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = answer(self.rfile.read(length))
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            self.wfile.write(head + body)

if sys.argv[1] == "stdio":
    for line in sys.stdin.buffer:
        sys.stdout.buffer.write(answer(line) + b"\n")
        sys.stdout.buffer.flush()
else:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Connection)
    server.daemon_threads = True
    print("listening on http://127.0.0.1:%d/mcp" % server.server_address[1], file=sys.stderr, flush=True)
    server.serve_forever()
"""


class Drain(threading.Thread):
    """Reads a server's stderr so it never blocks on a full pipe; keeps the last lines."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.url = threading.Event()
        self.address: tuple[str, int] | None = None

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in self.stream:
                line = raw.decode("utf-8", "replace").rstrip()
                self.lines = (self.lines + [line])[-20:]
                found = URL_RE.search(line)
                if found and self.address is None:
                    self.address = (found.group(1).strip("[]"), int(found.group(2)))
                    self.url.set()
        self.url.set()  # EOF: whoever waits learns the server is gone


def server_argv(kind: str, config: str | None) -> list[str]:
    """`serve.py --stdio` or `--http` on 127.0.0.1, a free port, with `config` when given."""
    argv = (
        [sys.executable, SERVE_PY, "--stdio"]
        if kind == "stdio"
        else [sys.executable, SERVE_PY, "--http", "--host", "127.0.0.1", "--port", "0"]
    )
    return argv + (["--config", config] if config else [])


def ceiling_argv(kind: str) -> list[str]:
    """The canned responder (CEILING) for `kind`."""
    return [sys.executable, "-c", CEILING, kind]


def floor_argv(kind: str) -> list[str]:
    """The canned responder plus the state work the design requires (CEILING's floor) for `kind`."""
    return ceiling_argv(kind) + [CODE]


class StdioServer:
    """A stdio server process (`server_argv` or `ceiling_argv`); send() writes one line and reads one line."""

    def __init__(self, argv: list[str], pycache: str | None = None) -> None:
        self.process = spawn(
            argv, env=server_env(pycache), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.drain = Drain(self.process.stderr)
        self.drain.start()

    def send(self, raw: bytes, method: str = "tools/call") -> bytes:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(raw + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise BenchError("stdio server closed stdout; stderr: " + " | ".join(self.drain.lines[-5:]))
        return line

    def close(self) -> None:
        stop(self.process)


class HttpServer:
    """An HTTP server process on a free port; clients connect to `address` once it is printed."""

    def __init__(self, argv: list[str], pycache: str | None = None, timeout: float = 30.0) -> None:
        self.process = spawn(
            argv, env=server_env(pycache), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.drain = Drain(self.process.stderr)
        self.drain.start()
        if not self.drain.url.wait(timeout) or self.drain.address is None:
            self.close()
            raise BenchError("HTTP server printed no URL; stderr: " + " | ".join(self.drain.lines[-5:]))
        self.address = self.drain.address

    def close(self) -> None:
        stop(self.process)


class HttpClient:
    """One keep-alive connection (http.client); send() POSTs one message to /mcp."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.connection = http.client.HTTPConnection(*address, timeout=30)
        self.latencies: list[int] = []

    def send(self, raw: bytes, method: str = "tools/call") -> bytes:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": main.PROTOCOL_VERSION,
            "Mcp-Method": method,
            "Authorization": f"Bearer {TOKEN}",
        }
        if method == "tools/call":
            headers["Mcp-Name"] = main.TOOL_NAME
        start = time.perf_counter_ns()
        self.connection.request("POST", "/mcp", body=raw, headers=headers)
        response = self.connection.getresponse()
        body = response.read()
        self.latencies.append(time.perf_counter_ns() - start)
        if response.status != 200:
            raise BenchError(f"HTTP {response.status}: {body[:300]!r}")
        return body

    def close(self) -> None:
        self.connection.close()


SQLITE_TTL_SECONDS = 2.0  # short, so one principal's confirmations never reach the replay bound


def open_target(target: str, seed: list[main.Note] | None = None) -> Any:
    """The store a target names: a postgresql:// URL (psycopg needed) or an SQLite file path."""
    if target.startswith("postgresql://"):
        import postgres_store  # only the PostgreSQL mode needs it (and psycopg)

        return postgres_store.open_store(target, clock=time.time, seed_notes=seed or ())
    import sqlite_store  # only the SQLite modes need it

    return sqlite_store.open_store(target, clock=time.time, seed_notes=seed or ())


def store_worker(spec: str) -> int:
    """Child process: round trips on notes k, k+step, ... against a shared database."""
    target, k, step, notes, seconds, start_at = json.loads(spec)
    principal = f"{PRINCIPAL}{k}"
    store = open_target(target)
    server = server_over(store, principal, state_ttl=SQLITE_TTL_SECONDS)
    send = handler(server, principal)
    time.sleep(max(0.0, start_at - time.time()))  # every worker starts at the same moment
    done, start = 0, time.perf_counter()
    for i in range(k, notes, step):
        if time.perf_counter() - start >= seconds:
            break
        round_trip(send, i)
        done += 1
    print(json.dumps({"count": done, "elapsed": time.perf_counter() - start}))
    store.close()
    return 0


def store_rate(target: str, processes: int, notes: int, seconds: float) -> tuple[float, int, float]:
    """(round trips/s, round trips, seconds) for `processes` processes sharing one new database at `target`."""
    open_target(target, bench_notes(notes)).close()  # created and seeded once, before the race
    start_at = time.time() + 1.5  # past every child's imports and connection
    children = [
        spawn(
            [sys.executable, BENCH_PY, "--store-worker", json.dumps([target, k, processes, notes, seconds, start_at])],
            stdout=subprocess.PIPE,
        )
        for k in range(processes)
    ]
    results = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 120)
        stop(child)
        if child.returncode != 0:
            raise BenchError(f"store worker exited with status {child.returncode}")
        results.append(json.loads(out))
    count = sum(r["count"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    return count / elapsed, count, elapsed


def sqlite_rate(directory: str, processes: int, notes: int, seconds: float) -> tuple[float, int, float]:
    """(round trips/s, round trips, seconds) for `processes` processes sharing one new SQLite file."""
    return store_rate(os.path.join(directory, f"bench-{processes}.db"), processes, notes, seconds)


RECORDED_FIGURES = os.path.join(ROOT, "docs", "img", "bench-figures.json")
PLOTS = os.path.join(ROOT, "docs", "img")


def record(path: str, runs: list[dict[str, Any]], scaling: dict[str, Any] | None, command: str) -> None:
    """Append `runs` to the file's speed runs and put `scaling` (if given) in place of its own, each with `command`."""
    try:
        with open(path, encoding="utf-8") as handle:
            figures = json.load(handle)
    except FileNotFoundError:
        figures = {}
    figures.setdefault("speed", []).extend({**run, "command": command} for run in runs)
    if scaling is not None:
        figures["scaling"] = {**scaling, "command": command}
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(figures, indent=1) + "\n")
    os.replace(temporary, path)
    print(f"  figures recorded in {path}")


def machine() -> str:
    """CPU count, Python version and platform, for the report header."""
    return f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]} on {sys.platform}"


def latency_rows(latencies: list[float], target_ms: float) -> float:
    """Print the p50 and p99 rows of `latencies` (ms), p99 against `target_ms`; the p99."""
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    row("latency p50", f"{p50:.1f} ms")
    row("latency p99", f"{p99:.1f} ms", verdict(p99 < target_ms) + f" target: < {target_ms:.0f} ms")
    return p99


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of `samples` (ms)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


RENAME_LOOP_FOLDERS = 100  # sub-folders the rename-loop notes are spread over


def memory_notes(titles: list[str]) -> list[main.Note]:
    """One note per title, spread over RENAME_LOOP_FOLDERS folders of one workspace."""
    return [
        main.Note(f"n{i:06d}", title, f"{WORKSPACE}/f{i % RENAME_LOOP_FOLDERS:03d}/n{i:06d}.md", 1)
        for i, title in enumerate(titles)
    ]


def folder_store_over(directory: str, notes: list[main.Note]) -> tuple[str, Any, main.Path]:
    """A notes folder under `directory` holding each note as `# title`, its folder store, and the root path."""
    import markdown_store
    import sqlite_store

    folder = os.path.join(directory, "notes")
    for note in notes:
        path = os.path.join(folder, *main.parse_file_uri(note.uri)[2:])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"# {note.title}\n")
    nonces = sqlite_store.open_ledger(os.path.join(directory, "nonces.db"), clock=time.time)
    store = markdown_store.MarkdownNotesStore([folder], nonces)
    return folder, store, tuple(p for p in os.path.realpath(folder).split("/") if p)
