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
BASE="${MUNINN_PYTHON_BASE:-python3}"
VERSION=1.163.2
DIR="${MUNINN_SYNAPSE_DIR:-$HOME/.cache/muninn/synapse}"
PY="$DIR/bin/python"
has_pinned() { "$PY" -c "import synapse, sys; sys.exit(synapse.__version__ != '$VERSION')" 2>/dev/null; }
if has_pinned; then
  echo "$PY"
  exit 0
fi
# Debian's python3 makes a venv only with python3-venv (it carries the ensurepip wheels).
if ! "$BASE" -m venv "$DIR" >&2; then
  apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2
  "$BASE" -m venv --clear "$DIR" >&2
fi
"$PY" -m pip install --disable-pip-version-check -q "matrix-synapse==$VERSION" >&2
if ! has_pinned; then
  echo "install-synapse: $PY cannot import synapse $VERSION" >&2
  exit 1
fi
echo "$PY"
