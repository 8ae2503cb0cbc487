#!/usr/bin/env bash
# Installs the real Claude Code CLI, pinned, for the peer tests against `muninn sim-api`.
#
#   MUNINN_CLAUDE_DIR   where to install (default ~/.cache/muninn/claude-cli)
#
# Idempotent: an existing install of the pinned version is kept. Prints the binary's path last;
# point MUNINN_CLAUDE_BIN at it. The version is pinned because npm on Node 20 silently resolves an
# older release (2.1.332 declares node >= 22; the EBADENGINE warning is expected: the CLI is a
# native binary and does not run on the system Node).
set -euo pipefail
VERSION=2.1.332
DIR="${MUNINN_CLAUDE_DIR:-$HOME/.cache/muninn/claude-cli}"
BIN="$DIR/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "^$VERSION "; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$VERSION" >&2
if ! "$BIN" --version 2>/dev/null | grep -q "^$VERSION "; then
  echo "install-claude-cli: $BIN is not Claude Code $VERSION" >&2
  exit 1
fi
echo "$BIN"
