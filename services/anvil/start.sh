#!/usr/bin/env bash
# Starts a local EVM dev chain (anvil, chain id 31337, automine on) on
# 127.0.0.1:$ANVIL_PORT (8545). Prints "started", "running" (already ours) or
# "external" (something else already answers there) on stdout.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init anvil

PORT=${ANVIL_PORT:-8545}
SVC_MATCH="anvil --host 127.0.0.1 --port $PORT"

answers() {
  curl -sf -m 2 -H 'content-type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' \
    "http://127.0.0.1:$PORT" | grep -q '"result"'
}

svc_lock
svc_reuse_existing "$PORT" 60 "an EVM node"

BIN="$REPO_ROOT/node_modules/.bin/anvil"
[[ -x $BIN ]] || die "$BIN missing; run npm ci"
svc_launch "$BIN" --host 127.0.0.1 --port "$PORT" --chain-id "${ANVIL_CHAIN_ID:-31337}"
wait_until 60 answers
log "ready on http://127.0.0.1:$PORT (pid $(svc_pid))"
echo started
