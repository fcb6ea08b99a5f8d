"""The test suite. Run all of it from the project root with `python3 -m unittest discover`.

The test modules import their shared helpers and the code under test as top-level
names (`from helpers import support`, `import main`), so this package puts its own
folder on the import path; `tests/helpers/support.py` adds `code/`. That makes the three spellings equivalent:
`python3 -m unittest discover`, `python3 -m unittest discover tests` and
`python3 -m unittest discover -s tests`, and `python3 -m unittest tests.test_checkpoints`
runs one file. The lesson's `cd code && python3 -m unittest discover tests` runs this
folder too, through code/tests/test_suite.py.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
