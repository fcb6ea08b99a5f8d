"""The command line: one module per mode, chosen by `--mode`, behind `python3 code/scripts/bench.py`."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

import main

from . import (
    checkpoint,
    hostile,
    idle,
    index_memory,
    index_rebuild,
    inprocess,
    latency,
    plot,
    postgres,
    rename_loop,
    scaling,
    search,
    sqlite,
    startup,
    transports,
)
from .common import PLOTS, RECORDED_FIGURES, BenchError, machine, stop_all, store_worker

__all__ = ["MODES", "OWN_COMMAND_LINES", "dispatch", "parse_args", "run"]

# Each mode of the shared command line and the modules whose `run(args)` it calls, in order.
MODES: dict[str, tuple[ModuleType, ...]] = {
    "inprocess": (inprocess,),
    "stdio": (transports,),
    "http": (transports,),
    "sqlite": (sqlite,),
    "checkpoint": (checkpoint,),
    "postgres": (postgres,),
    "scaling": (scaling,),
    "search": (search,),
    "latency": (latency,),
    "index-memory": (index_memory,),
    "rename-loop": (rename_loop,),
    "index-rebuild": (index_rebuild,),
    "startup": (startup,),
    "plot": (plot,),
    "all": (inprocess, transports),
}
# Modes with a command line of their own (`--mode X` first on the line): the module whose `run_command_line` takes it.
OWN_COMMAND_LINES: dict[str, ModuleType] = {"idle": idle, "flood": hostile, "readahead": hostile, "guess": hostile}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line shared by every mode but those with their own (see bench.py's docstring)."""
    parser = argparse.ArgumentParser(
        description="Benchmark the notes MCP server (a script, not a test).",
        epilog=(
            "Modes with their own options, first on the line (each has its own --help): "
            "--mode idle [--seconds N] [--idle N]: HTTP while 1,000 idle connections are held; "
            "--mode flood [--seconds N] [--connections N]: a client's p50/p99 while 1,024 connections send only CRLFs; "
            "--mode readahead [--connections N]: server memory while 4,000 connections send ahead, never read; "
            "--mode guess [--seconds N] [--addresses N]: "
            "wrong tokens answered per second while a right token is served."
        ),
    )
    parser.add_argument(
        "--mode",
        choices=list(MODES),
        default="all",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per throughput figure (default 5)")
    parser.add_argument("--notes", type=int, default=1000, help="notes in the workspace (default 1000)")
    parser.add_argument("--flood", type=int, default=100_000, help="confirmations in the replay flood (default 100000)")
    parser.add_argument(
        "--dir", help="--mode checkpoint: the folder its databases are made in (default: the system's temporary folder)"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(scaling.SCALING_KINDS),
        help="--mode scaling: the stores, comma-separated (default all)",
    )
    parser.add_argument("--profile", action="store_true", help="always print the cProfile of in-process round trips")
    parser.add_argument(
        "--record", metavar="FILE", help="--mode stdio, http or scaling: add this run's figures to FILE (JSON)"
    )
    parser.add_argument(
        "--figures",
        metavar="FILE",
        default=RECORDED_FIGURES,
        help="--mode plot: the recorded figures (default docs/img/bench-figures.json)",
    )
    parser.add_argument(
        "--out", metavar="DIR", default=PLOTS, help="--mode plot: where speed.svg and scaling.svg go (default docs/img)"
    )
    parser.add_argument("--starts", type=int, default=10, help="--mode startup: process starts per figure (default 10)")
    parser.add_argument(
        "--against",
        metavar="REF",
        default="main",
        help="--mode startup: the git ref measured beside this tree (default main)",
    )
    parser.add_argument("--store-worker", metavar="SPEC", help=argparse.SUPPRESS)  # a child of --mode sqlite/postgres
    parser.add_argument("--vault-worker", metavar="SPEC", help=argparse.SUPPRESS)  # a child of --mode search
    parser.add_argument(
        "--vault-sizes",
        default=",".join(map(str, search.VAULT_SIZES)),
        help="--mode search: notes in each generated vault",
    )
    parser.add_argument(
        "--vault-dir",
        metavar="DIR",
        help="--mode search: keep the generated vaults in DIR and reuse them (default: a temporary folder)",
    )
    parser.add_argument(
        "--large-notes",
        type=int,
        default=0,
        metavar="N",
        help="--mode search: also write N notes of 200 kB after the index is built and time the next search",
    )
    # What `--record` writes beside the figures: the command that measured them.
    parser.set_defaults(command=" ".join(["python3 code/scripts/bench.py", *(argv or sys.argv[1:])]))
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.notes < 1 or args.flood < 1:
        parser.error("--seconds, --notes and --flood must be positive")
    return args


def run(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and print the report; 1 if a round trip misbehaved."""
    args = parse_args(argv)
    if args.store_worker:
        return store_worker(args.store_worker)
    if args.vault_worker:
        return search.vault_worker(args.vault_worker)
    if args.mode != "plot":
        print(f"notes MCP server benchmark, protocol {main.PROTOCOL_VERSION}; {machine()}")
    try:
        for module in MODES[args.mode]:
            module.run(args)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; every server this run started is stopped", file=sys.stderr)
        return 130
    finally:
        stop_all()
    return 0


def dispatch(argv: list[str]) -> int:
    """The whole command line: a mode with its own options (first on the line), or the shared one."""
    if argv[:1] == ["--mode"] and argv[1:2] and argv[1] in OWN_COMMAND_LINES:
        return OWN_COMMAND_LINES[argv[1]].run_command_line(argv)
    return run(argv)
