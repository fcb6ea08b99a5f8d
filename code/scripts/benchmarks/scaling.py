"""`--mode scaling`: round trips/s over stdio as the store grows, four stores, and one server of many workspaces."""

from __future__ import annotations

import argparse
import gc
import json
import os
import secrets
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import config as config_file
import main

from .common import (
    DISCOVER,
    META,
    PRINCIPAL,
    TOKEN,
    WORKSPACE,
    BenchError,
    StdioServer,
    encode,
    note_id,
    note_title,
    record,
    row,
    section,
    server_argv,
    verdict,
)

__all__ = [
    "ConfigTooLarge",
    "SCALING_KINDS",
    "SCALING_SIZES",
    "SCALING_TARGET_SHARE",
    "ScalingServer",
    "run",
    "scaling_config",
    "scaling_notes",
    "scaling_rate",
    "scaling_rates",
]

SCALING_SIZES = (10, 1_000, 10_000, 100_000)
SCALING_KINDS = ("memory", "sqlite", "postgres", "folder")
SCALING_MIN_ROUND_TRIPS = 3  # even a slow store gets this many timed round trips
SCALING_WORKSPACES = 1_000  # the shared-server row: SCALING_SIZES[-1] notes over this many workspaces
SCALING_PER_FOLDER = 100  # notes per sub-folder (the workspace's sub-folders, or each caller's workspace)
SCALING_TTL_SECONDS = (
    2.0  # short, so declined confirmations expire soon; past the replay bound the client waits (ReplayBoundReached)
)
SCALING_TARGET_SHARE = 0.50  # goal: at 100,000 notes a store keeps this share of its own 10-note rate
SCALING_TURNS = 6  # slices each server's measuring time is cut into, the servers of one store taking turns


def scaling_notes(size: int, workspaces: int) -> tuple[list[main.Note], str, Callable[[int], int]]:
    """(`size` notes with unique titles, the caller's workspace URI, the k-th note the caller asks for).

    One workspace: the notes sit in sub-folders of SCALING_PER_FOLDER. Several: note i is
    in workspace i % workspaces; the caller owns workspace 7 and asks only for its notes
    (each of which has a twin in the look-alike folder `w0007-evil`).
    """
    if workspaces == 1:
        notes = [
            main.Note(note_id(i), note_title(i), f"{WORKSPACE}/d{i // SCALING_PER_FOLDER:04d}/n{i}.md")
            for i in range(size)
        ]
        return notes, WORKSPACE, lambda k: (k * 7919) % size  # spread over the store, not only its first notes
    notes = [main.Note(note_id(i), note_title(i), f"file:///bench/w{i % workspaces:04d}/n{i}.md") for i in range(size)]
    mine = list(range(7, size, workspaces))
    # A twin of each of the caller's notes in the look-alike folder: a lookup that let it
    # in would offer two choices, and decline_round_trip would stop the run.
    notes += [main.Note(f"evil-{i}", note_title(i), f"file:///bench/w0007-evil/n{i}.md") for i in mine]
    return notes, "file:///bench/w0007", lambda k: mine[(k * 7919) % len(mine)]


class ConfigTooLarge(BenchError):
    """The store's notes do not fit in a config file the server would read (the memory store is seeded from it)."""


