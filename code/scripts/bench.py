"""Benchmark: full MRTR round trips per second, where the time goes, replay-store memory.

    python3 code/scripts/bench.py [--mode inprocess|stdio|http|sqlite|all] [--seconds N] [--notes N]
    python3 code/scripts/bench.py --mode scaling [--seconds N] [--kinds K,...]   round trips/s over stdio at 10..100,000 notes, four stores
    python3 code/scripts/bench.py --mode latency [--seconds N]   HTTP p50/p99 at 1, 4 and 16 keep-alive clients
    python3 code/scripts/bench.py --mode idle [--seconds N]      HTTP while 1,000 idle connections are held
    python3 code/scripts/bench.py --mode flood [--seconds N] [--connections N]
                                          a client's p50/p99 while 1,024 connections send only CRLFs
    python3 code/scripts/bench.py --mode readahead [--connections N]
                                          server memory while 4,000 connections send ahead, never read
    python3 code/scripts/bench.py --mode guess [--seconds N] [--addresses N]
                                          wrong tokens answered per second from one and from N
                                          rotating 127.x addresses, while a right token is served
    python3 code/scripts/bench.py --mode postgres [--seconds N] [--notes N]
                                          1, 2 and 4 server processes on one PostgreSQL database,
                                          beside one SQLite file (psycopg and the server binaries needed)
    python3 code/scripts/bench.py --mode checkpoint [--seconds N] [--notes N] [--dir DIR]
                                          SQLite accepts with and without the checkpoint after
                                          each consume, in turns in one run, and their ratio
    python3 code/scripts/bench.py --mode index-memory [--notes N]
                                          bytes per note of each store's title index, ordinary titles
                                          and random CJK titles of 190 and 200 characters
    python3 code/scripts/bench.py --mode rename-loop [--notes N] [--seconds N]
                                          folder-store lookup times while another process renames
                                          one of its files in a loop
    python3 code/scripts/bench.py --mode index-rebuild [--notes N]
                                          the folder index's first build, and its rebuild after an
                                          inotify queue overflow, in process (median of five each);
                                          a first build while another process makes and removes notes
    python3 code/scripts/bench.py --mode search [--kinds sqlite,postgres] [--vault-sizes 1000,10000,100000]
                                          notes_search p50 of a rare and a common word at 10 and 100,000
                                          notes per SQL store, beside the unbounded shape; then the folder
                                          store on generated vaults: index build, size, first search,
                                          p50s against 1,000 notes, RSS, the planted queries' quality
    python3 code/scripts/bench.py --mode startup [--starts N] [--against REF]
                                          process start to the first answer (server/discover, and
                                          initialize for 2025-11-25) over stdio, as a host that starts
                                          a process per call pays it: the canned responder, this tree
                                          and REF's (default main, from git), in turns in one run
    python3 code/scripts/bench.py --mode plot [--figures FILE] [--out DIR]
                                          draw docs/img/speed.svg and scaling.svg from recorded figures
    ... --mode stdio|http|scaling --record FILE   also add the run's figures to FILE (JSON), for plot

A script, not a test: it prints a readable report and exits 0 (1 if a round trip ever
returns something other than the expected protocol answer). One round trip is the whole
lesson flow: `tools/call notes_delete` -> `input_required` (the form and a signed
requestState), then the retry with `inputResponses.delete_choice = accept` and the echoed
state -> `deleted`. Both legs go through bytes: the client encodes JSON, the server runs
`handle_bytes`, the client decodes the answer.

Over stdio and HTTP the server runs beside a canned responder (CEILING below) that answers
the same client with fixed text: the server's round trips/s and its start-up are reported
as a share and a multiple of that responder's, measured in turns within the same run.

Workload: one workspace holding `--notes` notes with unique, fixed-width titles, so each
title query matches exactly one note. The store size is part of the cost of a lookup: in-process, every deleted note is put
back (`store.put`) so the size stays constant; over stdio and HTTP the server is started
on a config with `--notes` notes and restarted when they run out (start-up excluded).
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import html
import http.client
import io
import itertools
import json
import os
import pstats
import random
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

# A script beside the server, not part of it: the server's modules are one folder up.
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
CODE = os.path.dirname(SCRIPTS)
for folder in (CODE, SCRIPTS):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import config as config_file  # noqa: E402
import http_server  # noqa: E402
import main  # noqa: E402
import confirmations
import frame
import stores
import streamable_http  # noqa: E402

PRINCIPAL = "alice"
WORKSPACE = "file:///bench/ws"
TOKEN = "bench-" + secrets.token_hex(16)
META = main.request_meta()  # what a modern client sends: version, clientInfo, form elicitation

# The targets the report checks; every figure it prints is measured in the same run.
TARGET_INPROCESS_RT = {10: 10_000, 1000: 7_000}  # round trips/s by notes in the workspace
TARGET_CEILING_SHARE = 0.80  # of the canned responder's round trips/s, same client, same run
TARGET_START_FACTOR = 1.6  # first answer, at most this many times the canned responder's


class BenchError(RuntimeError):
    """A round trip returned something other than the expected protocol answer."""


# ---------------------------------------------------------------------------------- workload


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


def round_trip(send: Callable[[bytes], bytes], i: int) -> None:
    """One full MRTR flow for note i through `send` (bytes in, bytes out); checks both answers."""
    first = json.loads(send(encode(first_call(i, 2 * i + 1))))
    result = first.get("result") or {}
    if result.get("resultType") != "input_required":
        raise BenchError(f"first call for note {i}: expected input_required, got {str(first)[:300]}")
    final = json.loads(send(encode(retry_call(i, 2 * i + 2, result["requestState"]))))
    if (final.get("result") or {}).get("structuredContent") != {"deleted": True, "noteId": note_id(i)}:
        raise BenchError(f"retry for note {i}: expected deleted, got {str(final)[:300]}")


class Ticker:
    """An injected clock that advances only when told to."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def bench_server(notes: int, clock: Callable[[], float]) -> tuple[frame.Server, main.MemoryNotesStore]:
    """A server over a memory store holding `notes` notes; one principal for the workspace."""
    store = stores.MemoryStore(bench_notes(notes), main.MemoryReplayStore(clock))
    return server_over(store, PRINCIPAL, clock=clock), store


def server_over(store: stores.NotesStore, principal: str, **options: Any) -> frame.Server:
    """A quiet server with a fresh key over `store`, `principal` granted the bench workspace."""
    policy = main.AuthorizationPolicy({principal: [WORKSPACE]})
    return frame.notes_server(keys=[secrets.token_bytes(32)], notes=store, policy=policy, log=lambda line: None, **options)


# ---------------------------------------------------------------------------------- timing


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


def rate_runs(run_for: Callable[[float], tuple[int, float]], seconds: float, repeat: int = 5) -> tuple[float, float, float]:
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


# ---------------------------------------------------------------------------------- in-process


def inprocess_round_trips(notes: int, seconds: float) -> tuple[float, float, float, float]:
    """(median, min, max round trips/s, server share) with the store size held at `notes`."""
    clock = Ticker()
    server, store = bench_server(notes, clock)
    originals = {note.id: note for note in store.all()}
    server_ns = 0

    def send(raw: bytes) -> bytes:
        nonlocal server_ns
        start = time.perf_counter_ns()
        body = server.handle_bytes(raw, PRINCIPAL)
        server_ns += time.perf_counter_ns() - start
        assert body is not None
        return body

    counter = itertools.count()

    def run_for(budget: float) -> tuple[int, float]:
        done, elapsed = 0, 0.0
        while elapsed < budget:
            i = next(counter) % notes
            start = time.perf_counter()
            round_trip(send, i)
            elapsed += time.perf_counter() - start
            # Outside the clock: put the note back, so the store size stays constant.
            store.put(originals[note_id(i)])
            clock.now += 1.0  # ~300 unexpired confirmations in the replay store at any time
            done += 1
        return done, elapsed

    run_for(min(0.5, seconds / 4))  # warm-up
    server_ns = 0
    timed: list[float] = []

    def counted(budget: float) -> tuple[int, float]:
        done, elapsed = run_for(budget)
        timed.append(elapsed)
        return done, elapsed

    median, low, high = rate_runs(counted, seconds)
    share = server_ns / 1e9 / sum(timed)
    return median, low, high, share


def breakdown(notes: int) -> dict[str, float]:
    """µs per operation for each step of a round trip, median of several repetitions."""
    clock = Ticker()
    server, store = bench_server(notes, clock)
    i = notes // 2
    note = next(n for n in store.all() if n.id == note_id(i))
    first_raw = encode(first_call(i, 1))
    first_body = server.handle_bytes(first_raw, PRINCIPAL)
    assert first_body is not None
    state = json.loads(first_body)["result"]["requestState"]
    retry_raw = encode(retry_call(i, 2, state))
    retry_msg = json.loads(retry_raw)
    first_response = json.loads(first_body)
    workspace = main.parse_file_uri(WORKSPACE)
    canonical = {"workspaceUri": WORKSPACE, "title": note_title(i)}
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nAuthorization: Bearer " + TOKEN + "\r\n"
        f"MCP-Protocol-Version: {main.PROTOCOL_VERSION}\r\nMcp-Method: server/discover\r\nContent-Length: {len(DISCOVER)}"
    ).encode()
    policy = streamable_http.HttpPolicy({PRINCIPAL: TOKEN}, None, frozenset({"127.0.0.1:8765"}), frozenset())
    endpoint = streamable_http.McpEndpoint(server, policy)

    def checks() -> None:
        # Everything the server verifies about a retry before it touches state or store.
        envelope = main.parse_envelope(retry_msg)
        meta = main.read_meta(envelope.params)
        main.check_version(meta)
        args = main.read_scope_args(envelope.params["arguments"])
        main.supports_form_elicitation(meta.capabilities)
        path = main.parse_file_uri(args.workspace_uri)
        server.policy.allows(PRINCIPAL, path)
        main.format_file_uri(path)
        main.inside_workspace(note, path)

    def http_request() -> bytes:
        # What the engine and the endpoint do around the core for one request.
        method, target, version, headers = http_server.parse_head(head)
        http_server.content_length(headers)
        response = endpoint(http_server.Request(method, target, version, headers, DISCOVER, ("127.0.0.1", 1), threading.Event()))
        assert response.status == 200, response
        return http_server.encode_head(response.status, response.headers, [("Content-Length", str(len(response.body)))])

    payload = {
        "sub": PRINCIPAL,
        "method": "tools/call",
        "tool": main.TOOL_NAME,
        "args": main.digest(canonical),
        "phase": main.PHASE_CONFIRM,
        "cands": [[note.id, note.version]],
        "nonce": main.b64url_encode(secrets.token_bytes(16)),
        "iat": clock.now,
        "exp": clock.now + 300.0,
    }
    signer = server.services.signer
    token = signer.sign(payload)

    figures: dict[str, float] = {}
    figures["json_bytes"] = float(len(first_body))
    figures["json"] = median_us(lambda: frame.encode_message(frame.decode_message(first_body)))
    figures["json_rt"] = median_us(
        lambda: (
            frame.decode_message(first_raw),
            frame.encode_message(first_response),
            frame.decode_message(retry_raw),
            frame.encode_message({"jsonrpc": "2.0", "id": 2, "result": main.tool_result("Deleted note b1.", {"deleted": True, "noteId": "b1"})}),
        )
    )
    figures["checks"] = median_us(checks)
    figures["http_layer"] = median_us(http_request) - median_us(lambda: server.handle_bytes(DISCOVER, PRINCIPAL))
    figures["lookup"] = median_us(lambda: store.candidates(workspace, note_title(i)))
    figures["form"] = median_us(lambda: main.delete_form(WORKSPACE, note_title(i), [note], store.deletion))
    figures["digest"] = median_us(lambda: main.digest(canonical))
    figures["sign"] = median_us(lambda: signer.sign(payload))
    figures["verify"] = median_us(lambda: signer.verify(token))
    figures["sign_verify"] = median_us(lambda: signer.verify(signer.sign(payload)))

    # settle (accept -> DELETED): the note is put back and a fresh nonce drawn outside the timer.
    recheck = lambda live: server.policy.allows(PRINCIPAL, workspace) and main.inside_workspace(live, workspace)  # noqa: E731
    runs = []
    with gc_paused():
        for _ in range(7):
            total = 0
            for _ in range(2000):
                store.put(note)
                nonce = secrets.token_hex(8)
                clock.now += 1.0
                start = time.perf_counter_ns()
                outcome = store.consume(PRINCIPAL, nonce, clock.now + 300.0, (note.id, note.version), recheck)
                total += time.perf_counter_ns() - start
                if outcome is not main.Settlement.DELETED:
                    raise BenchError(f"settle returned {outcome}")
            runs.append(total / 2000 / 1000)
    figures["settle"] = statistics.median(runs)
    store.put(note)

    # The two legs and the whole flow, through handle_bytes.
    figures["first"] = median_us(lambda: server.handle_bytes(first_raw, PRINCIPAL))
    originals = {n.id: n for n in store.all()}
    counter = itertools.count()

    def one() -> None:
        k = next(counter) % notes
        round_trip(lambda raw: server.handle_bytes(raw, PRINCIPAL) or b"", k)
        store.put(originals[note_id(k)])
        clock.now += 1.0

    figures["round_trip"] = median_us(one)
    return figures


