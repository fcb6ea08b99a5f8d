#!/bin/sh
# Install the npm tools the tests use, each at the versions its .ci/NAME/package-lock.json
# pins, outside the checkout: ${XDG_CACHE_HOME:-$HOME/.cache}/notes-mcp-ci/NAME, where
# tests/test_docs.py looks. NAME is a folder of .ci/ holding package.json and its lock:
#   mermaid     Mermaid's own parser, for the diagrams' test
#   ts-client   the official TypeScript MCP client, for docs/serving.md's TypeScript example
# Needs node and npm; a folder already installed from the same lock is left as it is.
# Prints each installed folder, one a line.
set -eu
cd "$(dirname "$0")/.."
command -v node >/dev/null && command -v npm >/dev/null || { echo "ci: node and npm are needed for the npm tools" >&2; exit 1; }
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/notes-mcp-ci"
for NAME in "$@"; do
  [ -f ".ci/$NAME/package-lock.json" ] || { echo "ci: no .ci/$NAME/package-lock.json" >&2; exit 1; }
  DIR="$CACHE/$NAME"
  if [ ! -d "$DIR/node_modules" ] || ! cmp -s ".ci/$NAME/package-lock.json" "$DIR/package-lock.json"; then
    mkdir -p "$DIR"
    cp ".ci/$NAME/package.json" ".ci/$NAME/package-lock.json" "$DIR/"
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
  echo "$DIR"
done
