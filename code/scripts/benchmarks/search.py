"""`--mode search`: notes_search in process over the SQL stores, then the folder store on generated vaults."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.parse
from collections.abc import Callable
from functools import partial
from typing import Any

import frame
import main
import stores
import text_index

from .common import (
    BENCH_PY,
    PRINCIPAL,
    WORKSPACE,
    BenchError,
    encode,
    note_id,
    note_title,
    open_target,
    row,
    section,
    server_over,
    verdict,
)

__all__ = ["VAULT_SIZES", "run", "vault_worker"]

SEARCH_SIZES = (10, 100_000)  # notes in the workspace, each with a title and a few lines of text
SEARCH_KINDS = ("sqlite", "postgres")


def search_text(i: int) -> str:
    """The text of search note i: shared words, and one word (12 hex digits, fixed per i) no other note holds."""
    word = hashlib.sha256(f"note {i}".encode()).hexdigest()[:12]
    return f"Meeting notes for the quarterly plan.\nAction item {word}: follow up with the team.\n"


def search_word(i: int) -> str:
    """The word only note i holds (what a search asks for: one match)."""
    return search_text(i).split("Action item ")[1][:12]


def search_store(kind: str, size: int, where: str) -> Any:
    """A `kind` store of `size` notes with text in the bench workspace (`where`: a folder or a PostgreSQL URL)."""
    seed = [main.Note(note_id(i), note_title(i), f"{WORKSPACE}/n{i}.md", 1) for i in range(size)]
    store = open_target(where if kind == "postgres" else os.path.join(where, f"search-{size}.db"), seed)
    rows = [(search_text(i), stores.fold_title(search_text(i)), note_id(i)) for i in range(size)]
    sql = "UPDATE notes SET body = ?, body_folded = ? WHERE id = ?"
    if kind == "postgres":
        import psycopg

        with psycopg.connect(where, autocommit=False) as conn:
            conn.cursor().executemany(sql.replace("?", "%s"), rows)
        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE notes")  # as autovacuum would, after a bulk load
    else:
        import sqlite3

        db = sqlite3.connect(os.path.join(where, f"search-{size}.db"), isolation_level=None)
        db.execute("BEGIN")
        db.executemany(sql, rows)
        db.execute("COMMIT")
        # As the store's own checkpoint would leave it: searches read the file, not a 100,000-row log.
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    return store


SEARCH_COMMON = "meeting"  # a word every search note holds (search_text)
SEARCH_REPEATS = 31  # calls per query whose median is reported
SEARCH_RSS_GROWTH_MB = 10  # goal: a store's RSS grows less than this over its searches of the common word


def rss_mb() -> float:
    """This process's resident set size now, in MB (Linux /proc)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def tool_search(server: frame.Server, workspace: str, query: str, limit: int = 10) -> dict[str, Any]:
    """One notes_search through handle_bytes; its structuredContent."""
    params = {
        "_meta": main.request_meta({}),
        "name": "notes_search",
        "arguments": {"workspaceUri": workspace, "query": query, "limit": limit},
    }
    raw = server.handle_bytes(encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}), PRINCIPAL)
    result = json.loads(raw or b"{}").get("result", {})
    if result.get("isError") or "structuredContent" not in result:
        raise BenchError(f"notes_search {query!r} answered {str(result)[:200]}")
    return result["structuredContent"]


def p50_ms(call: Callable[[], Any], repeats: int = SEARCH_REPEATS) -> float:
    """The median of `repeats` timed calls, in ms (one untimed call first)."""
    return p50s_ms(call, repeats)[0]