def lookup_scaling(sizes: list[int]) -> list[tuple[int, float]]:
    """µs per candidates() lookup (one match) as the store grows."""
    out = []
    for size in sizes:
        _, store = bench_server(size, Ticker())
        workspace = main.parse_file_uri(WORKSPACE)
        title = note_title(size // 2)
        out.append((size, median_us(lambda: store.candidates(workspace, title), repeat=5)))
    return out


def replay_flood(confirmations: int, principals: int) -> dict[str, Any]:
    """Flood one store with confirmations through `settle`; memory, bound and pruning."""
    clock = Ticker()
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    replay = main.MemoryReplayStore(clock)
    store = stores.MemoryStore([], replay)
    ttl = main.DEFAULT_STATE_TTL_SECONDS
    counts = {outcome: 0 for outcome in main.Settlement}
    per_principal: dict[str, int] = {}
    start = time.perf_counter()
    for k in range(confirmations):
        principal = f"p{k % principals}"
        nonce = main.b64url_encode(secrets.token_bytes(16))  # what ask() mints
        outcome = store.consume(principal, nonce, clock.now + ttl, None, lambda note: False)
        counts[outcome] += 1
        if outcome is main.Settlement.CONSUMED:
            per_principal[principal] = per_principal.get(principal, 0) + 1
        clock.now += 0.001  # 100k confirmations in 100 s: all still inside the 300 s TTL
    elapsed = time.perf_counter() - start
    current, peak = tracemalloc.get_traced_memory()
    held = len(replay)
    clock.now += ttl + 1  # every state has expired
    after = store.consume("p-late", "late-nonce", clock.now + ttl, None, lambda note: False)
    pruned_len = len(replay)
    current_after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "confirmations": confirmations,
        "principals": principals,
        "consumed": counts[main.Settlement.CONSUMED],
        "full": counts[main.Settlement.FULL],
        "used": counts[main.Settlement.USED],
        "max_per_principal": max(per_principal.values(), default=0),
        "held": held,
        "bound": principals * main.MAX_REPLAY_PER_PRINCIPAL,
        "current": current - baseline,
        "peak": peak - baseline,
        "after_prune_len": pruned_len,
        "after_prune_outcome": after,
        "current_after": current_after - baseline,
        "rate": confirmations / elapsed,
    }


def profile_round_trips(notes: int, count: int = 3000, top: int = 18) -> str:
    """cProfile of `count` in-process round trips; the top functions by own time."""
    clock = Ticker()
    server, store = bench_server(notes, clock)
    originals = {note.id: note for note in store.all()}
    profiler = cProfile.Profile()
    profiler.enable()
    for k in range(count):
        i = k % notes
        round_trip(lambda raw: server.handle_bytes(raw, PRINCIPAL) or b"", i)
        store.put(originals[note_id(i)])
        clock.now += 1.0
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)
    return text.getvalue()


def run_inprocess(args: argparse.Namespace) -> dict[str, Any]:
    """Round trips/s, the time breakdown, lookup scaling and the replay flood, printed."""
    section("In-process: full round trips through handle_bytes (each deleted note is put back, off the clock)")
    sizes = sorted({10, args.notes, 20_000})
    rates: dict[int, float] = {}
    for size in sizes:
        with gc_paused():
            median, low, high, share = inprocess_round_trips(size, args.seconds)
        rates[size] = median
        target = TARGET_INPROCESS_RT.get(size)
        goal = f"; target >= {target:,}: {verdict(median >= target)}" if target else ""
        note = f"min {low:,.0f} max {high:,.0f}; {share:.0%} in handle_bytes, so {median / share:,.0f}/s server-only{goal}"
        row(f"{size:,} notes in the workspace: round trips/s", f"{median:,.0f}", note)
    median = rates[args.notes]
    ok = median >= TARGET_INPROCESS_RT.get(args.notes, 0)

    section("Where the time goes (µs per op, median of 7 repetitions)")
    f = breakdown(args.notes)
    row(f"(a) decode+encode, {f['json_bytes']:.0f} B message", f"{f['json']:.1f}")
    row("    server JSON per round trip (2 in, 2 out)", f"{f['json_rt']:.1f}")
    row("(b) checks: envelope, _meta, args, URI, authz", f"{f['checks']:.1f}", "per request (stdio)")
    row("    HTTP layer around the core (head, checks)", f"{f['http_layer']:.1f}", "per request (HTTP), around the core")
    row(f"    candidate lookup ({args.notes} notes, 1 match)", f"{f['lookup']:.1f}", "first call only")
    row("    form (elicitation) build", f"{f['form']:.1f}", "first call only")
    row("    argument digest (state binding)", f"{f['digest']:.1f}", "once per call")
    row("(c) sign + verify a requestState", f"{f['sign_verify']:.1f}", f"sign {f['sign']:.1f} + verify {f['verify']:.1f}")
    row("(d) consume (claim nonce, re-check, delete)", f"{f['settle']:.1f}")
    row("first call through handle_bytes", f"{f['first']:.1f}")
    row("total: one full round trip (client included)", f"{f['round_trip']:.1f}", f"= {1e6 / f['round_trip']:,.0f}/s")
    parts = f["json_rt"] + 2 * f["checks"] + f["lookup"] + f["form"] + 2 * f["digest"] + f["sign_verify"] + f["settle"]
    row("sum of the server-side parts above", f"{parts:.1f}", "(a)+2(b)+lookup+form+2 digests+(c)+(d)")

    section("Lookup cost as the in-memory store grows (µs per candidates() call, one match)")
    scaling = lookup_scaling(sizes)
    for size, micros in scaling:
        row(f"{size:,} notes", f"{micros:,.1f}", f"{micros * 1000 / size:.0f} ns a note (a scan)")

    section("Replay store after a flood of confirmations (injected clock)")
    flood = replay_flood(args.flood, 4)
    row("confirmations settled (4 principals)", f"{flood['confirmations']:,}", f"{flood['rate']:,.0f}/s under tracemalloc")
    row("  consumed / refused FULL / USED", f"{flood['consumed']:,} / {flood['full']:,} / {flood['used']}")
    row("  max held for one principal", f"{flood['max_per_principal']:,}", f"MAX_REPLAY_PER_PRINCIPAL = {main.MAX_REPLAY_PER_PRINCIPAL:,}")
    bounded = flood["held"] <= flood["bound"] and flood["max_per_principal"] <= main.MAX_REPLAY_PER_PRINCIPAL
    row("  len(store) after the flood", f"{flood['held']:,}", f"bound {flood['bound']:,}: {'bounded' if bounded else 'UNBOUNDED'}")
    row("  traced memory now / peak", f"{flood['current'] / 1024:,.0f} / {flood['peak'] / 1024:,.0f} KiB")
    row("  after the clock passes expiry: len(store)", f"{flood['after_prune_len']}", f"(the one new claim; {flood['after_prune_outcome'].value})")
    row("  traced memory after pruning", f"{flood['current_after'] / 1024:,.0f} KiB")

    if not ok or args.profile:
        count = max(200, min(5000, int(median)))  # about one second of work, unprofiled
        section(f"cProfile of {count:,} in-process round trips ({args.notes} notes), top by own time")
        print(profile_round_trips(args.notes, count))
    return {"inprocess_rt": rates, "breakdown": f, "scaling": scaling, "flood": flood}


# ---------------------------------------------------------------------------------- processes

_PROCESSES: list[subprocess.Popen[bytes]] = []


def spawn(argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a server process and remember it so `stop_all` ends it on any exit path."""
    process = subprocess.Popen(argv, env=env, **kwargs)
    _PROCESSES.append(process)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
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



# ---------------------------------------------------------------------------------- transports

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
TOOLS = {"resultType": "complete", "tools": [{"name": "notes_delete", "inputSchema": {"type": "object"}}], "_meta": INFO}
CHOICE = {"type": "string", "title": "Note to delete", "oneOf": [{"const": "b0", "title": "Bench note 000000"}]}
CONFIRM = {"type": "boolean", "title": "Delete the chosen note", "description": "Tick to delete the chosen note. Deletion cannot be undone.", "default": False}
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
    state = SIGNER.sign({"sub": "alice", "method": "tools/call", "tool": params["name"], "args": main.digest(params["arguments"]),
                         "phase": main.PHASE_CONFIRM, "cands": [["b0", VERSION]], "nonce": main.b64url_encode(secrets.token_bytes(16)),
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
        return json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32602, "message": "Invalid params"}}).encode()
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
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

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
    argv = [sys.executable, SERVE_PY, "--stdio"] if kind == "stdio" else [sys.executable, SERVE_PY, "--http", "--host", "127.0.0.1", "--port", "0"]
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
        self.process = spawn(argv, env=server_env(pycache), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
        self.process = spawn(argv, env=server_env(pycache), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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


def transport_rate(kind: str, argv: list[str], notes: int, clients: int, seconds: float) -> dict[str, Any]:
    """Round trips/s over a real transport to the server `argv` starts; a fresh one whenever its notes run out.

    Only the time clients spend on round trips counts: server start-up and the first
    connection are outside the clock. Each phase deletes notes 0..notes-1 at most once.
    """
    count, elapsed, phases, latencies = 0, 0.0, [], []
    while elapsed < seconds:
        server: StdioServer | HttpServer = StdioServer(argv) if kind == "stdio" else HttpServer(argv)
        try:
            senders: list[Any] = [server] if isinstance(server, StdioServer) else [HttpClient(server.address) for _ in range(clients)]
            # One discover per client opens the connection (and warms the server) off the clock.
            for sender in senders:
                sender.send(DISCOVER, "server/discover")
                if isinstance(sender, HttpClient):
                    sender.latencies.clear()
            done, took = run_phase(senders, notes, seconds - elapsed)
            for sender in senders:
                if isinstance(sender, HttpClient):
                    latencies.extend(sender.latencies)
                    sender.close()
        finally:
            server.close()
        count += done
        elapsed += took
        phases.append(done / took)
    result: dict[str, Any] = {"rate": count / elapsed, "round_trips": count, "seconds": elapsed, "phases": len(phases)}
    if latencies:
        latencies.sort()
        result["p50_ms"] = latencies[len(latencies) // 2] / 1e6
        result["p99_ms"] = latencies[int(len(latencies) * 0.99)] / 1e6
        result["slow_40ms"] = sum(1 for ns in latencies if ns >= 35_000_000)
        result["requests"] = len(latencies)
    return result


def run_phase(senders: list[Any], notes: int, budget: float) -> tuple[int, float]:
    """Every sender does round trips on distinct notes until the budget or the notes run out."""
    counter = itertools.count()
    barrier = threading.Barrier(len(senders) + 1)
    counts = [0] * len(senders)
    errors: list[BaseException] = []
    deadline = [0.0]

    def work(k: int) -> None:
        barrier.wait()
        try:
            while not errors:
                i = next(counter)  # atomic under the GIL: each note goes to exactly one client
                if i >= notes or time.perf_counter() >= deadline[0]:
                    return
                round_trip(senders[k].send, i)
                counts[k] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(len(senders))]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    deadline[0] = start + budget
    barrier.wait()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - start
    if errors:
        raise errors[0] if isinstance(errors[0], BenchError) else BenchError(f"client failed: {errors[0]!r}")
    return sum(counts), took


def first_answer_ms(kind: str, argv: list[str], starts: int, pycache: str | None = None) -> list[float]:
    """Milliseconds from Popen of `argv` to the first server/discover answer."""
    times = []
    for _ in range(starts):
        start = time.perf_counter()
        if kind == "stdio":
            server: StdioServer | HttpServer = StdioServer(argv, pycache)
            try:
                answer = server.send(DISCOVER, "server/discover")
                took = (time.perf_counter() - start) * 1000
            finally:
                server.close()
        else:
            server = HttpServer(argv, pycache)
            try:
                client = HttpClient(server.address)
                answer = client.send(DISCOVER, "server/discover")
                took = (time.perf_counter() - start) * 1000
                client.close()
            finally:
                server.close()
        if json.loads(answer).get("result", {}).get("resultType") != "complete":
            raise BenchError(f"server/discover over {kind}: {answer[:200]!r}")
        times.append(took)
    return times


def interpreter_ms(starts: int) -> float:
    """Median milliseconds for `python3 -c pass` (the floor under any first answer)."""
    times = []
    for _ in range(starts):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def import_profile(top: int = 10) -> tuple[float, list[tuple[float, str]]]:
    """`python3 -X importtime serve.py --stdio` at EOF: total ms and the costliest imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", SERVE_PY, "--stdio"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=server_env(), timeout=60,
    )
    rows, total = [], 0.0
    for line in done.stderr.decode("utf-8", "replace").splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            ms, name = int(parts[1]) / 1000, parts[2].rstrip()
            total += ms if not name.startswith("  ") else 0.0  # a top-level cumulative includes its children
            rows.append((ms, name))
    return total, sorted(rows, key=lambda item: -item[0])[:top]


def side_by_side(kind: str, config: str, notes: int, seconds: float, rounds: int = 2) -> dict[str, dict[str, Any]]:
    """Ceiling, floor and server over one keep-alive client, measured in turns so drift on the machine hits all alike."""
    argvs = {"ceiling": ceiling_argv(kind), "floor": floor_argv(kind), "server": server_argv(kind, config)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in argvs}
    for _ in range(rounds):
        for name, argv in argvs.items():
            runs[name].append(transport_rate(kind, argv, notes, 1, seconds / rounds))

    def merged(results: list[dict[str, Any]]) -> dict[str, Any]:
        count, took = sum(r["round_trips"] for r in results), sum(r["seconds"] for r in results)
        return {**results[-1], "rate": count / took, "round_trips": count, "seconds": took}

    return {name: merged(results) for name, results in runs.items()}


def stall_note(result: dict[str, Any]) -> str:
    """What the count of requests over 35 ms says about delayed-ACK stalls."""
    stalls = result["slow_40ms"]
    if not stalls:
        return "none: no 40 ms delayed-ACK stall"
    if stalls * 100 < result["requests"]:
        return "isolated outliers (scheduling), not the every-request 40 ms delayed-ACK stall"
    return "STALLS: delayed ACK? headers and body must go in one write, or TCP_NODELAY"


