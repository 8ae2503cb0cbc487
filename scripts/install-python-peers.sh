#!/usr/bin/env bash
# Installs the official Anthropic Python SDK, pinned, for the peer test against `muninn sim-api`,
# into a virtual environment of its own, so that neither a missing pip nor an externally managed
# system Python (PEP 668, as Debian's is) stops it.
#
#   MUNINN_PYTHON      the interpreter the environment is made from (default python3)
#   MUNINN_PYTHON_DIR  where the environment goes (default ~/.cache/muninn/python-peers)
#
# Idempotent: an environment that already imports the pinned version is kept. Prints the
# environment's interpreter last; point MUNINN_PYTHON at it.
set -euo pipefail
source "$(dirname "$0")/lib/pinned-venv.sh"
VERSION=2.14.0
pinned_venv install-python-peers "${MUNINN_PYTHON:-python3}" \
  "${MUNINN_PYTHON_DIR:-$HOME/.cache/muninn/python-peers}" anthropic "anthropic==$VERSION" "$VERSION"
