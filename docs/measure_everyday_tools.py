"""Figures for docs/tools.md: what a move's link scan and a notes_list page cost at MAX_LINK_SCAN notes.

    python3 docs/measure_everyday_tools.py [NOTES]

NOTES Markdown notes (5,000 by default, MAX_LINK_SCAN) of about 1 kB in one folder, 20
of them linking to `note-00000` as `[[note-00000]]`, in a Markdown folder and in SQLite;
in process (`frame.Server.handle`), medians of five calls each: the first call of a
`notes_move` of note-00000 (the scan for links and the form listing them), a first
`notes_list` page of 50 and the next page by its cursor.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "code"))
import audit  # noqa: E402
import frame  # noqa: E402
import main  # noqa: E402
import markdown_store  # noqa: E402
import notes_tools  # noqa: E402
import sqlite_store  # noqa: E402

count = int(sys.argv[1]) if len(sys.argv) > 1 else notes_tools.MAX_LINK_SCAN
FORM = {"elicitation": {"form": {}}}
filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n" * 16


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tools/call from a client that shows forms."""
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": main.request_meta(FORM)}}


def timed(server: frame.Server, workspace: str, name: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """The median of five calls' seconds, and the last result."""
    times, result = [], {}
    for _ in range(5):
        message = call(name, arguments)
        started = time.perf_counter()
        response = server.handle(message, "alice")
        times.append(time.perf_counter() - started)
        assert response is not None and "result" in response, response
        result = response["result"]
    return statistics.median(times), result


def measure(kind: str, store: Any, workspace: str) -> None:
    """Print one store's figures."""
    server = frame.notes_server(keys=[b"k" * 32], notes=store, policy=main.AuthorizationPolicy({"alice": [workspace]}),
                                log=lambda line: None)
    audit.install(server)
    notes_tools.install(server)
    ids = {entry["title"]: entry["noteId"] for entry in store_titles(server, workspace)}
    move, form = timed(server, workspace, "notes_move", {"workspaceUri": workspace, "noteId": ids["note-00000"], "newPath": "moved.md"})
    listed = form["inputRequests"][notes_tools.MOVE_KEY]["params"]["message"].count("\u2192")
    first, page = timed(server, workspace, "notes_list", {"workspaceUri": workspace})
    after, _ = timed(server, workspace, "notes_list", {"workspaceUri": workspace, "cursor": page["structuredContent"]["nextCursor"]})
    print(f"{kind}: {count:,} notes; move form (scan + {listed} links listed) {move * 1000:.0f} ms; "
          f"notes_list first page {first * 1000:.0f} ms, next page {after * 1000:.0f} ms")


def store_titles(server: frame.Server, workspace: str) -> list[dict[str, Any]]:
    """Every note of the workspace, by notes_list, pages of 200."""
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        arguments = {"workspaceUri": workspace, "limit": notes_tools.MAX_LIST_LIMIT, **({"cursor": cursor} if cursor else {})}
        response = server.handle(call("notes_list", arguments), "alice")
        assert response is not None
        page = response["result"]["structuredContent"]
        entries += page["entries"]
        cursor = page.get("nextCursor")
        if cursor is None:
            return entries


def text(k: int) -> str:
    """Note k's text: 20 notes link to note-00000."""
    return filler + ("See [[note-00000]].\n" if k % (count // 20) == 1 else "")


base = tempfile.mkdtemp(prefix="everyday-")
try:
    folder = os.path.join(base, "Notes")
    os.makedirs(folder)
    for k in range(count):
        with open(os.path.join(folder, f"note-{k:05d}.md"), "w", encoding="utf-8") as handle:
            handle.write(text(k))
    nonces = sqlite_store.open_ledger(os.path.join(base, "nonces.db"), clock=time.time)
    folder_store = markdown_store.MarkdownNotesStore([folder], nonces)
    measure("Markdown folder", folder_store, folder_store.workspace_uris()[0])
    folder_store.close()
    sql = sqlite_store.open_store(os.path.join(base, "notes.db"), clock=time.time)
    workspace = "file:///Users/alice/Notes"
    for k in range(count):
        sql.put(main.Note(f"n{k}", f"note-{k:05d}", f"{workspace}/note-{k:05d}.md"))
    # Bodies are written as the tools would see them: in the note's body column.
    conn_write = sql.ledger.db.write_with
    conn_write(lambda conn: [conn.execute("UPDATE notes SET body = ? WHERE id = ?", (text(k), f"n{k}")) for k in range(count)])
    measure("SQLite", sql, workspace)
    sql.close()
finally:
    shutil.rmtree(base, ignore_errors=True)