def run_transports(args: argparse.Namespace, kinds: list[str]) -> dict[str, Any]:
    """stdio and/or HTTP: round trips/s beside the canned responder (CEILING), then start-up beside it."""
    figures: dict[str, Any] = {}
    # A server process takes at most MAX_REPLAY_PER_PRINCIPAL confirmations from its one
    # principal within the state TTL (the replay bound), so that is the most notes a
    # server can delete for us; then the next server starts.
    per_server = min(args.notes, main.MAX_REPLAY_PER_PRINCIPAL)
    with tempfile.TemporaryDirectory(prefix="notes-bench-") as directory:
        config = write_config(directory, per_server)
        for kind in kinds:
            section(f"{kind}: the server beside the canned responder, one lean client ({per_server:,} notes per server)")
            measured = side_by_side(kind, config, per_server, args.seconds)
            ceiling, floor, result = measured["ceiling"], measured["floor"], measured["server"]
            share = result["rate"] / ceiling["rate"]
            row("canned responder (the ceiling): round trips/s", f"{ceiling['rate']:,.0f}", f"{ceiling['round_trips']:,} in {ceiling['seconds']:.1f} s")
            row("floor (canned + sign, verify, claim): round trips/s", f"{floor['rate']:,.0f}", f"{floor['rate'] / ceiling['rate']:.0%} of the ceiling: the most this design allows")
            row(f"serve.py --{kind}: round trips/s", f"{result['rate']:,.0f}", f"{result['round_trips']:,} in {result['seconds']:.1f} s, {result['phases']} server(s)")
            row("  share of the ceiling", f"{share:.0%}", f"target >= {TARGET_CEILING_SHARE:.0%}: {verdict(share >= TARGET_CEILING_SHARE)}")
            row("  share of the floor", f"{result['rate'] / floor['rate']:.0%}", "what the checks, lookup, form and delete cost")
            row(f"  per round trip above the ceiling", f"{(1 / result['rate'] - 1 / ceiling['rate']) * 1e6:,.0f} µs")
            if kind == "http":
                row("  request latency p50 / p99", f"{result['p50_ms']:.2f} / {result['p99_ms']:.2f} ms", f"ceiling {ceiling['p50_ms']:.2f} / {ceiling['p99_ms']:.2f} ms")
                row("  requests >= 35 ms (delayed-ACK stalls)", f"{result['slow_40ms']:,} of {result['requests']:,}", stall_note(result))
            figures[kind] = {"ceiling": ceiling, "floor": floor, "server": result, "share": share}
        if "http" in kinds:
            for clients in (4, 8):
                section(f"HTTP: {clients} parallel keep-alive connections ({per_server:,} notes per server)")
                result = transport_rate("http", server_argv("http", config), per_server, clients, args.seconds)
                row("full round trips/s", f"{result['rate']:,.0f}", f"{result['round_trips']:,} in {result['seconds']:.1f} s, {result['phases']} server(s)")
                row("  request latency p50 / p99", f"{result['p50_ms']:.2f} / {result['p99_ms']:.2f} ms")
                row("  requests >= 35 ms (delayed-ACK stalls)", f"{result['slow_40ms']:,} of {result['requests']:,}", stall_note(result))
                figures[f"http{clients}"] = result

        section("Start-up: process start to the first server/discover answer (median of 10)")
        bare = interpreter_ms(10)
        row("python3 -c pass (the bare interpreter)", f"{bare:.0f} ms")
        pycache = os.path.join(directory, "pycache")
        for kind in kinds:
            canned = statistics.median(first_answer_ms(kind, ceiling_argv(kind), 10))
            row(f"{kind}: canned responder", f"{canned:.0f} ms")
            for cached in (False, True):
                if cached:
                    first_answer_ms(kind, server_argv(kind, None), 1, pycache)  # fills the cache
                times = first_answer_ms(kind, server_argv(kind, None), 10, pycache if cached else None)
                median = statistics.median(times)
                label = f"{kind}: serve.py" + (", bytecode cached" if cached else ", as this shell runs it")
                factor = median / canned
                note = f"{factor:.2f}x the canned responder (min {min(times):.0f} max {max(times):.0f}); target <= {TARGET_START_FACTOR}x: {verdict(factor <= TARGET_START_FACTOR)}"
                row(label, f"{median:.0f} ms", note)
                figures[f"first_{kind}" + ("_cached" if cached else "")] = {"ms": median, "canned_ms": canned, "factor": factor}
        total, heaviest = import_profile()
        row("imports at start-up, --stdio (-X importtime)", f"{total:.0f} ms", "costliest, cumulative (indent = import depth):")
        for ms, name in heaviest:
            row(f"    {name[:40]}", f"{ms:.1f} ms")
    return figures


# ---------------------------------------------------------------------------------- start-up

START_TARGET_MS = 300.0  # the first answer, process start included, on an idle 2-core machine
INITIALIZE = encode({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})


