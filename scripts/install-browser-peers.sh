#!/usr/bin/env bash
# Installs the browser the dashboard's test drives: Debian's Chromium and its chromedriver
# (packages `chromium` and `chromium-driver`, one build, so the driver always matches the
# browser). Nothing downloads a browser of its own; apt's cache serves a reinstall.
#
# Idempotent: installed packages are kept (apt-get runs only when a binary is missing). Prints the
# Chromium binary's path last (chromedriver is beside it, /usr/bin/chromedriver).
set -euo pipefail
CHROMIUM="${MUNINN_CHROMIUM:-/usr/bin/chromium}"
DRIVER="${MUNINN_CHROMEDRIVER:-/usr/bin/chromedriver}"
if ! "$CHROMIUM" --version >/dev/null 2>&1 || ! "$DRIVER" --version >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null; then
    echo "install-browser-peers: no apt-get; install Chromium and chromedriver, then set MUNINN_CHROMIUM and MUNINN_CHROMEDRIVER" >&2
    exit 1
  fi
  log="$(mktemp)"
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver) >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi
if ! "$CHROMIUM" --version >/dev/null 2>&1 || ! "$DRIVER" --version >/dev/null 2>&1; then
  echo "install-browser-peers: $CHROMIUM or $DRIVER does not run" >&2
  exit 1
fi
echo "$CHROMIUM"
