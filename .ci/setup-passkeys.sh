#!/bin/sh
# CI: the optional WebAuthn library of the confirmation page's passkeys (the extra
# notes-mcp[passkeys]: Yubico's fido2, which needs only `cryptography`), into the venv OUTSIDE
# the checkout that .ci/setup-postgres.sh made; its python is $1. The requirement is the one
# pyproject.toml's `[project.optional-dependencies] passkeys` list names.
set -eu
PY="$1"
REQ="$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["passkeys"][0])')"
if ! "$PY" -c "import fido2" >/dev/null 2>&1; then
    "$PY" -m pip install --quiet "$REQ" >&2 || { echo "setup-passkeys: pip install $REQ failed" >&2; exit 1; }
fi
"$PY" -c "import fido2.webauthn, fido2.cose" >/dev/null 2>&1 || { echo "setup-passkeys: fido2 does not import with $PY" >&2; exit 1; }
