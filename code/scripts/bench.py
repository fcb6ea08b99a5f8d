"""Benchmark: full MRTR round trips per second, where the time goes, replay-store memory.

    python3 code/scripts/bench.py [--mode inprocess|stdio|http|sqlite|all] [--seconds N] [--notes N]
    python3 code/scripts/bench.py --mode scaling [--seconds N] [--kinds K,...]
                                          round trips/s over stdio at 10..100,000 notes, four stores
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
title query matches exactly one note. The store size is part of the cost of a lookup: in-process,
every deleted note is put back (`store.put`) so the size stays constant; over stdio and HTTP the server is started
on a config with `--notes` notes and restarted when they run out (start-up excluded).
Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys

# A script beside the server, not part of it: the server's modules are one folder up, the
# benchmark's own in the `benchmarks` package beside this file.
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
CODE = os.path.dirname(SCRIPTS)


def entry(argv: list[str]) -> int:
    """Run the command line `argv` (without the program name); the process's exit status."""
    for folder in (CODE, SCRIPTS):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    from benchmarks import command  # importable once the folders above are on the path

    return command.dispatch(argv)


if __name__ == "__main__":
    # SIGTERM becomes SystemExit, so every `finally` still stops every server the run started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started in the background
    sys.exit(entry(sys.argv[1:]))
