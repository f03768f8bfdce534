#!/usr/bin/env bash
# Stops the anvil started by services/anvil/start.sh (via its pid file).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init anvil
SVC_MATCH="anvil --host 127.0.0.1 --port"
svc_lock
svc_stop 20
