"""`--mode startup`: process start to the first answer over stdio, as a host that starts a process per call pays it."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .common import (
    DISCOVER,
    ROOT,
    SERVE_PY,
    BenchError,
    ceiling_argv,
    encode,
    row,
    section,
    server_env,
    spawn,
    stop,
    verdict,
    write_config,
)

__all__ = ["INITIALIZE", "first_line_ms", "run", "tree_of"]

START_TARGET_MS = 300.0  # the first answer, process start included, on an idle 2-core machine
INITIALIZE = encode(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
)


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


def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """`--mode startup`: the first answer over stdio, canned responder, this tree and REF's, in turns."""
    section(f"Start-up over stdio: process start to the first answer (median of {args.starts}, in turns)")
    with tempfile.TemporaryDirectory(prefix="notes-startup-") as directory:
        serves = {"this tree": SERVE_PY, args.against: tree_of(args.against, os.path.join(directory, "ref"))}
        config = write_config(directory, 10)
        setups = {
            "lesson (--stdio)": [],
            "per-call set-up": [
                "--config",
                config,
                "--db",
                os.path.join(directory, "{tree}.db"),
                "--notes-tools",
                "--confirm-in-browser",
            ],
        }
        cached = os.path.join(directory, "pycache-{tree}")
        caches = {"bytecode cached": cached, "compiled at each start": None}
        messages = {"server/discover": DISCOVER, "initialize (2025-11-25)": INITIALIZE}
        runs: dict[str, list[float]] = {}
        for tree, serve in serves.items():  # one start each fills the bytecode caches, off the record
            tag = "this" if tree == "this tree" else "ref"
            first_line_ms(
                [sys.executable, serve, "--stdio"],
                DISCOVER,
                server_env(cached.replace("{tree}", tag)),
            )
        for _ in range(args.starts):
            for message_name, message in messages.items():
                runs.setdefault(f"canned responder: {message_name}", []).append(
                    first_line_ms(ceiling_argv("stdio"), message, server_env())
                )
                for cache_name, cache in caches.items():
                    for tree, serve in serves.items():
                        tag = "this" if tree == "this tree" else "ref"
                        for setup_name, setup in setups.items():
                            argv = [sys.executable, serve, "--stdio", *(part.replace("{tree}", tag) for part in setup)]
                            env = server_env(cache.replace("{tree}", tag) if cache else None)
                            runs.setdefault(f"{tree}: {setup_name}, {cache_name}: {message_name}", []).append(
                                first_line_ms(argv, message, env)
                            )
        figures = {label: statistics.median(times) for label, times in runs.items()}
        for message_name in messages:
            canned = figures[f"canned responder: {message_name}"]
            row(f"canned responder (the ceiling): {message_name}", f"{canned:.0f} ms")
            for label, ms in figures.items():
                if label.endswith(message_name) and not label.startswith("canned"):
                    row(
                        f"  {label.removesuffix(': ' + message_name)}",
                        f"{ms:.0f} ms",
                        f"{ms / canned:.1f}x the canned responder; "
                        f"<= {START_TARGET_MS:.0f} ms: {verdict(ms <= START_TARGET_MS)}",
                    )
    return {"ms": figures}
