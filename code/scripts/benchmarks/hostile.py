"""`--mode flood`, `--mode readahead` and `--mode guess`: hostile clients without a token against the real server.

The server is code/serve.py --http (memory store, SQLite for readahead); each mode has its own
command line, server and attacking process; every load is bounded in count and time, loopback only.

    python3 code/scripts/bench.py --mode flood [--seconds N] [--connections N]
        a well-behaved client's p50/p99 while N connections send nothing but CRLFs
    python3 code/scripts/bench.py --mode readahead [--connections N]
        the server's memory while N connections send requests ahead and never read
    python3 code/scripts/bench.py --mode guess [--seconds N] [--addresses N]
        wrong bearer tokens answered per second (401: judged; 429: over a budget) from
        127.0.0.1, then from N addresses 127.0.0.2.. in turn, while a client on 127.0.0.1
        sends the right token
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import main

from .common import SERVE_PY, TOKEN, BenchError, latency_rows, machine, percentile, row, section, spawn, stop

__all__ = ["run_command_line"]

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
one = (b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\nAuthorization: Bearer %b\\r\\n"
       b"Content-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}" % (port, token))
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
    one = (b"POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\nAuthorization: Bearer wrong-%d\\r\\n"
           b"Content-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}" % (port, k))
    try:
        source = (addresses[k % len(addresses)], 0)
        with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=source) as s:
            s.sendall(one)
            counts[s.recv(12)[9:12].decode("ascii", "replace") or "closed"] += 1
    except OSError:
        counts["error"] += 1
print(" ".join(f"{key} {value}" for key, value in sorted(counts.items())), flush=True)
"""


