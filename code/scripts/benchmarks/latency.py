"""`--mode latency`: HTTP p50/p99 per request and round trips/s at 1, 4 and 16 keep-alive clients."""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import main

from .common import section, server_argv, write_config
from .transports import transport_rate

__all__ = ["run"]


def run(args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """HTTP p50/p99 per request and round trips/s at 1, 4 and 16 keep-alive clients."""
    per_server = min(args.notes, main.MAX_REPLAY_PER_PRINCIPAL)
    section(f"HTTP latency by concurrency: keep-alive clients, one server ({per_server:,} notes per server)")
    print(f"  {'clients':>8}{'round trips/s':>16}{'p50 ms':>10}{'p99 ms':>10}{'requests':>10}")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="notes-bench-") as directory:
        config = write_config(directory, per_server)
        for clients in (1, 4, 16):
            result = transport_rate("http", server_argv("http", config), per_server, clients, args.seconds)
            print(
                f"  {clients:>8}{result['rate']:>16,.0f}{result['p50_ms']:>10.2f}{result['p99_ms']:>10.2f}"
                f"{result['requests']:>10,}",
                flush=True,
            )
            figures[clients] = result
    return figures
