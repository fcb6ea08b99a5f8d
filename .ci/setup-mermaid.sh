#!/bin/sh
# Install Mermaid's parser, at the version .ci/mermaid/package-lock.json pins, outside the
# checkout: ${XDG_CACHE_HOME:-$HOME/.cache}/notes-mcp-ci/mermaid (tests/test_docs.py looks
# there). Needs node and npm; the install is skipped when that version is already there.
# Prints the folder on its last line.
set -eu
cd "$(dirname "$0")/.."
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/notes-mcp-ci/mermaid"
command -v node >/dev/null && command -v npm >/dev/null || { echo "ci: node and npm are needed for the Mermaid check" >&2; exit 1; }
WANT="$(node -p 'require("./.ci/mermaid/package.json").dependencies.mermaid')"
HAVE="$(node -p "try { require('$DIR/node_modules/mermaid/package.json').version } catch (e) { '' }")"
if [ "$HAVE" != "$WANT" ] || ! cmp -s .ci/mermaid/package-lock.json "$DIR/package-lock.json"; then
  mkdir -p "$DIR"
  cp .ci/mermaid/package.json .ci/mermaid/package-lock.json "$DIR/"
  (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$DIR"
