#!/usr/bin/env bash
# Checks that two muninn builds replay identically: every policy's cost to the micro-dollar and
# its decision counts (pings, flushes, refreshes, masks, cleared tokens, tokens by kind), as JSON,
# on ../shared/traces/claude-code (all policies; whole, by session, main threads only) and on
# each unseen Claude Code source (all policies, optimum included, with docs/prices-unseen.toml);
# and the shared traces' table, whose sensitivity grid replays the default at ten more settings.
# Prints each build's time per input. Exits non-zero on the first difference, or if a run fails.
#
#   scripts/compare-replays.sh OLD_MUNINN NEW_MUNINN [UNSEEN_DIR]
#
# For a change that must not move any decision (a speed-up of the decider or the optimum).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
unseen=${3:-/work/unseen/claude-code}
shared=../shared/traces/claude-code
[ -d "$shared" ] || shared=/work/shared/traces/claude-code
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

runs=(
  "shared|$shared --format json"
  "shared-by-session|$shared --by session --format json"
  "shared-main-only|$shared --main-only --format json"
  "shared-table|$shared"
)
for dir in "$unseen"/*/; do
  name=$(basename "$dir")
  runs+=("unseen-$name|$dir --prices docs/prices-unseen.toml --format json")
done

failed=0
for run in "${runs[@]}"; do
  label=${run%%|*}
  args=${run#*|}
  for build in old new; do
    bin=${!build}
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # the arguments are split on purpose
    "$bin" replay $args --quiet >"$out/$label.$build" 2>"$out/$label.$build.err" || {
      echo "FAIL $label: $build build exited non-zero" >&2
      cat "$out/$label.$build.err" >&2
      exit 1
    }
    end=$(date +%s.%N)
    printf '%-28s %s %6.2f s\n' "$label" "$build" "$(echo "$end - $start" | bc)"
  done
  if cmp -s "$out/$label.old" "$out/$label.new"; then
    echo "same     $label ($(wc -c <"$out/$label.new") bytes)"
  else
    echo "FAIL $label differs:" >&2
    diff "$out/$label.old" "$out/$label.new" | head -20 >&2
    failed=1
  fi
done
exit "$failed"
