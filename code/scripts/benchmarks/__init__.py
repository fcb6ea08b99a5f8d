"""The benchmark's modes, one module each, behind `python3 code/scripts/bench.py --mode MODE` (see `command`)."""
