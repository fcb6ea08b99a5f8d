#!/bin/sh
# CI: make the PostgreSQL store tests runnable so they never skip.
#   1. the server binaries (initdb, pg_ctl): Debian's postgresql package when missing;
#   2. psycopg 3 in a venv OUTSIDE the checkout, created with --system-site-packages.
# The last line printed is the venv's python; any failure exits non-zero with one line.
set -eu

fail() {
    echo "setup-postgres: $*" >&2
    exit 1
}

have_server_binaries() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && return 0
    done
    return 1
}

if ! have_server_binaries; then
    echo "setup-postgres: installing Debian's postgresql package" >&2
    apt-get update >&2 || fail "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2 || fail "apt-get install postgresql failed"
    have_server_binaries || fail "postgresql is installed but initdb/pg_ctl are still missing"
fi

VENV="${XDG_CACHE_HOME:-$HOME/.cache}/notes-mcp-ci/venv"
if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")" || fail "cannot create $(dirname "$VENV")"
    python3 -m venv --system-site-packages "$VENV" >&2 || fail "cannot create the venv at $VENV (is python3-venv installed?)"
fi
if ! "$VENV/bin/python" -c "import psycopg" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet 'psycopg[binary]>=3.2' >&2 || fail "pip install 'psycopg[binary]>=3.2' failed"
fi
"$VENV/bin/python" -c "import psycopg" >/dev/null 2>&1 || fail "psycopg does not import in $VENV"
echo "$VENV/bin/python"
