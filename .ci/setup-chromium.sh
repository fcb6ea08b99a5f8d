#!/bin/sh
# CI: install headless Chromium and chromedriver for tests/test_browser.py when missing.
# Fails loudly (non-zero) if they cannot be installed: the browser test must not skip in CI.
set -eu
if [ -x /usr/bin/chromium ] && { [ -x /usr/bin/chromedriver ] || [ -x /usr/lib/chromium/chromedriver ]; }; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
if ! $SUDO apt-get update || ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium chromium-driver; then
    echo "setup-chromium: cannot install chromium and chromium-driver with apt-get" >&2
    exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
    echo "setup-chromium: /usr/bin/chromium is still missing after installing" >&2
    exit 1
fi
