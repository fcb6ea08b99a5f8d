"""Figures for docs/reliability.md: confirmed deletions raced by a file exchange (renameat2 RENAME_EXCHANGE) timed by inotify.

    python3 docs/measure_exchange_race.py [TRIES]

Runs TRIES deletions with the arrival check, then TRIES without it (the check replaced
by one that accepts any file), and prints how each ended.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from helpers import races  # noqa: E402

tries = int(sys.argv[1]) if len(sys.argv) > 1 else 200
why = races.unavailable()
if why is not None:
    sys.exit(why)
for label, check in (("with the arrival check", True), ("without it", False)):
    outcomes = races.race(tries, check=check)
    print(f"{label}: of {tries} tries, {outcomes[races.WRONG]} trashed the wrong file")
    for outcome in (races.DELETED, races.REFUSED, races.PUT_BACK, races.WRONG):
        print(f"  {outcome}: {outcomes[outcome]}")
