#!/usr/bin/env bash
# Stops the regtest node started by services/bitcoin/start.sh (via its pid file).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init bitcoin
SVC_MATCH="services/bitcoin/regtest-node.cjs"
svc_lock
svc_stop 20
