"""Figures for docs/serving.md: time from starting `serve.py --stdio --notes-dir` to its first answer, over a large folder.

    python3 docs/measure_startup.py [SERVE_PY] [--notes N] [--starts K]

SERVE_PY defaults to this checkout's code/serve.py (give another checkout's to compare).
"""

from __future__ import annotations

import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
p = argparse.ArgumentParser()
p.add_argument("serve", nargs="?", default=os.path.join(HERE, "code", "serve.py"))
p.add_argument("--notes", type=int, default=10_000)
p.add_argument("--starts", type=int, default=9)
args = p.parse_args()
scratch = tempfile.mkdtemp(prefix="measure-startup-")
try:
    notes = os.path.join(scratch, "Notes")
    for i in range(args.notes):  # 100 sub-folders, as a vault has
        folder = os.path.join(notes, f"d{i % 100}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"n{i}.md"), "w", encoding="utf-8") as handle:
            handle.write(f"# Note {i}\n")
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}).encode() + b"\n"
    env = dict(os.environ, XDG_STATE_HOME=os.path.join(scratch, "state"), NOTES_MCP_SECRET="ab" * 32)
    times = []
    for _ in range(args.starts):
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, args.serve, "--stdio", "--notes-dir", notes], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        proc.stdin.write(line); proc.stdin.flush(); proc.stdout.readline()
        times.append(time.perf_counter() - start)
        proc.stdin.close(); proc.wait(); proc.stdout.close()
    print(f"{args.notes:,} notes: first answer after median {statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f} ms) over {args.starts} starts; load average {os.getloadavg()[0]:.1f}")
finally:
    shutil.rmtree(scratch, True)
