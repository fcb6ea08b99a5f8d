"""`--mode stdio` and `--mode http`: round trips/s beside the canned responder and its floor, then start-up."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import main

from .common import (
    DISCOVER,
    SERVE_PY,
    BenchError,
    HttpClient,
    HttpServer,
    StdioServer,
    ceiling_argv,
    floor_argv,
    record,
    round_trip,
    row,
    section,
    server_argv,
    server_env,
    verdict,
    write_config,
)

__all__ = ["TARGET_CEILING_SHARE", "run", "speed_runs", "transport_rate"]

TARGET_CEILING_SHARE = 0.80  # of the canned responder's round trips/s, same client, same run
TARGET_START_FACTOR = 1.6  # first answer, at most this many times the canned responder's


def transport_rate(kind: str, argv: list[str], notes: int, clients: int, seconds: float) -> dict[str, Any]:
    """Round trips/s over a real transport to the server `argv` starts; a fresh one whenever its notes run out.

    Only the time clients spend on round trips counts: server start-up and the first
    connection are outside the clock. Each phase deletes notes 0..notes-1 at most once.
    """
    count, elapsed, phases, latencies = 0, 0.0, [], []
    while elapsed < seconds:
        server: StdioServer | HttpServer = StdioServer(argv) if kind == "stdio" else HttpServer(argv)
        try:
            senders: list[Any] = (
                [server] if isinstance(server, StdioServer) else [HttpClient(server.address) for _ in range(clients)]
            )
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
            stdio = StdioServer(argv, pycache)
            try:
                answer = stdio.send(DISCOVER, "server/discover")
                took = (time.perf_counter() - start) * 1000
            finally:
                stdio.close()
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
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=server_env(),
        timeout=60,
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
    """Ceiling, floor and server over one keep-alive client, in turns so drift on the machine hits all alike."""
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


def measure(args: argparse.Namespace, kinds: list[str]) -> dict[str, Any]:
    """stdio and/or HTTP: round trips/s beside the canned responder (CEILING), then start-up beside it."""
    figures: dict[str, Any] = {}
    # A server process takes at most MAX_REPLAY_PER_PRINCIPAL confirmations from its one
    # principal within the state TTL (the replay bound), so that is the most notes a
    # server can delete for us; then the next server starts.
    per_server = min(args.notes, main.MAX_REPLAY_PER_PRINCIPAL)
    with tempfile.TemporaryDirectory(prefix="notes-bench-") as directory:
        config = write_config(directory, per_server)
        for kind in kinds:
            section(
                f"{kind}: the server beside the canned responder, one lean client ({per_server:,} notes per server)"
            )
            measured = side_by_side(kind, config, per_server, args.seconds)
            ceiling, floor, result = measured["ceiling"], measured["floor"], measured["server"]
            share = result["rate"] / ceiling["rate"]
            row(
                "canned responder (the ceiling): round trips/s",
                f"{ceiling['rate']:,.0f}",
                f"{ceiling['round_trips']:,} in {ceiling['seconds']:.1f} s",
            )
            row(
                "floor (canned + sign, verify, claim): round trips/s",
                f"{floor['rate']:,.0f}",
                f"{floor['rate'] / ceiling['rate']:.0%} of the ceiling: the most this design allows",
            )
            row(
                f"serve.py --{kind}: round trips/s",
                f"{result['rate']:,.0f}",
                f"{result['round_trips']:,} in {result['seconds']:.1f} s, {result['phases']} server(s)",
            )
            row(
                "  share of the ceiling",
                f"{share:.0%}",
                f"target >= {TARGET_CEILING_SHARE:.0%}: {verdict(share >= TARGET_CEILING_SHARE)}",
            )
            row(
                "  share of the floor",
                f"{result['rate'] / floor['rate']:.0%}",
                "what the checks, lookup, form and delete cost",
            )
            row("  per round trip above the ceiling", f"{(1 / result['rate'] - 1 / ceiling['rate']) * 1e6:,.0f} µs")
            if kind == "http":
                row(
                    "  request latency p50 / p99",
                    f"{result['p50_ms']:.2f} / {result['p99_ms']:.2f} ms",
                    f"ceiling {ceiling['p50_ms']:.2f} / {ceiling['p99_ms']:.2f} ms",
                )
                row(
                    "  requests >= 35 ms (delayed-ACK stalls)",
                    f"{result['slow_40ms']:,} of {result['requests']:,}",
                    stall_note(result),
                )
            figures[kind] = {"ceiling": ceiling, "floor": floor, "server": result, "share": share}
        if "http" in kinds:
            for clients in (4, 8):
                section(f"HTTP: {clients} parallel keep-alive connections ({per_server:,} notes per server)")
                result = transport_rate("http", server_argv("http", config), per_server, clients, args.seconds)
                row(
                    "full round trips/s",
                    f"{result['rate']:,.0f}",
                    f"{result['round_trips']:,} in {result['seconds']:.1f} s, {result['phases']} server(s)",
                )
                row("  request latency p50 / p99", f"{result['p50_ms']:.2f} / {result['p99_ms']:.2f} ms")
                row(
                    "  requests >= 35 ms (delayed-ACK stalls)",
                    f"{result['slow_40ms']:,} of {result['requests']:,}",
                    stall_note(result),
                )
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
                note = (
                    f"{factor:.2f}x the canned responder (min {min(times):.0f} max {max(times):.0f}); "
                    f"target <= {TARGET_START_FACTOR}x: {verdict(factor <= TARGET_START_FACTOR)}"
                )
                row(label, f"{median:.0f} ms", note)
                figures[f"first_{kind}" + ("_cached" if cached else "")] = {
                    "ms": median,
                    "canned_ms": canned,
                    "factor": factor,
                }
        total, heaviest = import_profile()
        row(
            "imports at start-up, --stdio (-X importtime)",
            f"{total:.0f} ms",
            "costliest, cumulative (indent = import depth):",
        )
        for ms, name in heaviest:
            row(f"    {name[:40]}", f"{ms:.1f} ms")
    return figures


def speed_runs(measured: dict[str, Any], kinds: list[str]) -> list[dict[str, Any]]:
    """One record per transport of a measure() result: the three rates, rounded to whole round trips/s."""
    return [
        {"transport": kind, **{part: round(measured[kind][part]["rate"]) for part in ("ceiling", "floor", "server")}}
        for kind in kinds
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """`--mode stdio`, `http` or both (`all`): measure, then add the figures to `--record` when given."""
    kinds = ["stdio", "http"] if args.mode == "all" else [args.mode]
    measured = measure(args, kinds)
    if args.record:
        record(args.record, speed_runs(measured, kinds), None, args.command)
    return measured
