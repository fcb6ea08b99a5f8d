"""`--mode idle`: the HTTP engine (code/http_server.py) while another process holds IDLE_CONNECTIONS open.

Most of them silent, some trickling a header byte, each reopened when dropped. Its own
command line, server and clients:

    python3 code/scripts/bench.py --mode idle [--seconds N] [--idle N]
"""

from __future__ import annotations

import argparse
import http.client
import subprocess
import sys
import threading
import time
from typing import IO

from .common import CODE, TOKEN, BenchError, latency_rows, machine, row, section, verdict

__all__ = ["run_command_line"]

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


def follow(stream: IO[str], lines: list[str]) -> None:
    """Append each line `stream` prints to `lines`, stripped, until it ends."""
    for line in stream:
        lines.append(line.strip())


def run_command_line(argv: list[str]) -> int:
    """`--mode idle`: an active client's success and latency while 1,000 idle connections are held."""
    parser = argparse.ArgumentParser(description="HTTP engine under idle connections (bench.py --mode idle).")
    parser.add_argument("--mode", choices=["idle"], required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time (default 20)")
    parser.add_argument(
        "--idle", type=int, default=IDLE_CONNECTIONS, help=f"idle connections held (default {IDLE_CONNECTIONS})"
    )
    args = parser.parse_args(argv)
    print(f"HTTP engine under idle connections; {machine()}")
    server = subprocess.Popen([sys.executable, "-c", _IDLE_SERVER, CODE], stdout=subprocess.PIPE)
    holder = None
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _IDLE_HOLDER,
                str(port),
                str(args.idle),
                str(min(IDLE_TRICKLING, args.idle)),
                str(IDLE_TRICKLE_SECONDS),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "ready":
            raise BenchError("the idle holder could not open its connections")
        reopened = ["reopened 0"]
        threading.Thread(target=follow, args=(holder.stdout, reopened), daemon=True).start()
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
        p99 = latency_rows(latencies, IDLE_TARGET_P99_MS)
        row(
            "idle reopened",
            reopened[-1].split()[-1],
            "connections the server dropped (head deadline) and the holder reopened",
        )
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
