# Sourced by the install scripts: one pinned PyPI package in a virtual environment of its own,
# so that neither a missing pip nor an externally managed system Python (PEP 668, as Debian's
# is) stops it. Idempotent: an environment that already imports the pinned version is kept.
#
#   pinned_venv <who> <base python> <dir> <module> <pip requirement> <version>
#
# Prints the environment's interpreter (the only line on stdout); fails if it cannot import
# <module> at <version> afterwards.
pinned_venv() {
  local who="$1" base="$2" dir="$3" module="$4" requirement="$5" version="$6"
  local py="$dir/bin/python"
  has_pinned() { "$py" -c "import $module, sys; sys.exit($module.__version__ != '$version')" 2>/dev/null; }
  if has_pinned; then
    echo "$py"
    return 0
  fi
  # Debian's python3 makes a venv only with python3-venv (it carries the ensurepip wheels).
  if ! "$base" -m venv "$dir" >&2; then
    apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2
    "$base" -m venv --clear "$dir" >&2
  fi
  "$py" -m pip install --disable-pip-version-check -q "$requirement" >&2
  if ! has_pinned; then
    echo "$who: $py cannot import $module $version" >&2
    return 1
  fi
  echo "$py"
}
