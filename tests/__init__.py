"""The test suite. Run all of it from the project root with `python3 -m unittest discover`.

The test modules import their shared helpers and the code under test as top-level
names (`from helpers import support`, `import main`), so this package puts its own
folder on the import path; `tests/helpers/support.py` adds `code/`. That makes the three spellings equivalent:
`python3 -m unittest discover`, `python3 -m unittest discover tests` and
`python3 -m unittest discover -s tests`, and `python3 -m unittest tests.test_checkpoints`
runs one file. The lesson's `cd code && python3 -m unittest discover tests` runs this
folder too, through code/tests/test_suite.py.

From the root, `load_tests` below runs the fast tier (tests/fast.py: the tests that stay in
this process) first, with processes and sockets refused, then the rest.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# This process keeps the bytecode it compiles (in __pycache__, which git ignores), as the
# processes it starts do (tests/helpers/support.py): under PYTHONDONTWRITEBYTECODE each run
# compiled every test module and every module of code/ it imports again, about 0.4 s of CPU.
sys.dont_write_bytecode = False


def load_tests(loader, standard_tests, pattern):
    """This folder's tests as discovery finds them, the fast tier first and guarded."""
    import gc

    from tests import fast

    standard_tests.addTest(fast.load(loader.discover(start_dir=_HERE, pattern=pattern or "test*.py")))
    # Every module is loaded now: what they hold lives until the run ends, so the cyclic
    # collector is told not to walk it again at each collection (about 5% of the CPU time
    # of the tests that run in this process).
    gc.freeze()
    return standard_tests
