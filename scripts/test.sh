#!/usr/bin/env bash
# Runs muninn's whole test suite on a fresh machine: installs what the tests need, starts the
# services they talk to, then runs every crate's tests. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Fonts for PNG plots (Debian's DejaVu); the SVG path needs none.
if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq fonts-dejavu-core) >/dev/null 2>&1 || echo "note: could not install fonts-dejavu-core; PNG plot tests will skip"
fi

# PostgreSQL for the store's conformance suite (this kind of machine runs it on 127.0.0.1:5432 with
# trust auth and a database `test`; start it if it stopped).
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
fi

# The real peers the simulator is checked against: the official Anthropic Python SDK and the Claude
# Code CLI 2.1.332, both pinned.
bash scripts/install-python-peers.sh
MUNINN_CLAUDE_BIN="$(bash scripts/install-claude-cli.sh)"
export MUNINN_CLAUDE_BIN

cargo test --workspace --locked
