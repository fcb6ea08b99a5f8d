"""`--mode inprocess`: full round trips through handle_bytes, where their time goes, lookup cost, the replay flood."""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import itertools
import json
import pstats
import secrets
import statistics
import threading
import time
import tracemalloc
from functools import partial
from typing import Any

import frame
import http_server
import main
import stores
import streamable_http

from .common import (
    DISCOVER,
    PRINCIPAL,
    TOKEN,
    WORKSPACE,
    BenchError,
    Ticker,
    bench_server,
    encode,
    first_call,
    gc_paused,
    handler,
    median_us,
    note_id,
    note_title,
    put_back_round_trips,
    rate_runs,
    retry_call,
    round_trip,
    row,
    section,
    verdict,
)

__all__ = ["run"]

# The targets the report checks; every figure it prints is measured in the same run.
TARGET_INPROCESS_RT = {10: 10_000, 1000: 7_000}  # round trips/s by notes in the workspace


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

    picks = (k % notes for k in itertools.count())

    def run_for(budget: float) -> tuple[int, float]:
        return put_back_round_trips(send, store, originals, clock, picks, budget)

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
        f"MCP-Protocol-Version: {main.PROTOCOL_VERSION}\r\nMcp-Method: server/discover\r\n"
        f"Content-Length: {len(DISCOVER)}"
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
        response = endpoint(
            http_server.Request(method, target, version, headers, DISCOVER, ("127.0.0.1", 1), threading.Event())
        )
        assert isinstance(response, http_server.Response) and response.status == 200, response
        framing = [("Content-Length", str(len(response.body)))]
        return http_server.encode_head(response.status, list(response.headers), framing)

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
            frame.encode_message(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "result": main.tool_result("Deleted note b1.", {"deleted": True, "noteId": "b1"}),
                }
            ),
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

    send = handler(server, PRINCIPAL)

    def one() -> None:
        k = next(counter) % notes
        round_trip(send, k)
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
        out.append((size, median_us(partial(store.candidates, workspace, title), repeat=5)))
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
    send = handler(server, PRINCIPAL)
    profiler = cProfile.Profile()
    profiler.enable()
    for k in range(count):
        i = k % notes
        round_trip(send, i)
        store.put(originals[note_id(i)])
        clock.now += 1.0
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)
    return text.getvalue()


def run(args: argparse.Namespace) -> dict[str, Any]:
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
        note = (
            f"min {low:,.0f} max {high:,.0f}; {share:.0%} in handle_bytes, so {median / share:,.0f}/s server-only{goal}"
        )
        row(f"{size:,} notes in the workspace: round trips/s", f"{median:,.0f}", note)
    median = rates[args.notes]
    ok = median >= TARGET_INPROCESS_RT.get(args.notes, 0)

    section("Where the time goes (µs per op, median of 7 repetitions)")
    f = breakdown(args.notes)
    row(f"(a) decode+encode, {f['json_bytes']:.0f} B message", f"{f['json']:.1f}")
    row("    server JSON per round trip (2 in, 2 out)", f"{f['json_rt']:.1f}")
    row("(b) checks: envelope, _meta, args, URI, authz", f"{f['checks']:.1f}", "per request (stdio)")
    row(
        "    HTTP layer around the core (head, checks)", f"{f['http_layer']:.1f}", "per request (HTTP), around the core"
    )
    row(f"    candidate lookup ({args.notes} notes, 1 match)", f"{f['lookup']:.1f}", "first call only")
    row("    form (elicitation) build", f"{f['form']:.1f}", "first call only")
    row("    argument digest (state binding)", f"{f['digest']:.1f}", "once per call")
    row(
        "(c) sign + verify a requestState",
        f"{f['sign_verify']:.1f}",
        f"sign {f['sign']:.1f} + verify {f['verify']:.1f}",
    )
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
    row(
        "confirmations settled (4 principals)",
        f"{flood['confirmations']:,}",
        f"{flood['rate']:,.0f}/s under tracemalloc",
    )
    row("  consumed / refused FULL / USED", f"{flood['consumed']:,} / {flood['full']:,} / {flood['used']}")
    row(
        "  max held for one principal",
        f"{flood['max_per_principal']:,}",
        f"MAX_REPLAY_PER_PRINCIPAL = {main.MAX_REPLAY_PER_PRINCIPAL:,}",
    )
    bounded = flood["held"] <= flood["bound"] and flood["max_per_principal"] <= main.MAX_REPLAY_PER_PRINCIPAL
    row(
        "  len(store) after the flood",
        f"{flood['held']:,}",
        f"bound {flood['bound']:,}: {'bounded' if bounded else 'UNBOUNDED'}",
    )
    row("  traced memory now / peak", f"{flood['current'] / 1024:,.0f} / {flood['peak'] / 1024:,.0f} KiB")
    row(
        "  after the clock passes expiry: len(store)",
        f"{flood['after_prune_len']}",
        f"(the one new claim; {flood['after_prune_outcome'].value})",
    )
    row("  traced memory after pruning", f"{flood['current_after'] / 1024:,.0f} KiB")

    if not ok or args.profile:
        count = max(200, min(5000, int(median)))  # about one second of work, unprofiled
        section(f"cProfile of {count:,} in-process round trips ({args.notes} notes), top by own time")
        print(profile_round_trips(args.notes, count))
    return {"inprocess_rt": rates, "breakdown": f, "scaling": scaling, "flood": flood}