def first_line_ms(argv: list[str], message: bytes, env: dict[str, str]) -> float:
    """Milliseconds from Popen of a stdio server to its answer to `message` (which must be a result, not an error)."""
    start = time.perf_counter()
    process = spawn(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(message + b"\n")
        process.stdin.flush()
        line = process.stdout.readline()
        took = (time.perf_counter() - start) * 1000
    finally:
        stop(process)
    if "result" not in json.loads(line or b"{}"):
        raise BenchError(f"no answer to the first message from {argv[-1]}: {line[:200]!r}")
    return took


def tree_of(ref: str, directory: str) -> str:
    """REF's code/ folder exported from git into `directory`; the path of its serve.py."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "code"], capture_output=True, check=False)
    if archive.returncode != 0:
        raise BenchError(f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()}")
    os.makedirs(directory, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", directory], input=archive.stdout, check=True)
    return os.path.join(directory, "code", "serve.py")


def run_startup(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The first answer over stdio: canned responder, this tree and REF's, two set-ups, bytecode cached or not, in turns."""
    section(f"Start-up over stdio: process start to the first answer (median of {args.starts}, in turns)")
    with tempfile.TemporaryDirectory(prefix="notes-startup-") as directory:
        serves = {"this tree": SERVE_PY, args.against: tree_of(args.against, os.path.join(directory, "ref"))}
        config = write_config(directory, 10)
        setups = {
            "lesson (--stdio)": [],
            "per-call set-up": ["--config", config, "--db", os.path.join(directory, "{tree}.db"),
                                                                           "--notes-tools", "--confirm-in-browser"],
        }
        caches = {"bytecode cached": os.path.join(directory, "pycache-{tree}"), "compiled at each start": None}
        messages = {"server/discover": DISCOVER, "initialize (2025-11-25)": INITIALIZE}
        runs: dict[str, list[float]] = {}
        for tree, serve in serves.items():  # one start each fills the bytecode caches, off the record
            tag = "this" if tree == "this tree" else "ref"
            first_line_ms([sys.executable, serve, "--stdio"], DISCOVER, server_env(caches["bytecode cached"].replace("{tree}", tag)))
        for _ in range(args.starts):
            for message_name, message in messages.items():
                runs.setdefault(f"canned responder: {message_name}", []).append(first_line_ms(ceiling_argv("stdio"), message, server_env()))
                for cache_name, cache in caches.items():
                    for tree, serve in serves.items():
                        tag = "this" if tree == "this tree" else "ref"
                        for setup_name, setup in setups.items():
                            argv = [sys.executable, serve, "--stdio", *(part.replace("{tree}", tag) for part in setup)]
                            env = server_env(cache.replace("{tree}", tag) if cache else None)
                            runs.setdefault(f"{tree}: {setup_name}, {cache_name}: {message_name}", []).append(first_line_ms(argv, message, env))
        figures = {label: statistics.median(times) for label, times in runs.items()}
        for message_name in messages:
            canned = figures[f"canned responder: {message_name}"]
            row(f"canned responder (the ceiling): {message_name}", f"{canned:.0f} ms")
            for label, ms in figures.items():
                if label.endswith(message_name) and not label.startswith("canned"):
                    row(f"  {label.removesuffix(': ' + message_name)}", f"{ms:.0f} ms",
                        f"{ms / canned:.1f}x the canned responder; <= {START_TARGET_MS:.0f} ms: {verdict(ms <= START_TARGET_MS)}")
    return {"ms": figures}


# ---------------------------------------------------------------------------------- SQLite

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
    time.sleep(max(0.0, start_at - time.time()))  # every worker starts at the same moment
    done, start = 0, time.perf_counter()
    for i in range(k, notes, step):
        if time.perf_counter() - start >= seconds:
            break
        round_trip(lambda raw: server.handle_bytes(raw, principal) or b"", i)
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
            [sys.executable, os.path.abspath(__file__), "--store-worker", json.dumps([target, k, processes, notes, seconds, start_at])],
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


POSTGRES_PROCESS_COUNTS = (1, 2, 4)


def run_postgres(args: argparse.Namespace) -> dict[str, dict[int, float]]:
    """Round trips/s with 1, 2 and 4 server processes on one PostgreSQL database, beside one SQLite file."""
    import postgres_cluster  # a throwaway, durable cluster in a temporary folder

    reason = postgres_cluster.missing()
    if reason is not None:
        raise BenchError(reason)
    figures: dict[str, dict[int, float]] = {"postgresql": {}, "sqlite": {}}
    cluster = postgres_cluster.Cluster(durable=True)
    try:
        cluster.start()
        section(f"Store seam, consume path (first call + accept), {args.notes:,} notes seeded, not put back")
        for processes in POSTGRES_PROCESS_COUNTS:
            rate, count, elapsed = store_rate(cluster.new_database(), processes, args.notes, args.seconds)
            figures["postgresql"][processes] = rate
            row(f"PostgreSQL, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
        with tempfile.TemporaryDirectory(prefix="notes-bench-db-") as directory:
            for processes in POSTGRES_PROCESS_COUNTS:
                rate, count, elapsed = sqlite_rate(directory, processes, args.notes, args.seconds)
                figures["sqlite"][processes] = rate
                row(f"SQLite, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
    finally:
        cluster.destroy()
    return figures


SEARCH_SIZES = (10, 100_000)  # notes in the workspace, each with a title and a few lines of text
SEARCH_KINDS = ("sqlite", "postgres")


def search_text(i: int) -> str:
    """The text of search note i: shared words, and one word (12 hex digits, fixed per i) no other note holds."""
    word = hashlib.sha256(f"note {i}".encode()).hexdigest()[:12]
    return f"Meeting notes for the quarterly plan.\nAction item {word}: follow up with the team.\n"


def search_word(i: int) -> str:
    """The word only note i holds (what a search asks for: one match)."""
    return search_text(i).split("Action item ")[1][:12]


def search_store(kind: str, size: int, where: str) -> Any:
    """A store of `kind` holding `size` notes with text in the bench workspace (`where`: a folder or a PostgreSQL URL)."""
    seed = [main.Note(note_id(i), note_title(i), f"{WORKSPACE}/n{i}.md", 1) for i in range(size)]
    store = open_target(where if kind == "postgres" else os.path.join(where, f"search-{size}.db"), seed)
    rows = [(search_text(i), stores.fold_title(search_text(i)), note_id(i)) for i in range(size)]
    sql = "UPDATE notes SET body = ?, body_folded = ? WHERE id = ?"
    if kind == "postgres":
        import psycopg

        with psycopg.connect(where, autocommit=False) as conn:
            conn.cursor().executemany(sql.replace("?", "%s"), rows)
        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE notes")  # as autovacuum would, after a bulk load
    else:
        import sqlite3

        conn = sqlite3.connect(os.path.join(where, f"search-{size}.db"), isolation_level=None)
        conn.execute("BEGIN")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as the store's own checkpoint would leave it: searches read the file, not a 100,000-row log
        conn.close()
    return store


SEARCH_COMMON = "meeting"  # a word every search note holds (search_text)
SEARCH_REPEATS = 31  # calls per query whose median is reported
SEARCH_RSS_GROWTH_MB = 10  # goal: a store's RSS grows less than this over its searches of the common word


def rss_mb() -> float:
    """This process's resident set size now, in MB (Linux /proc)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def tool_search(server: frame.Server, workspace: str, query: str, limit: int = 10) -> dict[str, Any]:
    """One notes_search through handle_bytes; its structuredContent."""
    params = {"_meta": main.request_meta({}), "name": "notes_search", "arguments": {"workspaceUri": workspace, "query": query, "limit": limit}}
    raw = server.handle_bytes(encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}), PRINCIPAL)
    result = json.loads(raw or b"{}").get("result", {})
    if result.get("isError") or "structuredContent" not in result:
        raise BenchError(f"notes_search {query!r} answered {str(result)[:200]}")
    return result["structuredContent"]


def p50_ms(call: Callable[[], Any], repeats: int = SEARCH_REPEATS) -> float:
    """The median of `repeats` timed calls, in ms (one untimed call first)."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def old_shape_search(kind: str, store: Any, query: str) -> int:
    """The search as it was before its work was bounded: every row holding the query read with its body, then tested in Python."""
    import title_index

    needle = stores.fold_title(query)
    low, high = title_index.uri_range(main.parse_file_uri(WORKSPACE))
    if kind == "postgres":
        pattern = "%" + needle + "%"
        rows = store.read_with(lambda conn: conn.execute(
            "SELECT id, title, uri, revision, body FROM notes WHERE (uri || '') COLLATE \"C\" >= %s AND (uri || '') COLLATE \"C\" < %s"
            " AND (folded LIKE %s OR body_folded LIKE %s)", (low, high, pattern, pattern), prepare=False).fetchall())
    else:
        rows = store.read_with(lambda conn: conn.execute(
            "SELECT id, title, uri, revision, body FROM notes WHERE rowid IN (SELECT rowid FROM note_search WHERE note_search MATCH ?)"
            " AND uri >= ? AND uri < ?", ('"' + needle + '"', low, high)).fetchall())
    return len(title_index.exact_text(rows, main.parse_file_uri(WORKSPACE), needle, 11))


def run_search(args: argparse.Namespace) -> dict[str, Any]:
    """notes_search p50 of a rare and a common word at 10 and 100,000 notes, per SQL store, beside the unbounded shape; then the folder vaults."""
    import notes_tools  # the opt-in tools this mode measures

    kinds = [kind for kind in args.kinds.split(",") if kind in SEARCH_KINDS] or ["sqlite"]
    figures: dict[str, Any] = {}
    cluster = None
    if "postgres" in kinds:
        import postgres_cluster

        reason = postgres_cluster.missing()
        if reason is not None:
            print(f"PostgreSQL skipped: {reason}")
            kinds.remove("postgres")
        else:
            cluster = postgres_cluster.Cluster()
            cluster.start()
    section(f"notes_search p50 (ms) in-process: a word one note holds, and {SEARCH_COMMON!r}, which every note holds; "
            "goal at 100,000: common <= 5x rare, RSS growth < 10 MB")
    try:
        with tempfile.TemporaryDirectory(prefix="notes-bench-search-") as directory:
            for kind in kinds:
                for size in SEARCH_SIZES:
                    store = search_store(kind, size, cluster.new_database() if kind == "postgres" else directory)
                    try:
                        server = server_over(store, PRINCIPAL)
                        notes_tools.install(server)
                        rare = p50_ms(lambda: tool_search(server, WORKSPACE, search_word(size // 2)))
                        before = rss_mb()
                        common = p50_ms(lambda: tool_search(server, WORKSPACE, SEARCH_COMMON))
                        growth = rss_mb() - before
                        stopped = tool_search(server, WORKSPACE, SEARCH_COMMON)["stoppedEarly"]
                        old_rare = p50_ms(lambda: old_shape_search(kind, store, search_word(size // 2)), 5)
                        old_common = p50_ms(lambda: old_shape_search(kind, store, SEARCH_COMMON), 3)
                    finally:
                        store.close()
                    figures[f"{kind}-{size}"] = {"rare": rare, "common": common, "growth": growth, "old_rare": old_rare, "old_common": old_common}
                    row(f"{kind}, {size:,} notes: rare / common p50", f"{rare:.2f} / {common:.2f} ms",
                        f"ratio {common / rare:.1f}x, stoppedEarly {stopped}, RSS +{growth:.1f} MB"
                        + (f" {verdict(common <= 5 * rare and growth < SEARCH_RSS_GROWTH_MB)}" if size == SEARCH_SIZES[-1] else ""))
                    row(f"{kind}, {size:,} notes: unbounded shape (before)", f"{old_rare:.2f} / {old_common:.2f} ms",
                        f"ratio {old_common / old_rare:.1f}x: every matching row and body read")
    finally:
        if cluster is not None:
            cluster.destroy()
    figures["folder"] = run_vault_search(args)
    return figures


# ------------------------------------------------------------------ the folder store on generated vaults

VAULT_SIZES = (1_000, 10_000, 100_000)  # notes in a generated vault (--vault-sizes to change)
VAULT_WORDS = 5_000  # distinct ordinary words, Zipf-distributed
VAULT_WORDS_PER_NOTE = 120
VAULT_RSS_GOAL_MB = 60  # goal: the serving process's peak RSS at 10,000 notes
FIRST_SEARCH_GOAL_S = 1.0  # goal: the first search after start-up on an indexed vault

# The planted notes: (path, text, query). Each note must come in the top 5 of its query.
PLANTED: tuple[tuple[str, str, str, str], ...] = (
    ("a tag", "legal/contract-review.md", "---\ntags: [urgent-legal]\n---\n# Contract review\nThe clauses we discussed.\n", "urgent-legal"),
    ("title words", "travel/zanzibar-ferry-timetable.md", "# Zanzibar ferry timetable\nBoats leave at noon and at six.\n",
     "Zanzibar ferry timetable"),
    ("a phrase in another case", "work/budget.md", "# Budget\nThe Quarterly Budget Review is on Friday.\n", '"quarterly budget review"'),
    ("Japanese", "travel/tokyo.md", "# 旅行メモ\n昨日は東京タワーに登りました。\n", "東京タワー"),
    ("two words apart", "finance/trip-costs.md", "# Trip costs\nThe hotel invoice arrived late.\n\nPaid at the office in Lisbon.\n",
     "Lisbon invoice"),
    ("a rare heading word", "ops/db.md", "# Database notes\n## Pgbouncer tuning\npool sizes and timeouts\n", "pgbouncer"),
    ("an exact phrase", "work/falcon.md", "# Project notes\nThe falcon retrospective went well.\n", '"falcon retrospective"'),
    ("a deep title", "a/b/c/d/e/catalogue.md", "# Deep archive catalogue\nshelves and boxes\n", "deep archive catalogue"),
    ("a word in one note", "misc/animals.md", "# Animals\nA quokka smiled at us.\n", "quokka"),
    ("an NFD name", unicodedata.normalize("NFD", "cv/Résumé tips.md"), unicodedata.normalize("NFD", "# Résumé tips\nKeep it short.\n"),
     "résumé tips"),
)
# Queries timed at every size: a rare word, a common word, a phrase, two words far apart.
VAULT_QUERIES = (("rare word", "quokka"), ("common word", "w0001"), ("phrase", '"w0001 w0002"'), ("two words apart", "lisbon invoice"))


def vault_word(k: int) -> str:
    """Ordinary word k (w0000 the most frequent)."""
    return f"w{k:04d}"  # fixed width: no word is a piece of another


def make_vault(root: str, size: int) -> None:
    """A vault of `size` notes: titles, headings, frontmatter, [[links]], tags, Zipf words, CJK and NFD names, and the planted notes."""
    rng = random.Random(size)
    weights = list(itertools.accumulate(1 / (k + 1) for k in range(VAULT_WORDS)))
    words = [vault_word(k) for k in range(VAULT_WORDS)]
    for folder in range(max(1, size // 200)):
        os.makedirs(os.path.join(root, f"f{folder:03d}"), exist_ok=True)
    for i in range(size - len(PLANTED)):
        body = " ".join(rng.choices(words, cum_weights=weights, k=VAULT_WORDS_PER_NOTE))
        if i % 50 == 0:
            title, name = f"会議メモ {i}", f"会議メモ {i}.md"
            body += " 会議の記録と次の予定。"
        elif i % 40 == 0:
            title = unicodedata.normalize("NFD", f"Café notes {i}")
            name = title + ".md"
        else:
            title, name = f"Note {i} {words[rng.randrange(VAULT_WORDS)]}", f"note-{i}.md"
        link = " see [[Zanzibar ferry timetable]]" if i < 7 else f" see [[Note {rng.randrange(size)}]]"
        text = f"---\ntags: [t{i % 30}]\n---\n# {title}\n{body}{link}\n"
        with open(os.path.join(root, f"f{i % max(1, size // 200):03d}", name), "w", encoding="utf-8") as handle:
            handle.write(text)
    for _, path, text, _ in PLANTED:
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as handle:
            handle.write(text)


def vault_worker(spec: str) -> int:
    """A child: open the folder store on a vault (`SIZE:DIR:build|serve`), build or serve its index; one JSON line of figures."""
    import markdown_store
    import notes_tools
    import sqlite_store
    import text_index

    size, where, phase = spec.split(":")
    root, state = os.path.join(where, "vault"), os.path.join(where, "state")
    start = time.perf_counter()
    nonces = sqlite_store.open_ledger(os.path.join(state, "nonces.db"), clock=time.time)
    store = markdown_store.MarkdownNotesStore([root], nonces, text_index_path=text_index.index_path(os.path.join(state, "nonces.db")))
    workspace = main.format_file_uri(main.parse_file_uri("file://" + root))
    policy = main.AuthorizationPolicy({PRINCIPAL: [workspace]})
    server = frame.notes_server(keys=[secrets.token_bytes(32)], notes=store, policy=policy, log=lambda line: None)
    notes_tools.install(server)
    figures: dict[str, Any] = {}
    tool_search(server, workspace, "quokka")
    figures["first_s"] = time.perf_counter() - start
    if phase == "build":
        figures["index_bytes"] = store.text_index.size_bytes()
    else:
        figures["p50"] = {label: p50_ms(lambda q=query: tool_search(server, workspace, q)) for label, query in VAULT_QUERIES}
        quality = {}
        for label, path, _, query in PLANTED:
            hits = [hit["noteId"] for hit in tool_search(server, workspace, query, 5)["results"]]
            quality[label] = unicodedata.normalize("NFC", path) in [unicodedata.normalize("NFC", urllib.parse.unquote(h)) for h in hits]
        figures["quality"] = quality
        # VmHWM, not ru_maxrss: Linux keeps the parent's peak across exec in the latter.
        with open("/proc/self/status") as handle:
            figures["rss_mb"] = next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1000
    store.close()
    print(json.dumps(figures))
    return 0


def run_vault_search(args: argparse.Namespace) -> dict[int, Any]:
    """The folder store on generated vaults: index build time and size, first search after start-up, p50s against 1,000, quality."""
    sizes = [int(n) for n in args.vault_sizes.split(",") if n]
    section("folder store, generated vaults (Zipf words, frontmatter, links, tags, CJK and NFD names): notes_search in-process")
    figures: dict[int, Any] = {}
    with tempfile.TemporaryDirectory(prefix="notes-bench-vault-") as directory:
        for size in sizes:
            where = os.path.join(directory, str(size))
            os.makedirs(os.path.join(where, "vault"))
            os.makedirs(os.path.join(where, "state"))
            made = time.perf_counter()
            make_vault(os.path.join(where, "vault"), size)
            made = time.perf_counter() - made
            runs = {}
            for phase in ("build", "serve"):
                out = subprocess.run([sys.executable, __file__, "--vault-worker", f"{size}:{where}:{phase}"], capture_output=True, check=False)
                if out.returncode != 0:
                    raise BenchError(f"vault worker {size} {phase}: {out.stderr.decode()[-400:]}")
                runs[phase] = json.loads(out.stdout.decode().strip().splitlines()[-1])
            figures[size] = {"build_s": runs["build"]["first_s"], "index_bytes": runs["build"]["index_bytes"], **runs["serve"]}
            shutil.rmtree(where, ignore_errors=True)
            row(f"{size:,} notes: index built (first search)", f"{figures[size]['build_s']:.1f} s",
                f"{figures[size]['index_bytes'] / 1e6:.1f} MB on disk; vault written in {made:.1f} s")
            row(f"{size:,} notes: first search after start-up, indexed", f"{figures[size]['first_s']:.2f} s",
                verdict(figures[size]["first_s"] <= FIRST_SEARCH_GOAL_S))
            row(f"{size:,} notes: peak RSS of the serving process", f"{figures[size]['rss_mb']:.0f} MB",
                verdict(figures[size]["rss_mb"] <= VAULT_RSS_GOAL_MB) if size == 10_000 else "")
            for label, _ in VAULT_QUERIES:
                ms = figures[size]["p50"][label]
                base = figures[sizes[0]]["p50"][label]
                row(f"{size:,} notes: p50 {label}", f"{ms:.2f} ms", f"{ms / base:.2f}x of {sizes[0]:,} {verdict(ms <= 2 * base)}")
    section("quality: is each planted note in the top 5 of its query?")
    print(f"  {'query':28}" + "".join(f"{size:>10,}" for size in sizes))
    for label, _, _, query in PLANTED:
        print(f"  {label + ' (' + query + ')':28.28}" + "".join(f"{'yes' if figures[size]['quality'][label] else 'NO':>10}" for size in sizes))
    print(f"  {'in the top 5':28}" + "".join(f"{sum(figures[size]['quality'].values()):>7}/10" for size in sizes))
    return figures


def run_sqlite(args: argparse.Namespace) -> dict[str, Any]:
    """Round trips/s over the SQLite store: one process, then two sharing one file."""
    notes = args.notes
    section(f"SQLite store (code/sqlite_store.py), in-process handle_bytes; {notes:,} notes seeded, not put back")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="notes-bench-db-") as directory:
        for processes in (1, 2):
            rate, count, elapsed = sqlite_rate(directory, processes, notes, args.seconds)
            label = "one process" if processes == 1 else "two processes, one database file"
            row(f"{label}: round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s (all processes together)")
            figures[processes] = rate
    return figures


CHECKPOINT_TURNS = 6  # --mode checkpoint: slices the measuring time is cut into, the two stores taking turns


def run_checkpoint(args: argparse.Namespace) -> dict[str, float]:
    """Accepts/s over two SQLite stores, with and without the checkpoint after each consume, in turns; their ratio."""
    import sqlite_store

    clock = Ticker()
    originals = {note.id: note for note in bench_notes(args.notes)}
    with tempfile.TemporaryDirectory(prefix="notes-bench-checkpoint-", dir=args.dir) as directory:
        section(f"SQLite accepts (first call + accept, in-process), {args.notes:,} notes, each deleted note put back off the clock")
        row("database folder", directory)
        runs: dict[bool, list[Any]] = {}
        for checkpoint in (True, False):
            store = sqlite_store.open_store(
                os.path.join(directory, f"checkpoint-{checkpoint}.db"), clock=clock, seed_notes=list(originals.values())
            )
            store.checkpoint_each_consume = checkpoint
            runs[checkpoint] = [store, server_over(store, PRINCIPAL, clock=clock), 0, 0.0]
        counter = itertools.count()
        try:
            for turn in range(CHECKPOINT_TURNS + 1):  # the first turn warms up and is not counted
                for checkpoint, run in runs.items():
                    store, server, _, _ = run
                    done, elapsed = 0, 0.0
                    while elapsed < args.seconds / (2 * CHECKPOINT_TURNS):
                        i = next(counter) % args.notes
                        start = time.perf_counter()
                        round_trip(lambda raw: server.handle_bytes(raw, PRINCIPAL) or b"", i)
                        elapsed += time.perf_counter() - start
                        store.put(originals[note_id(i)])  # off the clock: the store keeps its size
                        clock.now += 1.0  # ~300 unexpired confirmations at any time, far below the bound
                        done += 1
                    if turn:
                        run[2] += done
                        run[3] += elapsed
        finally:
            for store, *_ in runs.values():
                store.close()
    rates = {checkpoint: run[2] / run[3] for checkpoint, run in runs.items()}
    for checkpoint, label in ((True, "with the checkpoint (as served)"), (False, "without it")):
        row(f"{label}: accepts/s", f"{rates[checkpoint]:,.0f}", f"{runs[checkpoint][2]:,} in {runs[checkpoint][3]:.1f} s")
    ratio = rates[True] / rates[False]
    added_ms = 1000 / rates[True] - 1000 / rates[False]
    row("ratio, with / without", f"{ratio:.2f}", f"{added_ms:+.2f} ms an accept")
    return {"with": rates[True], "without": rates[False], "ratio": ratio}


# ---------------------------------------------------------------------------------- scaling

SCALING_SIZES = (10, 1_000, 10_000, 100_000)
SCALING_KINDS = ("memory", "sqlite", "postgres", "folder")
SCALING_MIN_ROUND_TRIPS = 3  # even a slow store gets this many timed round trips
SCALING_WORKSPACES = 1_000  # the shared-server row: SCALING_SIZES[-1] notes over this many workspaces
SCALING_PER_FOLDER = 100  # notes per sub-folder (the workspace's sub-folders, or each caller's workspace)
SCALING_TTL_SECONDS = 2.0  # short, so declined confirmations expire soon; past the replay bound the client waits (ReplayBoundReached)
SCALING_TARGET_SHARE = 0.50  # goal: at 100,000 notes a store keeps this share of its own 10-note rate
SCALING_TURNS = 6  # slices each server's measuring time is cut into, the servers of one store taking turns


def scaling_notes(size: int, workspaces: int) -> tuple[list[main.Note], str, Callable[[int], int]]:
    """`size` notes (unique titles) and the caller's workspace: (notes, workspace URI, the k-th note the caller asks for).

    One workspace: the notes sit in sub-folders of SCALING_PER_FOLDER. Several: note i is
    in workspace i % workspaces; the caller owns workspace 7 and asks only for its notes
    (each of which has a twin in the look-alike folder `w0007-evil`).
    """
    if workspaces == 1:
        notes = [main.Note(note_id(i), note_title(i), f"{WORKSPACE}/d{i // SCALING_PER_FOLDER:04d}/n{i}.md") for i in range(size)]
        return notes, WORKSPACE, lambda k: (k * 7919) % size  # spread over the store, not only its first notes
    notes = [main.Note(note_id(i), note_title(i), f"file:///bench/w{i % workspaces:04d}/n{i}.md") for i in range(size)]
    mine = list(range(7, size, workspaces))
    # A twin of each of the caller's notes in the look-alike folder: a lookup that let it
    # in would offer two choices, and decline_round_trip would stop the run.
    notes += [main.Note(f"evil-{i}", note_title(i), f"file:///bench/w0007-evil/n{i}.md") for i in mine]
    return notes, "file:///bench/w0007", lambda k: mine[(k * 7919) % len(mine)]


class ConfigTooLarge(BenchError):
    """The store's notes do not fit in a config file the server would read (the memory store is seeded from it)."""


def scaling_config(directory: str, kind: str, notes: list[main.Note], workspace: str, cluster: Any) -> tuple[str, str]:
    """Prepare a `kind` store holding `notes` and a config serving it over stdio: (config path, the workspace to ask in)."""
    tag = f"{kind}-{len(notes)}-{secrets.token_hex(4)}"
    config: dict[str, Any] = {
        "principals": {PRINCIPAL: {"token": TOKEN, "workspaces": [workspace]}},
        "stdioPrincipal": PRINCIPAL,
        "keys": [secrets.token_hex(32)],
        "stateTtlSeconds": SCALING_TTL_SECONDS,
    }
    if kind == "memory":
        config["notes"] = [{"id": n.id, "title": n.title, "uri": n.uri} for n in notes]
    elif kind == "sqlite":
        import sqlite_store

        config["db"] = os.path.join(directory, f"{tag}.db")
        sqlite_store.open_store(config["db"], clock=time.time, seed_notes=notes).close()
    elif kind == "postgres":
        import postgres_store

        config["db"] = cluster.new_database()
        postgres_store.open_store(config["db"], clock=time.time, seed_notes=notes).close()
    else:  # a folder of Markdown files: the workspace's path below file:///bench, as real folders
        folder = os.path.join(directory, tag)
        for note in notes:
            path = os.path.join(folder, *main.parse_file_uri(note.uri)[1:])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(f"# {note.title}\n\nbody\n")
        config["principals"][PRINCIPAL] = {"token": TOKEN, "workspaces": [], "notesDirs": [folder]}
        config["db"] = os.path.join(directory, f"{tag}-nonces.db")
        workspace = main.format_file_uri(tuple(p for p in os.path.realpath(folder).split("/") if p) + main.parse_file_uri(workspace)[1:])
    text = json.dumps(config)
    if len(text.encode()) > config_file.MAX_CONFIG_BYTES:
        raise ConfigTooLarge(f"{kind}: a config of {len(notes):,} notes is {len(text.encode()):,} bytes, over the {config_file.MAX_CONFIG_BYTES:,} a server reads")
    path = os.path.join(directory, f"{tag}.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path, workspace


class ReplayBoundReached(BenchError):
    """The server refused a decline with the principal's replay bound: wait for the held confirmations to expire."""


def decline_round_trip(send: Callable[[bytes], bytes], workspace: str, title: str, request_id: int) -> None:
    """first call -> the one-choice form -> decline -> complete, over `send`; BenchError on any other answer."""
    params: dict[str, Any] = {"_meta": META, "name": main.TOOL_NAME, "arguments": {"workspaceUri": workspace, "title": title}}
    first = json.loads(send(encode({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})))
    result = first.get("result") or {}
    if result.get("resultType") != "input_required":
        raise BenchError(f"first call for {title!r}: expected input_required, got {str(first)[:300]}")
    options = result["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"][main.CHOICE_FIELD]["oneOf"]
    if len(options) != 1:
        raise BenchError(f"first call for {title!r}: expected one choice, got {len(options)}")
    retry = dict(params, requestState=result["requestState"], inputResponses={main.INPUT_KEY: {"action": "decline"}})
    final = json.loads(send(encode({"jsonrpc": "2.0", "id": request_id + 1, "method": "tools/call", "params": retry})))
    if "Too many confirmations" in str(final.get("result")):
        raise ReplayBoundReached(f"decline for {title!r}: the replay bound")
    if (final.get("result") or {}).get("structuredContent") != {"deleted": False, "reason": "declined"}:
        raise BenchError(f"decline for {title!r}: expected declined, got {str(final)[:300]}")


class ScalingServer:
    """One stdio server on a scaling config, and what was measured on it so far."""

    def __init__(self, config: str, workspace: str, pick: Callable[[int], int]) -> None:
        self.server = StdioServer(server_argv("stdio", config))
        self.workspace, self.pick = workspace, pick
        self.done, self.elapsed = 0, 0.0
        self.server.send(DISCOVER, "server/discover")  # start-up is off the clock; the first lookup is not
        start = time.perf_counter()
        decline_round_trip(self.server.send, workspace, note_title(pick(0)), 1)
        self.first_ms = (time.perf_counter() - start) * 1000
        # The start-up report's store line: for a folder, how its index learns of changes.
        self.store_line = next((line.split("notes store: ", 1)[1] for line in self.server.drain.lines if "notes store: " in line), "")

    def run(self, seconds: float) -> None:
        """Round trips for about `seconds` more (at least SCALING_MIN_ROUND_TRIPS in all)."""
        budget = self.elapsed + seconds
        while self.elapsed < budget or self.done < SCALING_MIN_ROUND_TRIPS:
            start = time.perf_counter()
            try:
                decline_round_trip(self.server.send, self.workspace, note_title(self.pick(self.done + 1)), 2 * self.done + 3)
            except ReplayBoundReached:
                # Faster than MAX_REPLAY_PER_PRINCIPAL per state lifetime: this round trip is not
                # counted, and the client waits, off the clock, for the held ones to expire.
                time.sleep(SCALING_TTL_SECONDS)
                continue
            self.elapsed += time.perf_counter() - start
            self.done += 1

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def close(self) -> None:
        self.server.close()


def scaling_rate(config: str, workspace: str, pick: Callable[[int], int], seconds: float) -> tuple[float, float]:
    """(round trips/s over stdio, ms of the first tools/call) for a server started on `config`."""
    measured = ScalingServer(config, workspace, pick)
    try:
        measured.run(seconds)
        return measured.rate, measured.first_ms
    finally:
        measured.close()


def scaling_in_turns(servers: list[ScalingServer], seconds: float, turns: int = SCALING_TURNS) -> None:
    """Measure every server for `seconds` in all, in `turns` alternating slices: a load that comes and goes hits each alike."""
    for _ in range(turns):
        for measured in servers:
            measured.run(seconds / turns)


def folder_index_bytes_per_note(directory: str, size: int) -> tuple[float, float]:
    """(bytes per note the folder index holds, seconds to build it) for `size` notes in sub-folders, in process."""
    import markdown_store
    import sqlite_store

    notes, workspace, _ = scaling_notes(size, 1)
    config, uri = scaling_config(directory, "folder", notes, workspace, None)
    with open(config, encoding="utf-8") as handle:
        folder = json.load(handle)["principals"][PRINCIPAL]["notesDirs"][0]
    nonces = sqlite_store.open_ledger(os.path.join(directory, "index-memory.db"), clock=time.time)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        store = markdown_store.MarkdownNotesStore([folder], nonces)
        start = time.perf_counter()
        store.candidates(main.parse_file_uri(uri), note_title(0))
        took = time.perf_counter() - start
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    store.close()
    return held / size, took


def run_scaling(args: argparse.Namespace) -> dict[str, Any]:
    """Round trips/s over stdio as the store grows, four stores, plus one shared server of many workspaces."""
    import postgres_cluster

    kinds = [kind for kind in SCALING_KINDS if kind in args.kinds.split(",")]
    missing = postgres_cluster.missing() if "postgres" in kinds else None
    if missing is not None:
        kinds.remove("postgres")
        print(f"  PostgreSQL left out: {missing}")
    section("How the cost grows with the notes: round trips/s over stdio (first call, form, decline, complete)")
    print(f"  {'notes':>26}" + "".join(f"{kind:>12}" for kind in kinds))
    table: dict[str, dict[str, float]] = {}
    first_ms: dict[str, dict[str, float]] = {}
    store_lines: dict[str, str] = {}
    left_out: list[str] = []
    cluster = postgres_cluster.Cluster(durable=True) if "postgres" in kinds else None
    try:
        if cluster is not None:
            cluster.start()
        with tempfile.TemporaryDirectory(prefix="notes-bench-scale-") as directory:
            rows = [(f"{size:,}", size, 1) for size in SCALING_SIZES]
            rows.append((f"{SCALING_SIZES[-1]:,} in {SCALING_WORKSPACES:,} workspaces", SCALING_SIZES[-1], SCALING_WORKSPACES))
            layouts = {label: scaling_notes(size, workspaces) for label, size, workspaces in rows}
            for label, _, _ in rows:
                table[label], first_ms[label] = {}, {}
            for kind in kinds:
                # One server per row, all alive at once, measured in turns (this machine's load
                # varies by the second; a figure per row taken minutes apart would compare loads).
                servers: dict[str, ScalingServer] = {}
                try:
                    for label, _, _ in rows:
                        notes, workspace, pick = layouts[label]
                        try:
                            config, uri = scaling_config(directory, kind, notes, workspace, cluster)
                        except ConfigTooLarge as exc:
                            left_out.append(f"{label} notes, {exc}")
                            continue
                        servers[label] = ScalingServer(config, uri, pick)
                    scaling_in_turns(list(servers.values()), args.seconds)
                    for label, measured in servers.items():
                        table[label][kind], first_ms[label][kind] = measured.rate, measured.first_ms
                        if kind == "folder":
                            store_lines[label] = measured.store_line
                finally:
                    for measured in servers.values():
                        measured.close()
            for label, _, _ in rows:
                print(f"  {label:>26}" + "".join(f"{table[label][kind]:>12,.0f}" if kind in table[label] else f"{'-':>12}" for kind in kinds), flush=True)
            for reason in left_out:
                print(f"  - not measured: {reason}")
            small, large = f"{SCALING_SIZES[0]:,}", f"{SCALING_SIZES[-1]:,}"
            shares = "  ".join(f"{kind} {table[large][kind] / table[small][kind]:.0%}" for kind in kinds if kind in table[large])
            # The lesson's memory store may scan: it is not held to the goal, only shown beside the others.
            ok = all(table[large][kind] >= SCALING_TARGET_SHARE * table[small][kind] for kind in kinds if kind != "memory")
            row(f"share of the 10-note rate kept at {large}", shares, f"goal >= {SCALING_TARGET_SHARE:.0%}: {verdict(ok)}")
            for label in (small, large):
                row(f"first tools/call after start-up, {label} notes (ms)", "  ".join(f"{k} {first_ms[label][k]:,.0f}" for k in kinds if k in first_ms[label]))
            if "folder" not in kinds:
                return {"rates": table, "first_ms": first_ms}
            modes = sorted({mode for label, _, _ in rows for mode in [store_lines[label].rpartition("; ")[2]]})
            row("folder index, as each server's start-up report says", " / ".join(modes), f"{len(rows)} servers")
            per_note, built = folder_index_bytes_per_note(directory, SCALING_SIZES[-1])
            row(f"folder index: memory per note ({large} notes, tracemalloc)", f"{per_note:,.0f} bytes", f"built in {built:.1f} s")
    finally:
        if cluster is not None:
            cluster.destroy()
    return {"rates": table, "first_ms": first_ms}


# ---------------------------------------------------------------------------------- latency


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    """HTTP p50/p99 per request and round trips/s at 1, 4 and 16 keep-alive clients."""
    per_server = min(args.notes, main.MAX_REPLAY_PER_PRINCIPAL)
    section(f"HTTP latency by concurrency: keep-alive clients, one server ({per_server:,} notes per server)")
    print(f"  {'clients':>8}{'round trips/s':>16}{'p50 ms':>10}{'p99 ms':>10}{'requests':>10}")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="notes-bench-") as directory:
        config = write_config(directory, per_server)
        for clients in (1, 4, 16):
            result = transport_rate("http", server_argv("http", config), per_server, clients, args.seconds)
            print(f"  {clients:>8}{result['rate']:>16,.0f}{result['p50_ms']:>10.2f}{result['p99_ms']:>10.2f}{result['requests']:>10,}", flush=True)
            figures[clients] = result
    return figures


# ---------------------------------------------------------------------------------- plots
#
# `--record FILE` adds a run's figures to a small JSON file; `--mode plot` draws the two
# plots of the README and docs/benchmarks.md from it as SVG, written here by hand (no
# plotting library), so the same figures always give the same bytes.

ROOT = os.path.dirname(CODE)
RECORDED_FIGURES = os.path.join(ROOT, "docs", "img", "bench-figures.json")
PLOTS = os.path.join(ROOT, "docs", "img")
STORE_NAMES = {"memory": "memory (the lesson's)", "sqlite": "SQLite", "postgres": "PostgreSQL", "folder": "folder"}
STORE_COLOURS = {"memory": "#888888", "sqlite": "#0072b2", "postgres": "#009e73", "folder": "#d55e00"}
FLOOR_COLOUR, SERVER_COLOUR, GOAL_COLOUR = "#9ecae1", "#08519c", "#cc0000"


def speed_runs(measured: dict[str, Any], kinds: list[str]) -> list[dict[str, Any]]:
    """One record per transport of a run_transports() result: the three rates, rounded to whole round trips/s."""
    return [
        {"transport": kind, **{part: round(measured[kind][part]["rate"]) for part in ("ceiling", "floor", "server")}}
        for kind in kinds
    ]


def scaling_rates(scaled: dict[str, Any]) -> dict[str, Any]:
    """A run_scaling() result as recorded: the note counts, and per store its rate at each (None: not measured)."""
    rows = [scaled["rates"][f"{size:,}"] for size in SCALING_SIZES]
    kinds = [kind for kind in SCALING_KINDS if any(kind in row for row in rows)]
    return {"notes": list(SCALING_SIZES), "rates": {kind: [round(row[kind]) if kind in row else None for row in rows] for kind in kinds}}


def record(path: str, runs: list[dict[str, Any]], scaling: dict[str, Any] | None, command: str) -> None:
    """Append `runs` to the file's speed runs and replace its scaling figures with `scaling` (if given), each with `command`."""
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


def svg(width: int, height: int, title: str, body: list[str]) -> str:
    """A whole SVG document: a white page, its title for screen readers, then `body`."""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{html.escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        *body,
        "</svg>",
        "",
    ])  # fmt: skip


def text(x: float, y: float, words: str, anchor: str = "start", extra: str = "") -> str:
    """One SVG text element at (x, y)."""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{html.escape(words)}</text>'


def speed_svg(runs: list[dict[str, Any]]) -> str:
    """Per run, the floor's and the server's round trips/s as a share of the canned responder's, and the goal."""
    left, right, top, row_height = 110, 590, 76, 28
    height = top + row_height * len(runs) + 44
    x = lambda share: left + (right - left) * share  # noqa: E731 - share 0..1 to a pixel column
    body = [
        f'<rect x="{left}" y="34" width="12" height="10" fill="{FLOOR_COLOUR}"/>',
        text(left + 16, 43, "the floor: canned + sign, verify, claim"),
        f'<rect x="{left + 290}" y="34" width="12" height="10" fill="{SERVER_COLOUR}"/>',
        text(left + 306, 43, "the server (serve.py)"),
    ]
    for tick in range(0, 101, 20):
        body.append(f'<line x1="{x(tick / 100):.1f}" y1="{top - 6}" x2="{x(tick / 100):.1f}" y2="{height - 38}" stroke="#dddddd"/>')
        body.append(text(x(tick / 100), height - 24, f"{tick} %", "middle"))
    counts: dict[str, int] = {}
    for index, run in enumerate(runs):
        counts[run["transport"]] = counts.get(run["transport"], 0) + 1
        y = top + index * row_height
        label = f"{'HTTP' if run['transport'] == 'http' else run['transport']}, run {counts[run['transport']]}"
        body.append(text(left - 8, y + 15, label, "end"))
        for offset, part, colour in ((0, "floor", FLOOR_COLOUR), (11, "server", SERVER_COLOUR)):
            share = run[part] / run["ceiling"]
            body.append(f'<rect class="{part}" x="{left}" y="{y + offset}" width="{x(share) - left:.1f}" height="10" fill="{colour}"/>')
            body.append(text(x(share) + 4, y + offset + 9, f"{share:.0%}".replace("%", " %"), extra=' font-size="10"'))
    goal = x(TARGET_CEILING_SHARE)
    body.append(f'<line x1="{goal:.1f}" y1="{top - 6}" x2="{goal:.1f}" y2="{height - 38}" stroke="{GOAL_COLOUR}" stroke-dasharray="5,3"/>')
    body.append(text(goal, top - 10, f"goal {TARGET_CEILING_SHARE:.0%}".replace("%", " %"), "middle", f' fill="{GOAL_COLOUR}"'))
    body.append(text((left + right) / 2, height - 6, "round trips/s as a share of the canned responder's (same client, same run)", "middle"))
    return svg(640, height, "Round trips/s beside a canned responder", body)


def scaling_svg(scaling: dict[str, Any]) -> str:
    """Per store, round trips/s over stdio at each note count as a share of its own 10-note rate, and the goal."""
    notes, rates = scaling["notes"], scaling["rates"]
    shares = {kind: [None if rate is None else rate / values[0] for rate in values] for kind, values in rates.items()}
    top_share = max(1.0, max(share for values in shares.values() for share in values if share is not None))
    top_share = -(-top_share * 10 // 1) / 10  # up to the next 10 %
    left, right, top, bottom = 70, 420, 40, 280
    x = lambda index: left + (right - left) * index / (len(notes) - 1)  # noqa: E731 - note counts, evenly spaced
    y = lambda share: bottom - (bottom - top) * share / top_share  # noqa: E731
    body = []
    for tick in range(0, int(top_share * 100) + 1, 20):
        body.append(f'<line x1="{left}" y1="{y(tick / 100):.1f}" x2="{right}" y2="{y(tick / 100):.1f}" stroke="#dddddd"/>')
        body.append(text(left - 6, y(tick / 100) + 4, f"{tick} %", "end"))
    for index, count in enumerate(notes):
        body.append(text(x(index), bottom + 18, f"{count:,}", "middle"))
    body.append(text((left + right) / 2, bottom + 36, "notes in the workspace", "middle"))
    goal = y(SCALING_TARGET_SHARE)
    body.append(f'<line x1="{left}" y1="{goal:.1f}" x2="{right}" y2="{goal:.1f}" stroke="{GOAL_COLOUR}" stroke-dasharray="5,3"/>')
    body.append(text(right, goal - 5, f"goal at {notes[-1]:,}: {SCALING_TARGET_SHARE:.0%}".replace("%", " %"), "end", f' fill="{GOAL_COLOUR}"'))
    for place, (kind, values) in enumerate(shares.items()):
        colour = STORE_COLOURS.get(kind, "#000000")
        points = [(x(index), y(share)) for index, share in enumerate(values) if share is not None]
        dash = ' stroke-dasharray="2,3"' if kind == "memory" else ""
        body.append(f'<polyline class="store" points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        body += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in points]
        last = max(index for index, share in enumerate(values) if share is not None)
        kept = f"{values[last]:.0%}".replace("%", " %") + f" at {notes[last]:,}"
        legend_y = top + 10 + place * 50
        body.append(f'<line x1="440" y1="{legend_y - 4}" x2="462" y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"{dash}/>')
        body.append(text(468, legend_y, STORE_NAMES.get(kind, kind), extra=' font-weight="bold"'))
        body.append(text(468, legend_y + 15, f"keeps {kept}"))
        if last < len(notes) - 1:
            body.append(text(468, legend_y + 30, f"not served at {notes[last + 1]:,}"))
    body.append(text(14, (top + bottom) / 2, "share of its 10-note rate", "middle", f' transform="rotate(-90 14 {(top + bottom) / 2:.0f})"'))
    return svg(640, 330, "Round trips/s over stdio as the notes grow", body)


def plot(figures_path: str, out: str) -> list[str]:
    """Write speed.svg and scaling.svg into `out` from the recorded figures; the paths written."""
    with open(figures_path, encoding="utf-8") as handle:
        figures = json.load(handle)
    written = []
    for name, draw, key in (("speed.svg", speed_svg, "speed"), ("scaling.svg", scaling_svg, "scaling")):
        if figures.get(key):
            path = os.path.join(out, name)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(draw(figures[key]))
            written.append(path)
    return written


# ---------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description="Benchmark the notes MCP server (a script, not a test).",
        epilog=(
            "Modes with their own options, first on the line (each has its own --help): "
            "--mode idle [--seconds N] [--idle N]: HTTP while 1,000 idle connections are held; "
            "--mode flood [--seconds N] [--connections N]: a client's p50/p99 while 1,024 connections send only CRLFs; "
            "--mode readahead [--connections N]: server memory while 4,000 connections send ahead, never read; "
            "--mode guess [--seconds N] [--addresses N]: wrong tokens answered per second while a right token is served."
        ),
    )
    parser.add_argument(
        "--mode",
        choices=["inprocess", "stdio", "http", "sqlite", "checkpoint", "postgres", "scaling", "search", "latency",
                 "index-memory", "rename-loop", "index-rebuild", "startup", "plot", "all"],
        default="all",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per throughput figure (default 5)")
    parser.add_argument("--notes", type=int, default=1000, help="notes in the workspace (default 1000)")
    parser.add_argument("--flood", type=int, default=100_000, help="confirmations in the replay flood (default 100000)")
    parser.add_argument("--dir", help="--mode checkpoint: the folder its databases are made in (default: the system's temporary folder)")
    parser.add_argument("--kinds", default=",".join(SCALING_KINDS), help="--mode scaling: the stores, comma-separated (default all)")
    parser.add_argument("--profile", action="store_true", help="always print the cProfile of in-process round trips")
    parser.add_argument("--record", metavar="FILE", help="--mode stdio, http or scaling: add this run's figures to FILE (JSON)")
    parser.add_argument("--figures", metavar="FILE", default=RECORDED_FIGURES, help="--mode plot: the recorded figures (default docs/img/bench-figures.json)")
    parser.add_argument("--out", metavar="DIR", default=PLOTS, help="--mode plot: where speed.svg and scaling.svg go (default docs/img)")
    parser.add_argument("--starts", type=int, default=10, help="--mode startup: process starts per figure (default 10)")
    parser.add_argument("--against", metavar="REF", default="main", help="--mode startup: the git ref measured beside this tree (default main)")
    parser.add_argument("--store-worker", metavar="SPEC", help=argparse.SUPPRESS)  # a child of --mode sqlite/postgres
    parser.add_argument("--vault-worker", metavar="SPEC", help=argparse.SUPPRESS)  # a child of --mode search
    parser.add_argument("--vault-sizes", default=",".join(map(str, VAULT_SIZES)), help="--mode search: notes in each generated vault")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.notes < 1 or args.flood < 1:
        parser.error("--seconds, --notes and --flood must be positive")
    return args


def machine() -> str:
    """CPU count, Python version and platform, for the report header."""
    return f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]} on {sys.platform}"


def run(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and print the report; 1 if a round trip misbehaved."""
    args = parse_args(argv)
    if args.store_worker:
        return store_worker(args.store_worker)
    if args.vault_worker:
        return vault_worker(args.vault_worker)
    if args.mode == "plot":
        for path in plot(args.figures, args.out):
            print(path)
        return 0
    print(f"notes MCP server benchmark, protocol {main.PROTOCOL_VERSION}; {machine()}")
    try:
        if args.mode in ("inprocess", "all"):
            run_inprocess(args)
        kinds = ["stdio", "http"] if args.mode == "all" else [args.mode] if args.mode in ("stdio", "http") else []
        if kinds:
            measured = run_transports(args, kinds)
            if args.record:
                record(args.record, speed_runs(measured, kinds), None, " ".join(["python3 code/scripts/bench.py", *(argv or sys.argv[1:])]))
        if args.mode == "sqlite":
            run_sqlite(args)
        if args.mode == "checkpoint":
            run_checkpoint(args)
        if args.mode == "postgres":
            run_postgres(args)
        if args.mode == "scaling":
            scaled = run_scaling(args)
            if args.record:
                record(args.record, [], scaling_rates(scaled), " ".join(["python3 code/scripts/bench.py", *(argv or sys.argv[1:])]))
        if args.mode == "search":
            run_search(args)
        if args.mode == "latency":
            run_latency(args)
        if args.mode == "index-memory":
            run_index_memory(args)
        if args.mode == "rename-loop":
            run_rename_loop(args)
        if args.mode == "startup":
            run_startup(args)
        if args.mode == "index-rebuild":
            run_index_rebuild(args)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; every server this run started is stopped", file=sys.stderr)
        return 130
    finally:
        stop_all()
    return 0


# =====================================================================================
# --mode idle: the HTTP engine (code/http_server.py) while another process holds
# IDLE_CONNECTIONS open (most silent, some trickling a header byte, each reopened when
# dropped). Self-contained: its own command line, server and clients.
#
#     python3 code/scripts/bench.py --mode idle [--seconds N] [--idle N]
# =====================================================================================

IDLE_CONNECTIONS = 1000  # held by the attacking process
IDLE_TRICKLING = 100  # of which this many send one header byte every IDLE_TRICKLE_SECONDS
IDLE_TRICKLE_SECONDS = 1.0
IDLE_TARGET_P99_MS = 250.0  # the active client's p99 latency while the connections are held

# The server: an engine with a trivial app, in its own process; prints its port.
_IDLE_SERVER = """
import resource, signal, sys, threading
sys.path.insert(0, sys.argv[1])
import http_server
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
app = lambda request: http_server.Response(200, [("Content-Type", "application/json")], b'{"ok":true}')
server = http_server.HttpServer(app, "127.0.0.1", 0, body_limit=65536)
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
print(server.address[1], flush=True)
server.serve_forever()
"""

# The attacker: holds N connections without a token, reopening each one the server drops.
_IDLE_HOLDER = """
import resource, selectors, socket, sys, time
port, total, trickling, pause = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, total + 256)), hard))
head = b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Slow: " + b"a" * 100000
sel = selectors.DefaultSelector()
socks, sent, reopened = {}, {}, 0
def open_one(i):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    socks[i], sent[i] = s, 0
    sel.register(s, selectors.EVENT_READ, i)
for i in range(total):
    open_one(i)
print("ready", flush=True)
next_trickle = time.monotonic()
while True:
    for key, _ in sel.select(0.1):
        i = key.data
        try:
            data = key.fileobj.recv(65536)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj); key.fileobj.close(); open_one(i); reopened += 1
    if time.monotonic() >= next_trickle:
        next_trickle += pause
        for i in range(trickling):
            try:
                socks[i].send(head[sent[i]:sent[i] + 1]); sent[i] += 1
            except OSError:
                pass
        print(f"reopened {reopened}", flush=True)
"""


def idle_percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of `samples` (ms)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def run_idle(argv: list[str]) -> int:
    """`--mode idle`: an active client's success and latency while 1,000 idle connections are held."""
    parser = argparse.ArgumentParser(description="HTTP engine under idle connections (bench.py --mode idle).")
    parser.add_argument("--mode", choices=["idle"], required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time (default 20)")
    parser.add_argument("--idle", type=int, default=IDLE_CONNECTIONS, help=f"idle connections held (default {IDLE_CONNECTIONS})")
    args = parser.parse_args(argv)
    print(f"HTTP engine under idle connections; {machine()}")
    server = subprocess.Popen([sys.executable, "-c", _IDLE_SERVER, CODE], stdout=subprocess.PIPE)
    holder = None
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        holder = subprocess.Popen(
            [sys.executable, "-c", _IDLE_HOLDER, str(port), str(args.idle), str(min(IDLE_TRICKLING, args.idle)), str(IDLE_TRICKLE_SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "ready":
            raise BenchError("the idle holder could not open its connections")
        reopened = ["reopened 0"]
        threading.Thread(target=lambda: [reopened.append(line.strip()) for line in holder.stdout], daemon=True).start()  # type: ignore[union-attr]
        latencies: list[float] = []
        failures = 0
        keep = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN}
        end = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < end:
            # Alternate a keep-alive connection and a fresh one (a fresh one needs a slot).
            conn = keep if i % 2 else http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            started = time.perf_counter()
            try:
                conn.request("POST", "/mcp", body, headers)
                response = conn.getresponse()
                ok = response.status == 200 and response.read() == b'{"ok":true}'
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
            latencies.append((time.perf_counter() - started) * 1000)
            failures += not ok
            if not i % 2:
                conn.close()
            i += 1
            time.sleep(0.01)  # a client's pace, not a flood: the point is the idle connections
        keep.close()
        section(f"{args.idle} idle connections held ({min(IDLE_TRICKLING, args.idle)} trickling), {args.seconds:.0f} s")
        row("requests", f"{len(latencies)}", "half keep-alive, half on a new connection")
        row("succeeded", f"{len(latencies) - failures}", verdict(failures == 0) + " target: all")
        p50, p99 = idle_percentile(latencies, 0.50), idle_percentile(latencies, 0.99)
        row("latency p50", f"{p50:.1f} ms")
        row("latency p99", f"{p99:.1f} ms", verdict(p99 < IDLE_TARGET_P99_MS) + f" target: < {IDLE_TARGET_P99_MS:.0f} ms")
        row("idle reopened", reopened[-1].split()[-1], "connections the server dropped (head deadline) and the holder reopened")
        return 0 if failures == 0 and p99 < IDLE_TARGET_P99_MS else 1
    finally:
        for process in (holder, server):
            if process is not None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


# =====================================================================================
# --mode flood and --mode readahead: hostile clients without a token against the real
# server (code/serve.py --http, memory store). Self-contained: own command line, server
# and attacking process; every load bounded in count and time, loopback only.
#
#     python3 code/scripts/bench.py --mode flood [--seconds N] [--connections N]
#         a well-behaved client's p50/p99 while N connections send nothing but CRLFs
#     python3 code/scripts/bench.py --mode readahead [--connections N]
#         the server's memory while N connections send requests ahead and never read
#     python3 code/scripts/bench.py --mode guess [--seconds N] [--addresses N]
#         wrong bearer tokens answered per second (401: judged; 429: over a budget) from
#         127.0.0.1, then from N addresses 127.0.0.2.. in turn, while a client on 127.0.0.1
#         sends the right token
# =====================================================================================

HOSTILE_FLOOD_CONNECTIONS = 1024
HOSTILE_READAHEAD_CONNECTIONS = 4000
HOSTILE_FLOOD_TARGET_P99_MS = 250.0
GUESS_ADDRESSES = 250  # --mode guess: source addresses the rotating guesser cycles through

# The attacker: opens N connections and, for `seconds`, writes 64 KiB of CRLFs to every one
# the kernel takes bytes for, reopening each one the server closes.
_CRLF_FLOODER = """
import resource, selectors, socket, sys, time
port, total, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, total + 256)), hard))
payload = b"\\r\\n" * 32768
sel = selectors.DefaultSelector()
counts = {"refused": 0, "reopened": 0, "sent": 0}
def open_one():
    try:
        s = socket.create_connection(("127.0.0.1", port))
    except OSError:
        return
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
for _ in range(total):
    open_one()
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for key, events in sel.select(0.1):
        s, gone = key.fileobj, False
        if events & selectors.EVENT_READ:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            counts["refused"] += data.startswith(b"HTTP/1.1 400 ")
            gone = not data
        if not gone and events & selectors.EVENT_WRITE:
            try:
                counts["sent"] += s.send(payload)
            except BlockingIOError:
                pass
            except OSError:
                gone = True
        if gone:
            sel.unregister(s); s.close(); open_one(); counts["reopened"] += 1
print(" ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
"""

# The client: N connections, each sends one request and 64 KiB of pipelined requests
# after it (with a valid token: the connection stays open), and never reads a byte.
_NON_READER = """
import resource, socket, sys
port, total, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, total + 256)), hard))
one = b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\nAuthorization: Bearer %b\\r\\nContent-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}" % (port, token)
ahead = one * (65536 // len(one))
held = []
for _ in range(total):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    try:
        s.send(one + ahead)
    except BlockingIOError:
        pass
    held.append(s)
print("sent", flush=True)
sys.stdin.read()
"""

# The guesser: for `seconds`, one wrong token per connection (a refusal closes it), each
# connection from the next of the given source addresses; prints its counts by status.
_GUESSER = """
import collections, socket, sys, time
port, seconds, addresses = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
counts = collections.Counter()
end, k = time.monotonic() + seconds, 0
while time.monotonic() < end:
    k += 1
    one = b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\nAuthorization: Bearer wrong-%d\\r\\nContent-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}" % (port, k)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(addresses[k % len(addresses)], 0)) as s:
            s.sendall(one)
            counts[s.recv(12)[9:12].decode("ascii", "replace") or "closed"] += 1
    except OSError:
        counts["error"] += 1
print(" ".join(f"{key} {value}" for key, value in sorted(counts.items())), flush=True)
"""


def hostile_server(connections: int, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """serve.py --http --port 0 (bench token, `extra` arguments) with room for `connections` descriptors; (process, port)."""
    import resource

    def more_descriptors() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, connections + 512)), hard))

    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
    env.update(NOTES_MCP_TOKEN=TOKEN, NOTES_MCP_SECRET=secrets.token_hex(32))
    process = subprocess.Popen(
        [sys.executable, os.path.join(CODE, "serve.py"), "--http", "--port", "0", *extra],
        stderr=subprocess.PIPE, env=env, preexec_fn=more_descriptors,
    )  # fmt: skip
    assert process.stderr is not None
    for raw in process.stderr:
        found = re.search(rb"http://127\.0\.0\.1:(\d+)/mcp", raw)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep draining
            return process, int(found.group(1))
    raise BenchError("serve.py did not print its URL")


def resident_kb(pid: int, field: str = "VmRSS:") -> int:
    """A process's resident memory in kB from /proc (VmRSS: now; VmHWM: its peak)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


def discover_latencies(port: int, seconds: float) -> tuple[list[float], int]:
    """A well-behaved client's server/discover round trips (ms) for `seconds`, on a keep-alive connection; (latencies, failures)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": main.request_meta({})}}).encode()
    headers = {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer " + TOKEN,
        "Mcp-Method": "server/discover", "MCP-Protocol-Version": main.PROTOCOL_VERSION,
    }  # fmt: skip
    latencies, failures = [], 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            conn.request("POST", "/mcp", body, headers)
            response = conn.getresponse()
            ok = response.status == 200 and b"supportedVersions" in response.read()
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        latencies.append((time.perf_counter() - started) * 1000)
        failures += not ok
        time.sleep(0.01)  # a client's pace
    conn.close()
    return latencies, failures


def run_guess(args: argparse.Namespace) -> int:
    """`--mode guess`: wrong tokens answered per second, from one address and from many, beside a right token."""
    server, port = hostile_server(64)
    try:
        failed = 0
        rotating = [f"127.0.{n // 256}.{n % 256}" for n in range(2, args.addresses + 2)]
        for label, addresses in (("from 127.0.0.1", ["127.0.0.1"]), (f"from {args.addresses} addresses in turn", rotating)):
            guesser = spawn([sys.executable, "-c", _GUESSER, str(port), str(args.seconds), ",".join(addresses)], stdout=subprocess.PIPE, text=True)
            latencies, failures = discover_latencies(port, args.seconds)
            counts = dict(zip(*[iter(guesser.stdout.readline().split())] * 2))  # type: ignore[union-attr]
            stop(guesser)
            section(f"Wrong tokens {label} for {args.seconds:g} s, the right one from 127.0.0.1")
            judged, over = int(counts.get("401", 0)), int(counts.get("429", 0))
            row("judged (401)", f"{judged / args.seconds:,.1f}/s", f"{judged} in all")
            other = {status: n for status, n in counts.items() if status not in ("401", "429")}
            row("over a budget (429)", f"{over / args.seconds:,.1f}/s", f"{over} in all" + (f"; other: {other}" if other else ""))
            row("the right token", f"{len(latencies) - failures}/{len(latencies)} served", f"p50 {idle_percentile(latencies, 0.5):.1f} ms")
            failed += failures
        return 0 if failed == 0 else 1
    finally:
        stop(server)


def run_hostile(argv: list[str]) -> int:
    """`--mode flood`, `--mode readahead` or `--mode guess` (see the block comment above)."""
    parser = argparse.ArgumentParser(description="The server under hostile clients.")
    parser.add_argument("--mode", choices=["flood", "readahead", "guess"], required=True)
    parser.add_argument("--seconds", type=float, default=10.0, help="flood, guess: measuring time (default 10; guess: per phase)")
    parser.add_argument("--connections", type=int, default=0, help="attacking connections (default 1024 flood, 4000 readahead)")
    parser.add_argument("--addresses", type=int, default=GUESS_ADDRESSES, help=f"guess: rotating source addresses (default {GUESS_ADDRESSES})")
    args = parser.parse_args(argv)
    if args.mode == "guess":
        print(f"serve.py --http under wrong bearer tokens; {machine()}")
        return run_guess(args)
    connections = args.connections or (HOSTILE_FLOOD_CONNECTIONS if args.mode == "flood" else HOSTILE_READAHEAD_CONNECTIONS)
    print(f"serve.py --http under {connections} hostile connections ({args.mode}); {machine()}")
    folder = tempfile.mkdtemp(prefix="notes-bench-")
    # readahead: an SQLite store, so every request goes to a worker and the rest wait their turn
    # with what they sent ahead (the memory store answers on the loop, and nothing waits).
    server, port = hostile_server(connections, *([] if args.mode == "flood" else ["--db", os.path.join(folder, "n.db")]))
    attacker = None
    try:
        if args.mode == "flood":
            quiet, _ = discover_latencies(port, 1.0)
            attacker = subprocess.Popen([sys.executable, "-c", _CRLF_FLOODER, str(port), str(connections), str(args.seconds + 2)], stdout=subprocess.PIPE, text=True)
            assert attacker.stdout is not None
            if attacker.stdout.readline().strip() != "ready":
                raise BenchError("the flooder could not open its connections")
            latencies, failures = discover_latencies(port, args.seconds)
            counts = attacker.stdout.readline().strip()
            section(f"{connections} connections sending only CRLFs, {args.seconds:.0f} s")
            row("before the flood p50", f"{idle_percentile(quiet, 0.50):.1f} ms")
            row("requests", f"{len(latencies)}", f"{failures} failed")
            p50, p99 = idle_percentile(latencies, 0.50), idle_percentile(latencies, 0.99)
            row("latency p50", f"{p50:.1f} ms")
            row("latency p99", f"{p99:.1f} ms", verdict(p99 < HOSTILE_FLOOD_TARGET_P99_MS) + f" target: < {HOSTILE_FLOOD_TARGET_P99_MS:.0f} ms")
            row("flooder", counts, "400s received, connections reopened, bytes sent")
            return 0 if failures == 0 and p99 < HOSTILE_FLOOD_TARGET_P99_MS else 1
        before = resident_kb(server.pid)
        attacker = subprocess.Popen([sys.executable, "-c", _NON_READER, str(port), str(connections), TOKEN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert attacker.stdout is not None
        if attacker.stdout.readline().strip() != "sent":
            raise BenchError("the non-reading client could not open its connections")
        time.sleep(2.0)  # let the loop read what it will while the workers work through the queue
        after, peak = resident_kb(server.pid), resident_kb(server.pid, "VmHWM:")
        latencies, failures = discover_latencies(port, 1.0)
        section(f"{connections} connections that sent requests ahead and never read")
        row("server memory before", f"{before / 1024:.1f} MB")
        row("server memory 2 s after", f"{after / 1024:.1f} MB", f"{(after - before) * 1024 / connections:,.0f} bytes per connection")
        row("server memory peak", f"{peak / 1024:.1f} MB", f"{(peak - before) * 1024 / connections:,.0f} bytes per connection")
        row("a client meanwhile", f"{len(latencies) - failures}/{len(latencies)} ok", f"p50 {idle_percentile(latencies, 0.5):.1f} ms")
        return 0 if failures == 0 else 1
    finally:
        for process in (attacker, server):
            if process is not None:
                stop(process)
        shutil.rmtree(folder, ignore_errors=True)


# =====================================================================================
# --mode index-memory: what one note costs each store's title index, at ordinary titles
# and at the worst a title can do (random CJK characters: every trigram new).
# --mode rename-loop: the folder store's lookups while another process renames one file
# back and forth as fast as it can.
# --mode index-rebuild: the folder index's first build, and the lookup after an inotify
# queue overflow (the rebuild it makes), with a note made after the overflow looked up;
# then a first build while another process makes and removes notes, and what the
# lookups after it miss.
#
#     python3 code/scripts/bench.py --mode index-memory [--notes N]
#     python3 code/scripts/bench.py --mode rename-loop [--notes N] [--seconds N]
#     python3 code/scripts/bench.py --mode index-rebuild [--notes N]
# =====================================================================================

INDEX_MEMORY_LENGTHS = (190, 200)  # characters of the random CJK titles measured (200 = main.MAX_TITLE_LENGTH)
INDEX_MEMORY_SEED_TIMEOUT_MS = 600_000  # the PostgreSQL seed's statement timeout in --mode index-memory
RENAME_LOOP_FOLDERS = 100  # sub-folders the rename-loop notes are spread over
INDEX_REBUILD_RUNS = 5  # --mode index-rebuild: builds and overflows measured, the median reported
INDEX_STORM_MADE, INDEX_STORM_REMOVED = 2000, 400  # --mode index-rebuild: notes another process makes and removes during a first build
_STORMER = """
import os, sys
folder, made, removed, folders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("ready", flush=True)
sys.stdin.readline()
every = made // removed
for i in range(made):
    with open(os.path.join(folder, f"f{i % folders:03d}", f"storm-{i:06d}.md"), "w", encoding="utf-8") as handle:
        handle.write(f"# Storm note {i:06d}\\n")
    if i % every == 0 and i // every < removed:
        k = i // every
        os.unlink(os.path.join(folder, f"f{k % folders:03d}", f"n{k:06d}.md"))
print("done", flush=True)
"""
_RENAMER = """
import os, sys
first, fresh = sys.argv[1], sys.argv[2] == "fresh"
path, i = first, 0
print("renaming", flush=True)
while True:
    i += 1
    new = f"{first[:-3]}-{i if fresh else i % 2}.md"
    os.rename(path, new)
    path = new
"""


def cjk_titles(count: int, length: int, seed: int = 1) -> list[str]:
    """`count` distinct titles of `length` random CJK ideographs (every trigram is new: an index's worst case)."""
    rng = random.Random(seed)
    return ["".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(length)) for _ in range(count)]


def memory_notes(titles: list[str]) -> list[main.Note]:
    """One note per title, spread over RENAME_LOOP_FOLDERS folders of one workspace."""
    return [
        main.Note(f"n{i:06d}", title, f"{WORKSPACE}/f{i % RENAME_LOOP_FOLDERS:03d}/n{i:06d}.md", 1)
        for i, title in enumerate(titles)
    ]


def probe(title: str) -> str:
    """The query a memory run looks up: 20 characters from the middle of a long title, a short title whole."""
    return title[40:60] if len(title) >= 60 else title


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """(fn(), bytes it left allocated, its peak above the start) under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held - base, peak - base


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


def folder_memory(directory: str, notes: list[main.Note]) -> tuple[float, float]:
    """(bytes per note the folder index holds, peak bytes per note while it is built) in process."""
    folder, store, root = folder_store_over(directory, notes)
    try:
        found, held, peak = traced(lambda: store.candidates(root, probe(notes[0].title)))
        if [n.id.rsplit("/", 1)[-1] for n in found] != [notes[0].id + ".md"]:
            raise BenchError(f"folder lookup found {len(found)} notes, not the one asked for")
    finally:
        store.close()
        store.nonces.close()
    return held / len(notes), peak / len(notes)


def sqlite_memory(directory: str, notes: list[main.Note]) -> tuple[float, float]:
    """(database bytes per note, peak bytes per note of the first lookup in process) for an SQLite store."""
    import sqlite_store

    path = os.path.join(directory, "notes.db")
    empty = sqlite_store.open_store(os.path.join(directory, "empty.db"), clock=time.time, seed_notes=[])
    empty.close()
    store = sqlite_store.open_store(path, clock=time.time, seed_notes=notes)
    try:
        found, _, peak = traced(lambda: store.candidates(main.parse_file_uri(WORKSPACE), probe(notes[0].title)))
        if [n.id for n in found] != [notes[0].id]:
            raise BenchError(f"SQLite lookup found {len(found)} notes, not the one asked for")
    finally:
        store.close()
    grown = os.path.getsize(path) - os.path.getsize(os.path.join(directory, "empty.db"))
    return grown / len(notes), peak / len(notes)


def postgres_memory(cluster: Any, notes: list[main.Note]) -> tuple[float, float]:
    """(table and index bytes per note, peak bytes per note of the first lookup in process) for a PostgreSQL store."""
    import postgres_store
    import psycopg

    url = cluster.new_database()
    # The seed builds the pg_trgm index in one statement: at 10,000 random CJK titles that
    # outlasts the store's statement timeout on this machine, and the store would serve
    # without the index (saying so). Measured here with the index built.
    store = postgres_store.open_store(url, clock=time.time, seed_notes=notes, statement_timeout_ms=INDEX_MEMORY_SEED_TIMEOUT_MS)
    if "pg_trgm index" not in store.describe():
        raise BenchError(f"PostgreSQL store without its title index: {store.describe()}")
    try:
        found, _, peak = traced(lambda: store.candidates(main.parse_file_uri(WORKSPACE), probe(notes[0].title)))
        if [n.id for n in found] != [notes[0].id]:
            raise BenchError(f"PostgreSQL lookup found {len(found)} notes, not the one asked for")
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM notes")  # the GIN index's pending list merged, as it is in service
        (size,) = conn.execute("SELECT pg_total_relation_size('notes')").fetchone()
    return size / len(notes), peak / len(notes)


def run_index_memory(args: argparse.Namespace) -> None:
    """Bytes per note of each store's title index, at the bench titles and at random CJK titles of 190 and 200 characters."""
    import postgres_cluster

    count = args.notes
    kinds = [("bench titles", [note_title(i) for i in range(count)])]
    kinds += [(f"{length} random CJK", cjk_titles(count, length)) for length in INDEX_MEMORY_LENGTHS]
    reason = postgres_cluster.missing()
    cluster = None
    if reason is None:
        cluster = postgres_cluster.Cluster()
        cluster.start()
    try:
        section(f"Title index: bytes per note, {count:,} notes (folder: tracemalloc; SQL: file or relation size, and the first lookup's peak)")
        for label, titles in kinds:
            notes = memory_notes(titles)
            with tempfile.TemporaryDirectory(prefix="notes-bench-memory-") as directory:
                held, peak = folder_memory(directory, notes)
            row(f"{label}: folder index held", f"{held:,.0f} bytes", f"building it peaked at {peak:,.0f} per note")
            with tempfile.TemporaryDirectory(prefix="notes-bench-memory-") as directory:
                size, peak = sqlite_memory(directory, notes)
            row(f"{label}: SQLite file", f"{size:,.0f} bytes", f"first lookup peaked at {peak:,.0f} per note")
            if cluster is not None:
                size, peak = postgres_memory(cluster, notes)
                row(f"{label}: PostgreSQL notes + indexes", f"{size:,.0f} bytes", f"first lookup peaked at {peak:,.0f} per note")
        if cluster is None:
            row("PostgreSQL", "not measured", str(reason))
    finally:
        if cluster is not None:
            cluster.destroy()


def run_rename_loop(args: argparse.Namespace) -> None:
    """Folder-store lookup times, idle and while another process renames one of its files in a loop."""
    count = args.notes
    with tempfile.TemporaryDirectory(prefix="notes-bench-rename-") as directory:
        notes = memory_notes([note_title(i) for i in range(count)])
        folder, store, root = folder_store_over(directory, notes)
        moving = os.path.join(folder, "f000", "moving.md")
        with open(moving, "w", encoding="utf-8") as handle:
            handle.write("# renamed in a loop\n")

        def lookups(seconds: float) -> list[float]:
            taken: list[float] = []
            end = time.perf_counter() + seconds
            i = 1
            while time.perf_counter() < end:
                start = time.perf_counter()
                found = store.candidates(root, note_title(i))
                taken.append((time.perf_counter() - start) * 1000)
                if len(found) != 1:
                    raise BenchError(f"a lookup during the rename loop found {len(found)} notes, not 1")
                i = i % (count - 1) + 1
            return taken

        def report(label: str, taken: list[float]) -> None:
            taken.sort()
            p90 = taken[int(len(taken) * 0.9)]
            row(label, f"median {statistics.median(taken):.2f} ms", f"p90 {p90:.2f} ms, max {taken[-1]:.1f} ms, {len(taken):,} lookups")

        try:
            store.candidates(root, note_title(0))  # built
            section(f"Folder store lookups, {count:,} notes in {RENAME_LOOP_FOLDERS} folders, inotify")
            report("idle", lookups(args.seconds))
            for names, label in (("two", "between two names"), ("fresh", "to a new name each time")):
                renamer = spawn([sys.executable, "-c", _RENAMER, moving, names], stdout=subprocess.PIPE)
                try:
                    assert renamer.stdout is not None
                    renamer.stdout.readline()  # it renames from now on
                    report(f"another process renames one file {label}", lookups(args.seconds))
                finally:
                    renamer.kill()
                    renamer.wait()
                moving = next(os.path.join(folder, "f000", name) for name in os.listdir(os.path.join(folder, "f000")) if name.startswith("moving"))
        finally:
            store.close()
            store.nonces.close()

def overflow_queue(path: str) -> None:
    """Queue more inotify events than the kernel holds (fs.inotify.max_queued_events), so that it reports IN_Q_OVERFLOW."""
    with open("/proc/sys/fs/inotify/max_queued_events", encoding="ascii") as limit:
        events = int(limit.read())
    other = path + ".other"
    with open(other, "w", encoding="utf-8"):
        pass
    for k in range(events + 2):  # two files in turn: the kernel merges an event only into an identical last one
        os.utime(path if k % 2 else other)
    os.unlink(other)


def index_storm(folder: str, root: main.Path, nonces_path: str) -> dict[str, int]:
    """A first build while another process makes INDEX_STORM_MADE notes and removes INDEX_STORM_REMOVED: what later lookups miss."""
    import markdown_store
    import sqlite_store

    nonces = sqlite_store.open_store(nonces_path, clock=time.time)
    store = markdown_store.MarkdownNotesStore([folder], nonces)
    stormer = spawn([sys.executable, "-c", _STORMER, folder, str(INDEX_STORM_MADE), str(INDEX_STORM_REMOVED), str(RENAME_LOOP_FOLDERS)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert stormer.stdin is not None and stormer.stdout is not None
        stormer.stdout.readline()  # ready
        stormer.stdin.write(b"go\n")
        stormer.stdin.flush()  # it makes and removes notes from now on, while the lookup builds
        store.candidates(root, note_title(INDEX_STORM_REMOVED))
        made_before = len([name for sub in os.listdir(folder) for name in os.listdir(os.path.join(folder, sub)) if name.startswith("storm-")])
        stormer.stdout.readline()  # done
        # Newest first: an index that applies changes oldest first, a few per lookup, cannot hide behind the order.
        missed = sum(1 for i in reversed(range(INDEX_STORM_MADE)) if len(store.candidates(root, f"Storm note {i:06d}")) != 1)
        stale = sum(1 for k in range(INDEX_STORM_REMOVED) if store.candidates(root, note_title(k)))
    finally:
        stormer.kill()
        stormer.wait()
        store.close()
        nonces.close()
    return {"made": INDEX_STORM_MADE, "before": made_before, "removed": INDEX_STORM_REMOVED, "missed": missed, "stale": stale}


def run_index_rebuild(args: argparse.Namespace) -> None:
    """The folder index's first build, and the lookups after an inotify queue overflow, at --notes notes."""
    import markdown_store
    import sqlite_store

    count = args.notes
    notes = memory_notes([note_title(i) for i in range(count)])
    builds: list[float] = []
    # Per run, the first lookup after the overflow and the first once a rescan is due:
    # (ms, whether it rebuilt, the note made after the overflow offered, the note removed after it offered).
    after: list[list[tuple[float, bool, bool, bool]]] = []
    with tempfile.TemporaryDirectory(prefix="notes-bench-rebuild-") as directory:
        folder, first, root = folder_store_over(directory, notes)
        first.close()
        first.nonces.close()
        for run_ in range(INDEX_REBUILD_RUNS):
            # Each run its own store: its first lookup builds the index. Its clock is moved
            # past the rescan interval after the first lookup that follows the overflow, so
            # that a rebuild is due by any rule the index follows and the second one makes it.
            skew = [0.0]
            nonces = sqlite_store.open_store(os.path.join(directory, f"rebuild-{run_}.db"), clock=time.time)
            store = markdown_store.MarkdownNotesStore([folder], nonces, clock=lambda: time.monotonic() + skew[0])
            (index,) = store.indexes.values()
            try:
                start = time.perf_counter()
                store.candidates(root, note_title(1))
                builds.append((time.perf_counter() - start) * 1000)
                gone = os.path.join(folder, "f001", f"gone-{run_}.md")
                with open(gone, "w", encoding="utf-8") as handle:
                    handle.write(f"# Removed note {run_}\n")
                if len(store.candidates(root, f"Removed note {run_}")) != 1:
                    raise BenchError("a note made before the overflow was not offered")
                overflow_queue(os.path.join(folder, "f000", "n000000.md"))
                newborn = os.path.join(folder, "f002", f"newborn-{run_}.md")
                with open(newborn, "w", encoding="utf-8") as handle:
                    handle.write(f"# Newborn note {run_}\n")
                os.unlink(gone)
                lookups = []
                for _ in range(2):
                    scanned, start = index.scanned_at, time.perf_counter()
                    seen = len(store.candidates(root, f"Newborn note {run_}")) == 1
                    taken = (time.perf_counter() - start) * 1000
                    lookups.append((taken, index.scanned_at != scanned, seen, bool(store.candidates(root, f"Removed note {run_}"))))
                    skew[0] += 1e6
                after.append(lookups)
            finally:
                store.close()
                nonces.close()
        storm = index_storm(folder, root, os.path.join(directory, "storm.db"))
    built = statistics.median(builds)
    section(f"Folder index, {count:,} notes in {RENAME_LOOP_FOLDERS} folders, inotify (median of {INDEX_REBUILD_RUNS} runs)")
    row("first build (the first lookup)", f"{built:,.0f} ms", "runs: " + " ".join(f"{ms:,.0f}" for ms in builds))
    row("  notes made by another process meanwhile", f"{storm['made']:,}", f"{storm['before']:,} of them before the lookup returned, {storm['removed']:,} notes removed")
    row("  made, not offered by a lookup after", f"{storm['missed']:,}", "each looked up by its title, the newest first")
    row("  removed, still offered by a lookup after", f"{storm['stale']:,}")
    for k, label in enumerate(("the first lookup after a queue overflow", "the first once a rescan is due")):
        taken = statistics.median(run_[k][0] for run_ in after)
        rebuilt, seen, stale = (sum(run_[k][j] for run_ in after) for j in (1, 2, 3))
        row(label, f"{taken:,.1f} ms", f"{taken / built:.0%} of the first build; runs: " + " ".join(f"{run_[k][0]:,.1f}" for run_ in after))
        row("  rebuilt the index", f"{rebuilt} of {len(after)}")
        row("  offered the note made after the overflow", f"{seen} of {len(after)}")
        row("  offered the note removed after it", f"{stale} of {len(after)}")

if __name__ == "__main__":
    # SIGTERM becomes SystemExit, so the `finally` above still stops every server we started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started in the background
    if sys.argv[1:3] in (["--mode", "flood"], ["--mode", "readahead"], ["--mode", "guess"]):
        sys.exit(run_hostile(sys.argv[1:]))
    sys.exit(run_idle(sys.argv[1:]) if sys.argv[1:3] == ["--mode", "idle"] else run())
