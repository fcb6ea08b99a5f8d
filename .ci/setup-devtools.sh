#!/bin/sh
# CI: the development tools, never imported by the project (its runtime stays the standard
# library): the type checker (mypy) and the linter/formatter (ruff), into the venv OUTSIDE the
# checkout that .ci/setup-postgres.sh made; its python is $1. Each version is the one pinned in
# pyproject.toml's `[project.optional-dependencies] dev` list; a tool already at its pin is kept.
set -eu
PY="$1"
for TOOL in mypy ruff; do
    PIN="$("$PY" -c 'import sys, tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if d.startswith(sys.argv[1] + "==")))' "$TOOL")" \
        || { echo "setup-devtools: pyproject.toml's dev extra pins no $TOOL==VERSION" >&2; exit 1; }
    if [ "$("$PY" -m "$TOOL" --version 2>/dev/null | cut -d' ' -f2)" != "${PIN#"$TOOL"==}" ]; then
        "$PY" -m pip install --quiet "$PIN" >&2 || { echo "setup-devtools: pip install $PIN failed" >&2; exit 1; }
    fi
done
