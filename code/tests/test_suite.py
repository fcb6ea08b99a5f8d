"""The lesson's command, `cd code && python3 -m unittest discover tests -v`, runs the lesson's tests.

They live in the project's top-level tests/ folder, beside code/: the checkpoints
(tests/test_checkpoints.py) and code/main.py's own unit tests (tests/test_lesson.py). This
folder holds no test of its own; the product's suite runs from the root with
`python3 -m unittest discover`.
"""

import os

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests")
LESSON_TESTS = ("test_checkpoints.py", "test_lesson.py")


def load_tests(loader, standard_tests, pattern):
    """The checkpoints, in the lesson's order, then main.py's own unit tests."""
    for name in LESSON_TESTS:
        standard_tests.addTests(loader.discover(TESTS, pattern=name, top_level_dir=TESTS))
    return standard_tests
