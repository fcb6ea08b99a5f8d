"""Figures for docs/stores.md: four writers queued behind another instance holding the write lock, and one read."""

from __future__ import annotations

import os, sqlite3, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "code"))
import main, sqlite_store, stores
d = tempfile.mkdtemp(); p = os.path.join(d, "notes.db")
store = sqlite_store.open_store(p, clock=time.time, seed_notes=main.lesson_notes(), busy_timeout_ms=1000)
holder = sqlite3.connect(p, isolation_level=None); holder.execute("BEGIN IMMEDIATE")
t0 = time.monotonic(); out = []
def w(i):
    try: store.consume("alice", f"n{i}", time.time() + 60, None, lambda n: False); out.append((i, "ok", time.monotonic() - t0))
    except stores.StoreBusy: out.append((i, "StoreBusy", time.monotonic() - t0))
ts = [threading.Thread(target=w, args=(i,)) for i in range(4)]
[t.start() for t in ts]
r0 = time.monotonic(); store.all(); read = time.monotonic() - r0
[t.join() for t in ts]
print(f"read while held: {read*1000:.1f} ms")
for i, what, at in sorted(out, key=lambda x: x[2]): print(f"writer {i}: {what} after {at:.2f} s")
holder.execute("ROLLBACK"); store.close()
