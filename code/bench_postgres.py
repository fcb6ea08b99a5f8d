"""Benchmark: round trips/s of the store seam on PostgreSQL with 1, 2 and 4 server processes, beside SQLite.

    python3 code/bench_postgres.py [--seconds N] [--notes N]

One round trip is the consume path: the first `tools/call notes_delete` (candidates, the
form, a sealed state) and its accepted retry (is_consumed, then the one consume
transaction that deletes the note), both through `handle_bytes` in each process. Each
process is one server instance with its own connection, all on one database. A throwaway
cluster is started in a temporary folder (Unix socket only, fsync on, as the `postgres`
user when run as root) and removed afterwards; each process count gets a fresh database. A script, not a test: it prints a report and exits 0 (1 on a wrong
answer, 2 when psycopg or the PostgreSQL binaries are missing).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

CODE = os.path.dirname(os.path.abspath(__file__))
if CODE not in sys.path:
    sys.path.insert(0, CODE)

import bench  # noqa: E402

PROCESS_COUNTS = (1, 2, 4)
GUARD_SECONDS = 120  # a child or pg_ctl that takes longer has hung


def pg_worker(spec: str) -> int:
    """Child process: round trips on notes k, k+step, ... against the shared database."""
    import postgres_store

    url, k, step, notes, seconds, start_at = json.loads(spec)
    principal = f"{bench.PRINCIPAL}{k}"
    store = postgres_store.open_store(url, clock=time.time)
    server = bench.server_over(store, principal, state_ttl=bench.SQLITE_TTL_SECONDS)
    time.sleep(max(0.0, start_at - time.time()))  # every worker starts at the same moment
    done, start = 0, time.perf_counter()
    for i in range(k, notes, step):
        if time.perf_counter() - start >= seconds:
            break
        bench.round_trip(lambda raw: server.handle_bytes(raw, principal)[1] or b"", i)
        done += 1
    print(json.dumps({"count": done, "elapsed": time.perf_counter() - start}))
    store.close()
    return 0


def postgres_rate(url: str, processes: int, notes: int, seconds: float) -> tuple[float, int, float]:
    """(round trips/s, round trips, seconds) for `processes` server processes on the database at `url` (seeded here)."""
    import postgres_store

    postgres_store.open_store(url, clock=time.time, seed_notes=bench.bench_notes(notes)).close()
    start_at = time.time() + 1.5  # past every child's imports and connection
    children = [
        bench.spawn(
            [sys.executable, os.path.abspath(__file__), "--pg-worker", json.dumps([url, k, processes, notes, seconds, start_at])],
            stdout=subprocess.PIPE,
        )
        for k in range(processes)
    ]
    results = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + GUARD_SECONDS)
        bench.stop(child)
        if child.returncode != 0:
            raise bench.BenchError(f"PostgreSQL worker exited with status {child.returncode}")
        results.append(json.loads(out))
    count = sum(r["count"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    return count / elapsed, count, elapsed


class ThrowawayCluster:
    """initdb + pg_ctl into a temp folder, Unix socket only; `database()` makes a fresh one."""

    def __init__(self) -> None:
        binaries = [os.path.dirname(shutil.which("initdb") or "")] if shutil.which("initdb") else []
        binaries += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
        self.bin = next((b for b in binaries if os.access(os.path.join(b, "pg_ctl"), os.X_OK)), None)
        if self.bin is None:
            raise LookupError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.root = tempfile.mkdtemp(prefix="bench-pg-")
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = os.path.join(self.root, "data")
        self.count = 0
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "bench", "--no-instructions")
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-o", f"-k {self.root} -c listen_addresses=''", "start")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.prefix, os.path.join(self.bin, tool), *args], check=True, capture_output=True, timeout=GUARD_SECONDS)  # type: ignore[arg-type]

    def database(self) -> str:
        import psycopg

        self.count += 1
        with psycopg.connect(f"postgresql:///postgres?host={self.root}&user=bench", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE bench{self.count}")
        return f"postgresql:///bench{self.count}?host={self.root}&user=bench"

    def destroy(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def run_postgres(notes: int, seconds: float) -> dict[str, dict[int, float]]:
    """Round trips/s for PROCESS_COUNTS server processes on PostgreSQL and on one SQLite file; prints rows."""
    figures: dict[str, dict[int, float]] = {"postgresql": {}, "sqlite": {}}
    cluster = ThrowawayCluster()
    try:
        bench.section(f"Store seam, consume path (first call + accept), {notes:,} notes seeded, not put back")
        for processes in PROCESS_COUNTS:
            rate, count, elapsed = postgres_rate(cluster.database(), processes, notes, seconds)
            figures["postgresql"][processes] = rate
            bench.row(f"PostgreSQL, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
        with tempfile.TemporaryDirectory(prefix="notes-bench-db-") as directory:
            for processes in PROCESS_COUNTS:
                rate, count, elapsed = bench.sqlite_rate(directory, processes, notes, seconds)
                figures["sqlite"][processes] = rate
                bench.row(f"SQLite, {processes} process(es): round trips/s", f"{rate:,.0f}", f"{count:,} in {elapsed:.1f} s")
    finally:
        cluster.destroy()
        bench.stop_all()
    return figures


def main_(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description="Benchmark the PostgreSQL store beside SQLite (a script, not a test).")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per figure (default 5)")
    parser.add_argument("--notes", type=int, default=5000, help="notes seeded per database (default 5000)")
    parser.add_argument("--pg-worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pg_worker:
        return pg_worker(args.pg_worker)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        print("bench_postgres: psycopg is not installed (pip install 'psycopg[binary]>=3.2')", file=sys.stderr)
        return 2
    print(f"notes MCP store benchmark; {bench.machine()}")
    try:
        run_postgres(args.notes, args.seconds)
    except LookupError as exc:
        print(f"bench_postgres: {exc}", file=sys.stderr)
        return 2
    except bench.BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main_())
