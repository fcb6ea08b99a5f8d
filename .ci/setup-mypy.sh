#!/bin/sh
# CI: the type checker, a development tool only (nothing imports it), into the venv OUTSIDE
# the checkout that .ci/setup-postgres.sh made; its python is $1. The version is the one
# pinned in pyproject.toml's `[project.optional-dependencies] dev` list.
set -eu
PY="$1"
PIN="$("$PY" -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if d.startswith("mypy==")))')"
if [ "$("$PY" -m mypy --version 2>/dev/null | cut -d' ' -f2)" != "${PIN#mypy==}" ]; then
    "$PY" -m pip install --quiet "$PIN" >&2 || { echo "setup-mypy: pip install $PIN failed" >&2; exit 1; }
fi
