#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed (the /docs page is checked in it headless).
# Prints the browser's path. Needs root for the install, as on the CI machines.
set -euo pipefail
if ! command -v chromium >/dev/null; then
  log=$(mktemp)
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >"$log" 2>&1; then
    tail -20 "$log" >&2
    echo "chromium: install failed" >&2
    exit 1
  fi
  rm -f "$log"
fi
command -v chromium
