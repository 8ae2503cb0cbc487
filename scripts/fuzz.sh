#!/usr/bin/env bash
# Runs every fuzz target (muninn-testkit's `fuzz` driver; seeds in fuzz/corpus/<target>/) for
# MUNINN_FUZZ_SECS seconds each (default 2, as in CI's `cargo test`), one target at a time so the
# executions per target are comparable, and prints one line per target. Exits non-zero, printing
# FAIL and the failing target's output (with the saved input's path), when any target fails.
#
#   MUNINN_FUZZ_SECS=60 scripts/fuzz.sh        # the long run
#   MUNINN_FUZZ_SEED=123 scripts/fuzz.sh       # another random stream (the default is fixed)
set -euo pipefail
cd "$(dirname "$0")/.."
export MUNINN_FUZZ_SECS="${MUNINN_FUZZ_SECS:-2}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
status=0
run() {
    if ! cargo test -q "$@" -- --nocapture --test-threads=1 >"$out" 2>&1; then
        cat "$out"
        echo "FAIL: fuzzing ($*)"
        status=1
    fi
    # `-q` prints a test's dot on the same line, so match the report anywhere in a line.
    grep -o 'fuzz [a-z-]*: [0-9]* executions.*' "$out" | grep -v '^fuzz selftest' || true
}
run -p muninn-testkit --lib fuzz::
run -p muninn-claude-cli --lib lines::tests::any_stdout
run -p muninn-import --lib json::tests::timestamps_agree
for crate in muninn-anthropic muninn-claude-cli muninn-import muninn-host; do
    run -p "$crate" --test all fuzz::
done
exit "$status"
