#!/usr/bin/env bash
# Installs the official Anthropic Python SDK, pinned, for the peer test against `muninn sim-api`.
#
#   MUNINN_PYTHON   the interpreter to install into (default python3)
#
# Idempotent: pip keeps an installed pinned version.
set -euo pipefail
PY="${MUNINN_PYTHON:-python3}"
VERSION=2.14.0
"$PY" -m pip install --disable-pip-version-check --root-user-action=ignore -q "anthropic==$VERSION"
"$PY" -c "import anthropic; print('anthropic', anthropic.__version__)"
