#!/usr/bin/env bash
# Stops the broker started by services/kafka/start.sh (via its pid file);
# topic data in .services/kafka/data is kept. Honours KAFKA_INSTANCE as start.sh does.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init "kafka${KAFKA_INSTANCE:+-$KAFKA_INSTANCE}"
SVC_MATCH="kafka.Kafka $SVC_DIR/server.properties"
svc_lock
svc_stop 60