def hostile_server(connections: int, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """(process, port) of serve.py --http --port 0 with the bench token, `extra`, room for `connections` sockets."""
    import resource

    def more_descriptors() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, connections + 512)), hard))

    env = {key: value for key, value in os.environ.items() if not key.startswith("NOTES_MCP_")}
    env.update(NOTES_MCP_TOKEN=TOKEN, NOTES_MCP_SECRET=secrets.token_hex(32))
    process = subprocess.Popen(
        [sys.executable, SERVE_PY, "--http", "--port", "0", *extra],
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=more_descriptors,
    )
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
    """(latencies in ms, failures) of a well-behaved client's server/discover calls for `seconds`, kept alive."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": main.request_meta({})}}
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": "Bearer " + TOKEN,
        "Mcp-Method": "server/discover",
        "MCP-Protocol-Version": main.PROTOCOL_VERSION,
    }
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
        for label, addresses in (
            ("from 127.0.0.1", ["127.0.0.1"]),
            (f"from {args.addresses} addresses in turn", rotating),
        ):
            guesser = spawn(
                [sys.executable, "-c", _GUESSER, str(port), str(args.seconds), ",".join(addresses)],
                stdout=subprocess.PIPE,
            )
            latencies, failures = discover_latencies(port, args.seconds)
            assert guesser.stdout is not None
            words = guesser.stdout.readline().decode().split()  # "STATUS COUNT STATUS COUNT ..."
            counts = dict(zip(words[::2], words[1::2], strict=False))
            stop(guesser)
            section(f"Wrong tokens {label} for {args.seconds:g} s, the right one from 127.0.0.1")
            judged, over = int(counts.get("401", 0)), int(counts.get("429", 0))
            row("judged (401)", f"{judged / args.seconds:,.1f}/s", f"{judged} in all")
            other = {status: n for status, n in counts.items() if status not in ("401", "429")}
            row(
                "over a budget (429)",
                f"{over / args.seconds:,.1f}/s",
                f"{over} in all" + (f"; other: {other}" if other else ""),
            )
            row(
                "the right token",
                f"{len(latencies) - failures}/{len(latencies)} served",
                f"p50 {percentile(latencies, 0.5):.1f} ms",
            )
            failed += failures
        return 0 if failed == 0 else 1
    finally:
        stop(server)


def run_command_line(argv: list[str]) -> int:
    """`--mode flood`, `--mode readahead` or `--mode guess` (see the block comment above)."""
    parser = argparse.ArgumentParser(description="The server under hostile clients.")
    parser.add_argument("--mode", choices=["flood", "readahead", "guess"], required=True)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="flood, guess: measuring time (default 10; guess: per phase)"
    )
    parser.add_argument(
        "--connections", type=int, default=0, help="attacking connections (default 1024 flood, 4000 readahead)"
    )
    parser.add_argument(
        "--addresses",
        type=int,
        default=GUESS_ADDRESSES,
        help=f"guess: rotating source addresses (default {GUESS_ADDRESSES})",
    )
    args = parser.parse_args(argv)
    if args.mode == "guess":
        print(f"serve.py --http under wrong bearer tokens; {machine()}")
        return run_guess(args)
    connections = args.connections or (
        HOSTILE_FLOOD_CONNECTIONS if args.mode == "flood" else HOSTILE_READAHEAD_CONNECTIONS
    )
    print(f"serve.py --http under {connections} hostile connections ({args.mode}); {machine()}")
    folder = tempfile.mkdtemp(prefix="notes-bench-")
    # readahead: an SQLite store, so every request goes to a worker and the rest wait their turn
    # with what they sent ahead (the memory store answers on the loop, and nothing waits).
    server, port = hostile_server(
        connections, *([] if args.mode == "flood" else ["--db", os.path.join(folder, "n.db")])
    )
    attacker = None
    try:
        if args.mode == "flood":
            quiet, _ = discover_latencies(port, 1.0)
            attacker = subprocess.Popen(
                [sys.executable, "-c", _CRLF_FLOODER, str(port), str(connections), str(args.seconds + 2)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert attacker.stdout is not None
            if attacker.stdout.readline().strip() != "ready":
                raise BenchError("the flooder could not open its connections")
            latencies, failures = discover_latencies(port, args.seconds)
            counts = attacker.stdout.readline().strip()
            section(f"{connections} connections sending only CRLFs, {args.seconds:.0f} s")
            row("before the flood p50", f"{percentile(quiet, 0.50):.1f} ms")
            row("requests", f"{len(latencies)}", f"{failures} failed")
            p99 = latency_rows(latencies, HOSTILE_FLOOD_TARGET_P99_MS)
            row("flooder", counts, "400s received, connections reopened, bytes sent")
            return 0 if failures == 0 and p99 < HOSTILE_FLOOD_TARGET_P99_MS else 1
        before = resident_kb(server.pid)
        attacker = subprocess.Popen(
            [sys.executable, "-c", _NON_READER, str(port), str(connections), TOKEN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert attacker.stdout is not None
        if attacker.stdout.readline().strip() != "sent":
            raise BenchError("the non-reading client could not open its connections")
        time.sleep(2.0)  # let the loop read what it will while the workers work through the queue
        after, peak = resident_kb(server.pid), resident_kb(server.pid, "VmHWM:")
        latencies, failures = discover_latencies(port, 1.0)
        section(f"{connections} connections that sent requests ahead and never read")
        row("server memory before", f"{before / 1024:.1f} MB")
        row(
            "server memory 2 s after",
            f"{after / 1024:.1f} MB",
            f"{(after - before) * 1024 / connections:,.0f} bytes per connection",
        )
        row(
            "server memory peak",
            f"{peak / 1024:.1f} MB",
            f"{(peak - before) * 1024 / connections:,.0f} bytes per connection",
        )
        row(
            "a client meanwhile",
            f"{len(latencies) - failures}/{len(latencies)} ok",
            f"p50 {percentile(latencies, 0.5):.1f} ms",
        )
        return 0 if failures == 0 else 1
    finally:
        for process in (attacker, server):
            if process is not None:
                stop(process)
        shutil.rmtree(folder, ignore_errors=True)
