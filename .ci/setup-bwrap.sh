#!/bin/sh
# CI: install bubblewrap for the started bwrap recipe in tests/test_sandbox.py when missing.
# Fails loudly (non-zero) if it cannot be installed: that test must not skip in CI.
set -eu
if command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
if ! $SUDO apt-get update || ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y bubblewrap; then
    echo "setup-bwrap: cannot install bubblewrap with apt-get" >&2
    exit 1
fi
command -v bwrap >/dev/null 2>&1 || { echo "setup-bwrap: bwrap is still missing after installing" >&2; exit 1; }
