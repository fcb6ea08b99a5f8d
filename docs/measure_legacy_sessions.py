"""Figures for docs/legacy.md: the memory one 2025-11-25 HTTP session holds, and one principal's sessions at the bound.

    python3 docs/measure_legacy_sessions.py

Each session is a whole command-line run left behind (initialize with clientInfo name and
version at their longest kept length, notifications/initialized, tools/list, no DELETE),
served in process by LegacyHttp over the lesson server; tracemalloc counts what stays.
"""

from __future__ import annotations

import gc, json, os, sys, threading, tracemalloc
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "code"))
import http_server, legacy, legacy_http, main

sessions = legacy_http.LegacyHttp(main.lesson_server(keys=[bytes(32)]), log=lambda line: None)
info = {"name": "n" * legacy.MAX_CLIENT_INFO_CHARS, "version": "v" * legacy.MAX_CLIENT_INFO_CHARS}
initialize = {"protocolVersion": legacy.LATEST_LEGACY_VERSION, "capabilities": {"elicitation": {}, "roots": {}}, "clientInfo": info}


def post(message: dict, session_id: str | None = None) -> http_server.Response:
    headers = [("content-type", "application/json")] + ([("mcp-session-id", session_id)] if session_id else [])
    request = http_server.Request("POST", "/mcp", "HTTP/1.1", headers, json.dumps(message).encode(), ("127.0.0.1", 1), threading.Event())
    return sessions.route(request, main.LESSON_PRINCIPAL)


def short_run() -> None:
    session_id = dict(post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize}).headers)["Mcp-Session-Id"]
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session_id)


bound = legacy_http.MAX_SESSIONS_PER_PRINCIPAL
short_run()  # the first run loads and caches what every later one shares
gc.collect()
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
for _ in range(bound - 1):
    short_run()
gc.collect()
per_session = (tracemalloc.get_traced_memory()[0] - before) / (bound - 1)
assert sessions.session_count(main.LESSON_PRINCIPAL) == bound
print(f"{per_session / 1024:.1f} KB per session; {bound} sessions of one principal (the bound): {per_session * bound / 1024 / 1024:.2f} MB")
