"""The lesson's command, `cd code && python3 -m unittest discover tests -v`, runs the whole suite.

The tests live in the project's top-level tests/ folder, beside code/; this folder holds
none. Discovery finds this module and its load_tests discovers that folder, so the
command as the lesson types it runs the same suite as `python3 -m unittest discover`
from the root.
"""

import os

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests")


def load_tests(loader, standard_tests, pattern):
    """Every test of the project's tests/ folder (this module has none of its own)."""
    standard_tests.addTests(loader.discover(TESTS, pattern=pattern or "test*.py", top_level_dir=TESTS))
    return standard_tests
