#!/usr/bin/env bash
# Runs muninn's whole test suite on a fresh machine: installs what the tests need, starts the
# services they talk to, then runs every crate's tests. Safe to run again.
#
# A set-up step that fails stops the run here, since the tests that need its peer would fail
# anyway; with MUNINN_SKIP_PEERS=1 (asked for explicitly) the run goes on with a note and those
# tests print SKIP instead.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  if [ "${MUNINN_SKIP_PEERS:-}" != 1 ]; then
    echo "test.sh: $1 is missing (MUNINN_SKIP_PEERS=1 runs the rest and skips what needs it)" >&2
    exit 1
  fi
  echo "note: $1 is missing; the tests that need it will skip" >&2
}

# Fonts for PNG plots (Debian's DejaVu); the SVG path needs none.
FONT=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
if [ -z "${MUNINN_FONT:-}" ] && [ ! -f "$FONT" ]; then
  if command -v apt-get >/dev/null; then
    log="$(mktemp)"
    (apt-get update -qq && apt-get install -y -qq fonts-dejavu-core) >"$log" 2>&1 || cat "$log" >&2
    rm -f "$log"
  fi
  [ -f "$FONT" ] || need "the DejaVu Sans font (Debian's fonts-dejavu-core) for the PNG plots"
fi

# PostgreSQL for the store's conformance suite and the two-host tests: this kind of machine runs it
# on 127.0.0.1:5432 with trust auth; start it if it stopped, and make the database `test`.
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! pg_up && command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if pg_up; then
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test'
else
  need "PostgreSQL on 127.0.0.1:5432"
fi

# The real peers the simulator is checked against: the official Anthropic Python SDK and the Claude
# Code CLI 2.1.332, both pinned. A failed install stops the run (set -e), as for Synapse below.
MUNINN_PYTHON="$(bash scripts/install-python-peers.sh)"
MUNINN_CLAUDE_BIN="$(bash scripts/install-claude-cli.sh)"
export MUNINN_PYTHON MUNINN_CLAUDE_BIN

# The browser the dashboard is tested in: Debian's headless Chromium and its chromedriver.
if ! bash scripts/install-browser-peers.sh >/dev/null; then
  need "Chromium and chromedriver (Debian's chromium, chromium-driver)"
fi
# The Matrix homeserver the Matrix connector's tests start (one per test binary or test, each on
# its own loopback port): Synapse 1.163.2 from PyPI in a cached virtual environment.
MUNINN_SYNAPSE_PYTHON="$(bash scripts/install-synapse.sh)"
export MUNINN_SYNAPSE_PYTHON

# --no-fail-fast: one crate's failure must not hide whether the crates after it pass.
cargo test --workspace --locked --no-fail-fast
# The Persona benchmark at its smoke size (one seed, 300 turns): it exits 1 on any FAIL.
cargo test --locked -p muninn-workload --bench persona
