#!/bin/sh
# CI: the real MCP clients the client tests drive (the official Python SDK and fastmcp),
# into the venv OUTSIDE the checkout that .ci/setup-postgres.sh made; its python is $1.
set -eu
PY="$1"
if ! "$PY" -c "import mcp, fastmcp" >/dev/null 2>&1; then
    "$PY" -m pip install --quiet 'mcp==2.3.0' 'fastmcp==4.2.3' >&2 || { echo "setup-clients: pip install mcp fastmcp failed" >&2; exit 1; }
fi
"$PY" -c "import mcp, fastmcp" >/dev/null 2>&1 || { echo "setup-clients: mcp or fastmcp does not import with $PY" >&2; exit 1; }
