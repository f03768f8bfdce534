#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL answers on 127.0.0.1:$PGPORT (5432),
# starting the installed cluster if needed. It is never stopped by the test
# tooling. Prints "started" or "running" on stdout.
set -euo pipefail
SVC_NAME=postgres
log() { echo "$SVC_NAME: $*" >&2; }

PORT=${PGPORT:-5432}
ready() { pg_isready -q -h 127.0.0.1 -p "$PORT"; }

if ready; then
  echo running
  exit 0
fi
command -v pg_ctlcluster >/dev/null || { log "PostgreSQL is not installed (pg_ctlcluster missing)"; exit 1; }
VERSION=$(ls /etc/postgresql | sort -V | tail -n 1)
[[ -n $VERSION ]] || { log "no cluster under /etc/postgresql"; exit 1; }
log "starting cluster $VERSION/main"
pg_ctlcluster --skip-systemctl-redirect "$VERSION" main start >&2 || true
deadline=$((SECONDS + 60))
until ready; do
  ((SECONDS < deadline)) || { log "not ready after 60s"; exit 1; }
  sleep 0.5
done
log "ready on 127.0.0.1:$PORT"
echo started
