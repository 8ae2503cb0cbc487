#!/usr/bin/env bash
# Installs Synapse, the Matrix homeserver the Matrix connector's tests run against, pinned, into a
# virtual environment of its own (all wheels from PyPI, no compiling; ~30-60 s on a 2-core
# machine, then cached). Each test starts its own Synapse from it on a free loopback port with its
# own data directory; nothing is configured or started here.
#
#   MUNINN_PYTHON_BASE   the interpreter the environment is made from (default python3)
#   MUNINN_SYNAPSE_DIR   where the environment goes (default ~/.cache/muninn/synapse)
#
# Idempotent: an environment that already imports the pinned version is kept. Prints the
# environment's interpreter last; point MUNINN_SYNAPSE_PYTHON at it.
set -euo pipefail
source "$(dirname "$0")/lib/pinned-venv.sh"
VERSION=1.163.2
pinned_venv install-synapse "${MUNINN_PYTHON_BASE:-python3}" \
  "${MUNINN_SYNAPSE_DIR:-$HOME/.cache/muninn/synapse}" synapse "matrix-synapse==$VERSION" "$VERSION"
