#!/usr/bin/env bash
# Starts the in-memory bcoin regtest node (services/bitcoin/regtest-node.cjs):
#   node JSON-RPC   http://confirmd:confirmd@127.0.0.1:$BITCOIN_RPC_PORT (18443)
#   wallet JSON-RPC http://confirmd:confirmd@127.0.0.1:$BITCOIN_WALLET_RPC_PORT (18445)
#   ZMQ hashblock   tcp://127.0.0.1:$BITCOIN_ZMQ_PORT (28332), as Bitcoin Core's
#                   zmqpubhashblock publishes
# The chain starts empty on every start. Prints "started", "running" or
# "external" on stdout.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init bitcoin

export BITCOIN_RPC_PORT=${BITCOIN_RPC_PORT:-18443}
export BITCOIN_WALLET_RPC_PORT=${BITCOIN_WALLET_RPC_PORT:-18445}
export BITCOIN_ZMQ_PORT=${BITCOIN_ZMQ_PORT:-28332}
SVC_MATCH="services/bitcoin/regtest-node.cjs $BITCOIN_RPC_PORT"

rpc_answers() {
  curl -sf -m 2 -u confirmd:confirmd -H 'content-type: application/json' \
    -d '{"method":"getblockchaininfo","params":[],"id":1}' \
    "http://127.0.0.1:$1/" | grep -q '"chain":"regtest"'
}
wallet_answers() {
  curl -sf -m 2 -u confirmd:confirmd -H 'content-type: application/json' \
    -d '{"method":"getwalletinfo","params":[],"id":1}' \
    "http://127.0.0.1:$1/" | grep -q '"walletid":"primary"'
}
answers() { rpc_answers "$BITCOIN_RPC_PORT" && wallet_answers "$BITCOIN_WALLET_RPC_PORT"; }

svc_lock
svc_reuse_existing "$BITCOIN_RPC_PORT" 60 "this regtest node"
port_open 127.0.0.1 "$BITCOIN_WALLET_RPC_PORT" && die "wallet port $BITCOIN_WALLET_RPC_PORT is taken"
port_open 127.0.0.1 "$BITCOIN_ZMQ_PORT" && die "ZMQ port $BITCOIN_ZMQ_PORT is taken"

[[ -d $REPO_ROOT/node_modules/bcoin ]] || die "node_modules/bcoin missing; run npm ci"
cd "$REPO_ROOT"
# The port argument is only there to tell instances apart in the process list.
svc_launch node services/bitcoin/regtest-node.cjs "$BITCOIN_RPC_PORT"
wait_until 60 answers
log "ready on http://127.0.0.1:$BITCOIN_RPC_PORT, wallet on :$BITCOIN_WALLET_RPC_PORT, ZMQ hashblock on :$BITCOIN_ZMQ_PORT (pid $(svc_pid))"
echo started