def scaling_config(directory: str, kind: str, notes: list[main.Note], workspace: str, cluster: Any) -> tuple[str, str]:
    """(config path, workspace to ask in) of a new `kind` store holding `notes`, served over stdio by that config."""
    tag = f"{kind}-{len(notes)}-{secrets.token_hex(4)}"
    config: dict[str, Any] = {
        "principals": {PRINCIPAL: {"token": TOKEN, "workspaces": [workspace]}},
        "stdioPrincipal": PRINCIPAL,
        "keys": [secrets.token_hex(32)],
        "stateTtlSeconds": SCALING_TTL_SECONDS,
    }
    if kind == "memory":
        config["notes"] = [{"id": n.id, "title": n.title, "uri": n.uri} for n in notes]
    elif kind == "sqlite":
        import sqlite_store

        config["db"] = os.path.join(directory, f"{tag}.db")
        sqlite_store.open_store(config["db"], clock=time.time, seed_notes=notes).close()
    elif kind == "postgres":
        import postgres_store

        config["db"] = cluster.new_database()
        postgres_store.open_store(config["db"], clock=time.time, seed_notes=notes).close()
    else:  # a folder of Markdown files: the workspace's path below file:///bench, as real folders
        folder = os.path.join(directory, tag)
        for note in notes:
            path = os.path.join(folder, *main.parse_file_uri(note.uri)[1:])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(f"# {note.title}\n\nbody\n")
        config["principals"][PRINCIPAL] = {"token": TOKEN, "workspaces": [], "notesDirs": [folder]}
        config["db"] = os.path.join(directory, f"{tag}-nonces.db")
        workspace = main.format_file_uri(
            tuple(p for p in os.path.realpath(folder).split("/") if p) + main.parse_file_uri(workspace)[1:]
        )
    text = json.dumps(config)
    if len(text.encode()) > config_file.MAX_CONFIG_BYTES:
        raise ConfigTooLarge(
            f"{kind}: a config of {len(notes):,} notes is {len(text.encode()):,} bytes, "
            f"over the {config_file.MAX_CONFIG_BYTES:,} a server reads"
        )
    path = os.path.join(directory, f"{tag}.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path, workspace


class ReplayBoundReached(BenchError):
    """The server refused a decline with the principal's replay bound: wait for the held confirmations to expire."""


def decline_round_trip(send: Callable[[bytes], bytes], workspace: str, title: str, request_id: int) -> None:
    """first call -> the one-choice form -> decline -> complete, over `send`; BenchError on any other answer."""
    params: dict[str, Any] = {
        "_meta": META,
        "name": main.TOOL_NAME,
        "arguments": {"workspaceUri": workspace, "title": title},
    }
    first = json.loads(send(encode({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})))
    result = first.get("result") or {}
    if result.get("resultType") != "input_required":
        raise BenchError(f"first call for {title!r}: expected input_required, got {str(first)[:300]}")
    options = result["inputRequests"][main.INPUT_KEY]["params"]["requestedSchema"]["properties"][main.CHOICE_FIELD][
        "oneOf"
    ]
    if len(options) != 1:
        raise BenchError(f"first call for {title!r}: expected one choice, got {len(options)}")
    retry = dict(params, requestState=result["requestState"], inputResponses={main.INPUT_KEY: {"action": "decline"}})
    final = json.loads(send(encode({"jsonrpc": "2.0", "id": request_id + 1, "method": "tools/call", "params": retry})))
    if "Too many confirmations" in str(final.get("result")):
        raise ReplayBoundReached(f"decline for {title!r}: the replay bound")
    if (final.get("result") or {}).get("structuredContent") != {"deleted": False, "reason": "declined"}:
        raise BenchError(f"decline for {title!r}: expected declined, got {str(final)[:300]}")


class ScalingServer:
    """One stdio server on a scaling config, and what was measured on it so far."""

    def __init__(self, config: str, workspace: str, pick: Callable[[int], int]) -> None:
        self.server = StdioServer(server_argv("stdio", config))
        self.workspace, self.pick = workspace, pick
        self.done, self.elapsed = 0, 0.0
        self.server.send(DISCOVER, "server/discover")  # start-up is off the clock; the first lookup is not
        start = time.perf_counter()
        decline_round_trip(self.server.send, workspace, note_title(pick(0)), 1)
        self.first_ms = (time.perf_counter() - start) * 1000
        # The start-up report's store line: for a folder, how its index learns of changes.
        self.store_line = next(
            (line.split("notes store: ", 1)[1] for line in self.server.drain.lines if "notes store: " in line), ""
        )

    def run(self, seconds: float) -> None:
        """Round trips for about `seconds` more (at least SCALING_MIN_ROUND_TRIPS in all)."""
        budget = self.elapsed + seconds
        while self.elapsed < budget or self.done < SCALING_MIN_ROUND_TRIPS:
            start = time.perf_counter()
            try:
                decline_round_trip(
                    self.server.send, self.workspace, note_title(self.pick(self.done + 1)), 2 * self.done + 3
                )
            except ReplayBoundReached:
                # Faster than MAX_REPLAY_PER_PRINCIPAL per state lifetime: this round trip is not
                # counted, and the client waits, off the clock, for the held ones to expire.
                time.sleep(SCALING_TTL_SECONDS)
                continue
            self.elapsed += time.perf_counter() - start
            self.done += 1

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def close(self) -> None:
        self.server.close()


def scaling_rate(config: str, workspace: str, pick: Callable[[int], int], seconds: float) -> tuple[float, float]:
    """(round trips/s over stdio, ms of the first tools/call) for a server started on `config`."""
    measured = ScalingServer(config, workspace, pick)
    try:
        measured.run(seconds)
        return measured.rate, measured.first_ms
    finally:
        measured.close()


def scaling_in_turns(servers: list[ScalingServer], seconds: float, turns: int = SCALING_TURNS) -> None:
    """Measure each server `seconds` in all, in `turns` alternating slices: a passing load hits each alike."""
    for _ in range(turns):
        for measured in servers:
            measured.run(seconds / turns)


def folder_index_bytes_per_note(directory: str, size: int) -> tuple[float, float]:
    """(bytes per note the folder index holds, seconds to build it) for `size` notes in sub-folders, in process."""
    import markdown_store
    import sqlite_store

    notes, workspace, _ = scaling_notes(size, 1)
    config, uri = scaling_config(directory, "folder", notes, workspace, None)
    with open(config, encoding="utf-8") as handle:
        folder = json.load(handle)["principals"][PRINCIPAL]["notesDirs"][0]
    nonces = sqlite_store.open_ledger(os.path.join(directory, "index-memory.db"), clock=time.time)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        store = markdown_store.MarkdownNotesStore([folder], nonces)
        start = time.perf_counter()
        store.candidates(main.parse_file_uri(uri), note_title(0))
        took = time.perf_counter() - start
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    store.close()
    return held / size, took


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Round trips/s over stdio as the store grows, four stores, plus one shared server of many workspaces."""
    import postgres_cluster

    kinds = [kind for kind in SCALING_KINDS if kind in args.kinds.split(",")]
    missing = postgres_cluster.missing() if "postgres" in kinds else None
    if missing is not None:
        kinds.remove("postgres")
        print(f"  PostgreSQL left out: {missing}")
    section("How the cost grows with the notes: round trips/s over stdio (first call, form, decline, complete)")
    print(f"  {'notes':>26}" + "".join(f"{kind:>12}" for kind in kinds))
    table: dict[str, dict[str, float]] = {}
    first_ms: dict[str, dict[str, float]] = {}
    store_lines: dict[str, str] = {}
    left_out: list[str] = []
    cluster = postgres_cluster.Cluster(durable=True) if "postgres" in kinds else None
    try:
        if cluster is not None:
            cluster.start()
        with tempfile.TemporaryDirectory(prefix="notes-bench-scale-") as directory:
            rows = [(f"{size:,}", size, 1) for size in SCALING_SIZES]
            rows.append(
                (f"{SCALING_SIZES[-1]:,} in {SCALING_WORKSPACES:,} workspaces", SCALING_SIZES[-1], SCALING_WORKSPACES)
            )
            layouts = {label: scaling_notes(size, workspaces) for label, size, workspaces in rows}
            for label, _, _ in rows:
                table[label], first_ms[label] = {}, {}
            for kind in kinds:
                # One server per row, all alive at once, measured in turns (this machine's load
                # varies by the second; a figure per row taken minutes apart would compare loads).
                servers: dict[str, ScalingServer] = {}
                try:
                    for label, _, _ in rows:
                        notes, workspace, pick = layouts[label]
                        try:
                            config, uri = scaling_config(directory, kind, notes, workspace, cluster)
                        except ConfigTooLarge as exc:
                            left_out.append(f"{label} notes, {exc}")
                            continue
                        servers[label] = ScalingServer(config, uri, pick)
                    scaling_in_turns(list(servers.values()), args.seconds)
                    for label, measured in servers.items():
                        table[label][kind], first_ms[label][kind] = measured.rate, measured.first_ms
                        if kind == "folder":
                            store_lines[label] = measured.store_line
                finally:
                    for measured in servers.values():
                        measured.close()
            for label, _, _ in rows:
                print(
                    f"  {label:>26}"
                    + "".join(
                        f"{table[label][kind]:>12,.0f}" if kind in table[label] else f"{'-':>12}" for kind in kinds
                    ),
                    flush=True,
                )
            for reason in left_out:
                print(f"  - not measured: {reason}")
            small, large = f"{SCALING_SIZES[0]:,}", f"{SCALING_SIZES[-1]:,}"
            shares = "  ".join(
                f"{kind} {table[large][kind] / table[small][kind]:.0%}" for kind in kinds if kind in table[large]
            )
            # The lesson's memory store may scan: it is not held to the goal, only shown beside the others.
            ok = all(
                table[large][kind] >= SCALING_TARGET_SHARE * table[small][kind] for kind in kinds if kind != "memory"
            )
            row(
                f"share of the 10-note rate kept at {large}",
                shares,
                f"goal >= {SCALING_TARGET_SHARE:.0%}: {verdict(ok)}",
            )
            for label in (small, large):
                row(
                    f"first tools/call after start-up, {label} notes (ms)",
                    "  ".join(f"{k} {first_ms[label][k]:,.0f}" for k in kinds if k in first_ms[label]),
                )
            if "folder" not in kinds:
                return {"rates": table, "first_ms": first_ms}
            modes = sorted({mode for label, _, _ in rows for mode in [store_lines[label].rpartition("; ")[2]]})
            row("folder index, as each server's start-up report says", " / ".join(modes), f"{len(rows)} servers")
            per_note, built = folder_index_bytes_per_note(directory, SCALING_SIZES[-1])
            row(
                f"folder index: memory per note ({large} notes, tracemalloc)",
                f"{per_note:,.0f} bytes",
                f"built in {built:.1f} s",
            )
    finally:
        if cluster is not None:
            cluster.destroy()
    return {"rates": table, "first_ms": first_ms}


def scaling_rates(scaled: dict[str, Any]) -> dict[str, Any]:
    """A measure() result as recorded: the note counts, and per store its rate at each (None: not measured)."""
    rows = [scaled["rates"][f"{size:,}"] for size in SCALING_SIZES]
    kinds = [kind for kind in SCALING_KINDS if any(kind in at for at in rows)]
    return {
        "notes": list(SCALING_SIZES),
        "rates": {kind: [round(at[kind]) if kind in at else None for at in rows] for kind in kinds},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """`--mode scaling`: measure, then put the figures in `--record` when given."""
    scaled = measure(args)
    if args.record:
        record(args.record, [], scaling_rates(scaled), args.command)
    return scaled
