#!/usr/bin/env bash
# Runs muninn's whole test suite on a fresh machine: installs what the tests need, starts the
# services they talk to, then runs every crate's tests. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# Fonts for PNG plots (Debian's DejaVu); the SVG path needs none.
if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq fonts-dejavu-core) >/dev/null 2>&1 || echo "note: could not install fonts-dejavu-core; PNG plot tests will skip"
fi

cargo test --workspace --locked