def p50s_ms(call: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """The medians of `repeats` calls, in ms: the time they took, and the CPU time this thread spent in them."""
    # On a machine shared with other work the first includes the time waited for a core;
    # the second is the call's own work, which a load average of 8 on 2 cores leaves alone.
    call()
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        call()
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    return statistics.median(times), statistics.median(cpu)


def old_shape_search(kind: str, store: Any, query: str) -> int:
    """The search before its work was bounded: every row holding the query read with its body, tested in Python."""
    import title_index

    needle = stores.fold_title(query)
    low, high = title_index.uri_range(main.parse_file_uri(WORKSPACE))
    if kind == "postgres":
        pattern = "%" + needle + "%"
        rows = store.read_with(
            lambda conn: conn.execute(
                "SELECT id, title, uri, revision, body FROM notes"
                " WHERE (uri || '') COLLATE \"C\" >= %s AND (uri || '') COLLATE \"C\" < %s"
                " AND (folded LIKE %s OR body_folded LIKE %s)",
                (low, high, pattern, pattern),
                prepare=False,
            ).fetchall()
        )
    else:
        rows = store.read_with(
            lambda conn: conn.execute(
                "SELECT id, title, uri, revision, body FROM notes"
                " WHERE rowid IN (SELECT rowid FROM note_search WHERE note_search MATCH ?)"
                " AND uri >= ? AND uri < ?",
                ('"' + needle + '"', low, high),
            ).fetchall()
        )
    return len(title_index.exact_text(rows, main.parse_file_uri(WORKSPACE), needle, 11))


def search_figures(kind: str, size: int, store: Any) -> dict[str, Any]:
    """notes_search p50s of a rare and the common word over `store` (`size` notes), RSS growth, the old shape's."""
    import notes_tools  # the opt-in tools this mode measures

    server = server_over(store, PRINCIPAL)
    notes_tools.install(server)
    rare = p50_ms(lambda: tool_search(server, WORKSPACE, search_word(size // 2)))
    before = rss_mb()
    common = p50_ms(lambda: tool_search(server, WORKSPACE, SEARCH_COMMON))
    growth = rss_mb() - before
    stopped = tool_search(server, WORKSPACE, SEARCH_COMMON)["stoppedEarly"]
    old_rare = p50_ms(lambda: old_shape_search(kind, store, search_word(size // 2)), 5)
    old_common = p50_ms(lambda: old_shape_search(kind, store, SEARCH_COMMON), 3)
    return {
        "rare": rare,
        "common": common,
        "growth": growth,
        "old_rare": old_rare,
        "old_common": old_common,
        "stopped": stopped,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """`--mode search`: notes_search p50s at 10 and 100,000 notes per SQL store, then the folder store's vaults."""

    kinds = [kind for kind in args.kinds.split(",") if kind in SEARCH_KINDS] or ["sqlite"]
    figures: dict[str, Any] = {}
    cluster = None
    if "postgres" in kinds:
        import postgres_cluster

        reason = postgres_cluster.missing()
        if reason is not None:
            print(f"PostgreSQL skipped: {reason}")
            kinds.remove("postgres")
        else:
            cluster = postgres_cluster.Cluster()
            cluster.start()
    section(
        f"notes_search p50 (ms) in-process: a word one note holds, and {SEARCH_COMMON!r}, which every note holds; "
        "goal at 100,000: common <= 5x rare, RSS growth < 10 MB"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="notes-bench-search-") as directory:
            for kind in kinds:
                for size in SEARCH_SIZES:
                    store = search_store(
                        kind, size, cluster.new_database() if kind == "postgres" and cluster else directory
                    )
                    try:
                        measured = search_figures(kind, size, store)
                    finally:
                        store.close()
                    figures[f"{kind}-{size}"] = measured
                    rare, common, growth = measured["rare"], measured["common"], measured["growth"]
                    old_rare, old_common, stopped = (
                        measured["old_rare"],
                        measured["old_common"],
                        measured.pop("stopped"),
                    )
                    row(
                        f"{kind}, {size:,} notes: rare / common p50",
                        f"{rare:.2f} / {common:.2f} ms",
                        f"ratio {common / rare:.1f}x, stoppedEarly {stopped}, RSS +{growth:.1f} MB"
                        + (
                            f" {verdict(common <= 5 * rare and growth < SEARCH_RSS_GROWTH_MB)}"
                            if size == SEARCH_SIZES[-1]
                            else ""
                        ),
                    )
                    row(
                        f"{kind}, {size:,} notes: unbounded shape (before)",
                        f"{old_rare:.2f} / {old_common:.2f} ms",
                        f"ratio {old_common / old_rare:.1f}x: every matching row and body read",
                    )
    finally:
        if cluster is not None:
            cluster.destroy()
    figures["folder"] = run_vault_search(args)
    return figures


VAULT_SIZES = (1_000, 10_000, 100_000)  # notes in a generated vault (--vault-sizes to change)
VAULT_WORDS = 5_000  # distinct ordinary words, Zipf-distributed
VAULT_WORDS_PER_NOTE = 120
# calls per query whose median is reported on a vault: more than SEARCH_REPEATS, so a burst of
# other work on a shared machine moves the median less
VAULT_REPEATS = 101
VAULT_RSS_GOAL_MB = 60  # goal: the serving process's peak RSS at 10,000 notes
FIRST_SEARCH_GOAL_S = 1.0  # goal: the first search after start-up on an indexed vault
LARGE_NOTE_BYTES = 200_000  # --large-notes: the size of each note written after the index was built

# The planted notes: (path, text, query). Each note must come in the top 5 of its query.
PLANTED: tuple[tuple[str, str, str, str], ...] = (
    (
        "a tag",
        "legal/contract-review.md",
        "---\ntags: [urgent-legal]\n---\n# Contract review\nThe clauses we discussed.\n",
        "urgent-legal",
    ),
    (
        "title words",
        "travel/zanzibar-ferry-timetable.md",
        "# Zanzibar ferry timetable\nBoats leave at noon and at six.\n",
        "Zanzibar ferry timetable",
    ),
    (
        "a phrase in another case",
        "work/budget.md",
        "# Budget\nThe Quarterly Budget Review is on Friday.\n",
        '"quarterly budget review"',
    ),
    ("Japanese", "travel/tokyo.md", "# 旅行メモ\n昨日は東京タワーに登りました。\n", "東京タワー"),
    (
        "two words apart",
        "finance/trip-costs.md",
        "# Trip costs\nThe hotel invoice arrived late.\n\nPaid at the office in Lisbon.\n",
        "Lisbon invoice",
    ),
    (
        "a rare heading word",
        "ops/db.md",
        "# Database notes\n## Pgbouncer tuning\npool sizes and timeouts\n",
        "pgbouncer",
    ),
    (
        "an exact phrase",
        "work/falcon.md",
        "# Project notes\nThe falcon retrospective went well.\n",
        '"falcon retrospective"',
    ),
    (
        "a deep title",
        "a/b/c/d/e/catalogue.md",
        "# Deep archive catalogue\nshelves and boxes\n",
        "deep archive catalogue",
    ),
    ("a word in one note", "misc/animals.md", "# Animals\nA quokka smiled at us.\n", "quokka"),
    (
        "an NFD name",
        unicodedata.normalize("NFD", "cv/Résumé tips.md"),
        unicodedata.normalize("NFD", "# Résumé tips\nKeep it short.\n"),
        "résumé tips",
    ),
)
# Queries timed at every size: a rare word, a common word, a phrase, two words far apart.
VAULT_QUERIES = (
    ("rare word", "quokka"),
    ("common word", "w0001"),
    ("phrase", '"w0001 w0002"'),
    ("two words apart", "lisbon invoice"),
)


def vault_word(k: int) -> str:
    """Ordinary word k (w0000 the most frequent)."""
    return f"w{k:04d}"  # fixed width: no word is a piece of another


def make_vault(root: str, size: int) -> None:
    """A vault of `size` notes: frontmatter, [[links]], tags, Zipf words, CJK and NFD names, the planted notes."""
    rng = random.Random(size)
    weights = list(itertools.accumulate(1 / (k + 1) for k in range(VAULT_WORDS)))
    words = [vault_word(k) for k in range(VAULT_WORDS)]
    for folder in range(max(1, size // 200)):
        os.makedirs(os.path.join(root, f"f{folder:03d}"), exist_ok=True)
    for i in range(size - len(PLANTED)):
        body = " ".join(rng.choices(words, cum_weights=weights, k=VAULT_WORDS_PER_NOTE))
        if i % 50 == 0:
            title, name = f"会議メモ {i}", f"会議メモ {i}.md"
            body += " 会議の記録と次の予定。"
        elif i % 40 == 0:
            title = unicodedata.normalize("NFD", f"Café notes {i}")
            name = title + ".md"
        else:
            title, name = f"Note {i} {words[rng.randrange(VAULT_WORDS)]}", f"note-{i}.md"
        link = " see [[Zanzibar ferry timetable]]" if i < 7 else f" see [[Note {rng.randrange(size)}]]"
        text = f"---\ntags: [t{i % 30}]\n---\n# {title}\n{body}{link}\n"
        with open(os.path.join(root, f"f{i % max(1, size // 200):03d}", name), "w", encoding="utf-8") as handle:
            handle.write(text)
    for _, path, text, _ in PLANTED:
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as handle:
            handle.write(text)


def vault_worker(spec: str) -> int:
    """A child: the folder store on a vault (`SIZE:DIR:build|serve`) builds or serves its index; prints its figures."""
    import markdown_store
    import notes_tools
    import sqlite_store
    import text_index

    size, where, phase = spec.split(":")
    root, state = os.path.join(where, "vault"), os.path.join(where, "state")
    start = time.perf_counter()
    nonces = sqlite_store.open_ledger(os.path.join(state, "nonces.db"), clock=time.time)
    store = markdown_store.MarkdownNotesStore(
        [root], nonces, text_index_path=text_index.index_path(os.path.join(state, "nonces.db"))
    )
    workspace = main.format_file_uri(main.parse_file_uri("file://" + root))
    policy = main.AuthorizationPolicy({PRINCIPAL: [workspace]})
    server = frame.notes_server(keys=[secrets.token_bytes(32)], notes=store, policy=policy, log=lambda line: None)
    notes_tools.install(server)
    figures: dict[str, Any] = {}
    if phase == "large":
        return large_notes_worker(server, store, workspace, int(size), root)
    first = tool_search(server, workspace, "quokka")
    figures["first_s"] = time.perf_counter() - start
    figures["first_stopped"] = first["stoppedEarly"]
    # What the first search left (a build's rest, the comparison after start-up) runs in
    # the background: waited for here, so the build is timed whole and the p50s below are
    # not shared with it.
    store.text_index.wait_idle()
    figures["settled_s"] = time.perf_counter() - start
    if phase == "build":
        figures["index_bytes"] = store.text_index.size_bytes()
    else:
        measured = {
            label: p50s_ms(partial(tool_search, server, workspace, query), VAULT_REPEATS)
            for label, query in VAULT_QUERIES
        }
        figures["p50"] = {label: wall for label, (wall, _) in measured.items()}
        figures["cpu"] = {label: cpu for label, (_, cpu) in measured.items()}
        figures["stopped"] = {
            label: tool_search(server, workspace, query)["stoppedEarly"] for label, query in VAULT_QUERIES
        }
        quality = {}
        for label, path, _, query in PLANTED:
            hits = [hit["noteId"] for hit in tool_search(server, workspace, query, 5)["results"]]
            quality[label] = unicodedata.normalize("NFC", path) in [
                unicodedata.normalize("NFC", urllib.parse.unquote(h)) for h in hits
            ]
        figures["quality"] = quality
        # VmHWM, not ru_maxrss: Linux keeps the parent's peak across exec in the latter.
        with open("/proc/self/status") as handle:
            figures["rss_mb"] = next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1000
    store.close()
    print(json.dumps(figures))
    return 0


def large_notes_worker(server: frame.Server, store: Any, workspace: str, count: int, root: str) -> int:
    """A child: the index built, `count` notes of LARGE_NOTE_BYTES written; the next searches' times, stoppedEarly."""
    figures: dict[str, Any] = {}
    tool_search(server, workspace, "quokka")
    store.text_index.wait_idle()
    rng = random.Random(count)
    words = [vault_word(k) for k in range(VAULT_WORDS)]
    os.makedirs(os.path.join(root, "large"))
    for i in range(count):
        text = f"# Large note {i}\n" + " ".join(rng.choices(words, k=LARGE_NOTE_BYTES // 5))
        with open(os.path.join(root, "large", f"large-{i:04d}.md"), "w", encoding="utf-8") as handle:
            handle.write(text[:LARGE_NOTE_BYTES])
    for label in ("first", "during"):
        start = time.perf_counter()
        found = tool_search(server, workspace, "quokka")
        figures[label] = [time.perf_counter() - start, found["stoppedEarly"]]
    start = time.perf_counter()
    store.text_index.wait_idle()
    figures["indexed_s"] = time.perf_counter() - start
    start = time.perf_counter()
    found = tool_search(server, workspace, "quokka")
    figures["after"] = [time.perf_counter() - start, found["stoppedEarly"]]
    # Two words every large note holds: the rows ranked are the row bound's, each of 200 kB.
    # Scored on each note's first MAX_SCORED_CHARS, then (as before that bound) on the whole text.
    common = f"{vault_word(0)} {vault_word(1)}"
    for label, scored in (("common", text_index.MAX_SCORED_CHARS), ("common_whole", LARGE_NOTE_BYTES * 2)):
        text_index.MAX_SCORED_CHARS = scored
        start = time.perf_counter()
        found = tool_search(server, workspace, common)
        figures[label] = [time.perf_counter() - start, found["stoppedEarly"]]
    store.close()
    print(json.dumps(figures))
    return 0


def run_large_notes(args: argparse.Namespace) -> None:
    """--large-notes N: the planted notes indexed, then N notes of 200 kB written by a model; the next search."""
    count = args.large_notes
    section(f"folder store: {count:,} notes of {LARGE_NOTE_BYTES // 1000} kB written after the index was built")
    with tempfile.TemporaryDirectory(prefix="notes-bench-large-", dir=args.vault_dir) as where:
        os.makedirs(os.path.join(where, "vault"))
        os.makedirs(os.path.join(where, "state"))
        make_vault(os.path.join(where, "vault"), len(PLANTED))
        out = subprocess.run(
            [sys.executable, BENCH_PY, "--vault-worker", f"{count}:{where}:large"], capture_output=True, check=False
        )
        if out.returncode != 0:
            raise BenchError(f"large notes worker: {out.stderr.decode()[-400:]}")
        figures = json.loads(out.stdout.decode().strip().splitlines()[-1])
    for label, what in (
        ("first", "the next search"),
        ("during", "a search while the rest is read"),
        ("after", "a search once all are indexed"),
    ):
        seconds, stopped = figures[label]
        row(what, f"{seconds:.3f} s", f"stoppedEarly: {str(stopped).lower()}")
    row("the rest read in the background in", f"{figures['indexed_s']:.1f} s")
    for label, what in (
        ("common", "two common words, scored on each note's start"),
        ("common_whole", "the same, scored whole"),
    ):
        seconds, stopped = figures[label]
        row(what, f"{seconds:.3f} s", f"stoppedEarly: {str(stopped).lower()}")


def reused_vault(directory: str, size: int) -> tuple[str, float | None]:
    """The folder of a vault of `size` notes in `directory`, made unless a whole one is there; its state emptied."""
    where = os.path.join(directory, str(size))
    vault = os.path.join(where, "vault")
    made = None
    if not os.path.exists(os.path.join(vault, PLANTED[-1][1])):  # written last: the vault is complete
        shutil.rmtree(where, ignore_errors=True)
        os.makedirs(vault)
        made = time.perf_counter()
        make_vault(vault, size)
        made = time.perf_counter() - made
    shutil.rmtree(os.path.join(where, "state"), ignore_errors=True)
    os.makedirs(os.path.join(where, "state"))
    return where, made


def run_vault_search(args: argparse.Namespace) -> dict[int, Any]:
    """The folder store on generated vaults: index build and size, first search, p50s against 1,000, quality."""
    sizes = [int(n) for n in args.vault_sizes.split(",") if n]
    section(
        "folder store, generated vaults (Zipf words, frontmatter, links, tags, CJK and NFD names): "
        "notes_search in-process"
    )
    figures: dict[int, Any] = {}
    load = os.getloadavg()  # other work on the machine moves these figures: said beside them
    # --vault-dir keeps the generated vaults (100,000 notes take minutes to write) for the
    # next run; the index is built again every time.
    with contextlib.ExitStack() as stack:
        directory = args.vault_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="notes-bench-vault-"))
        for size in sizes:
            where, made = reused_vault(directory, size)
            runs = {}
            for phase in ("build", "serve"):
                out = subprocess.run(
                    [sys.executable, BENCH_PY, "--vault-worker", f"{size}:{where}:{phase}"],
                    capture_output=True,
                    check=False,
                )
                if out.returncode != 0:
                    raise BenchError(f"vault worker {size} {phase}: {out.stderr.decode()[-400:]}")
                runs[phase] = json.loads(out.stdout.decode().strip().splitlines()[-1])
            figures[size] = {
                "build_s": runs["build"]["settled_s"],
                "build_first_s": runs["build"]["first_s"],
                "index_bytes": runs["build"]["index_bytes"],
                **runs["serve"],
            }
            if not args.vault_dir:
                shutil.rmtree(where, ignore_errors=True)
            written = "vault reused" if made is None else f"vault written in {made:.1f} s"
            row(
                f"{size:,} notes: index built (first search, then the background)",
                f"{figures[size]['build_s']:.1f} s",
                f"{figures[size]['index_bytes'] / 1e6:.1f} MB on disk; the first search answered in "
                f"{figures[size]['build_first_s']:.1f} s; {written}",
            )
            row(
                f"{size:,} notes: first search after start-up, indexed",
                f"{figures[size]['first_s']:.3f} s",
                f"stoppedEarly: {str(figures[size]['first_stopped']).lower()}; "
                f"{verdict(figures[size]['first_s'] <= FIRST_SEARCH_GOAL_S)}",
            )
            row(
                f"{size:,} notes: compared with the files in the background",
                f"{figures[size]['settled_s']:.2f} s",
                "after start-up; searches meanwhile say stoppedEarly",
            )
            row(
                f"{size:,} notes: peak RSS of the serving process",
                f"{figures[size]['rss_mb']:.0f} MB",
                verdict(figures[size]["rss_mb"] <= VAULT_RSS_GOAL_MB) if size == 10_000 else "",
            )
            for label, _ in VAULT_QUERIES:
                ms, cpu = figures[size]["p50"][label], figures[size]["cpu"][label]
                base, base_cpu = figures[sizes[0]]["p50"][label], figures[sizes[0]]["cpu"][label]
                row(
                    f"{size:,} notes: p50 {label}",
                    f"{ms:.2f} ms",
                    f"{ms / base:.2f}x of {sizes[0]:,} {verdict(ms <= 2 * base)}; "
                    f"CPU {cpu:.2f} ms ({cpu / base_cpu:.2f}x); "
                    f"stoppedEarly: {str(figures[size]['stopped'][label]).lower()}",
                )
    before, after = (", ".join(f"{x:.1f}" for x in avg) for avg in (load, os.getloadavg()))
    row("load average (1, 5, 15 min)", "", f"before the vaults {before}; after {after}")
    section("quality: is each planted note in the top 5 of its query?")
    print(f"  {'query':28}" + "".join(f"{size:>10,}" for size in sizes))
    for label, _, _, query in PLANTED:
        print(
            f"  {label + ' (' + query + ')':28.28}"
            + "".join(f"{'yes' if figures[size]['quality'][label] else 'NO':>10}" for size in sizes)
        )
    print(f"  {'in the top 5':28}" + "".join(f"{sum(figures[size]['quality'].values()):>7}/10" for size in sizes))
    if args.large_notes:
        run_large_notes(args)
    return figures
