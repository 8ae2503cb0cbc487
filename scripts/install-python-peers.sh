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
BASE="${MUNINN_PYTHON:-python3}"
VERSION=2.14.0
DIR="${MUNINN_PYTHON_DIR:-$HOME/.cache/muninn/python-peers}"
PY="$DIR/bin/python"
has_pinned() { "$PY" -c "import anthropic, sys; sys.exit(anthropic.__version__ != '$VERSION')" 2>/dev/null; }
if has_pinned; then
  echo "$PY"
  exit 0
fi
# Debian's python3 makes a venv only with python3-venv (it carries the ensurepip wheels).
if ! "$BASE" -m venv "$DIR" >&2; then
  apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2
  "$BASE" -m venv --clear "$DIR" >&2
fi
"$PY" -m pip install --disable-pip-version-check -q "anthropic==$VERSION" >&2
if ! has_pinned; then
  echo "install-python-peers: $PY cannot import anthropic $VERSION" >&2
  exit 1
fi
echo "$PY"
