#!/usr/bin/env bash
# Starts a single-node Kafka 4 broker (KRaft, broker+controller in one JVM) on
# 127.0.0.1:$KAFKA_PORT (9092), controller on $KAFKA_CONTROLLER_PORT (9093).
# Jars come from Maven Central on first use (services/kafka/pom.xml) into
# .services/kafka/lib; topic data persists in .services/kafka/data across
# restarts. Prints "started", "running" or "external" on stdout.
# KAFKA_INSTANCE=<name> runs a further broker of its own (state, pid and log in
# .services/kafka-<name>/, jars shared): for a test that stops and starts a
# broker without touching the one the other tests use.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
svc_init "kafka${KAFKA_INSTANCE:+-$KAFKA_INSTANCE}"

PORT=${KAFKA_PORT:-9092}
CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}
LIB="$STATE_ROOT/kafka/lib"
DATA="$SVC_DIR/data"
CONF="$SVC_DIR/server.properties"
POM="$SERVICES_DIR/kafka/pom.xml"
SVC_MATCH="kafka.Kafka $CONF"

# The broker answers a metadata request (kafkajs admin listTopics).
answers() {
  (cd "$REPO_ROOT" && timeout 20 node -e '
    const { Kafka, logLevel } = require("kafkajs");
    const admin = new Kafka({ brokers: [process.argv[1]], logLevel: logLevel.NOTHING,
      connectionTimeout: 2000, retry: { retries: 0 } }).admin();
    admin.connect().then(() => admin.listTopics()).then(
      () => admin.disconnect().then(() => process.exit(0)),
      () => process.exit(1));
  ' "127.0.0.1:$PORT") >/dev/null 2>&1
}

svc_lock
svc_reuse_existing "$PORT" 120 "a Kafka broker"
port_open 127.0.0.1 "$CONTROLLER_PORT" && die "controller port $CONTROLLER_PORT is taken"

command -v java >/dev/null || die "java (17+) is required"
[[ -d $REPO_ROOT/node_modules/kafkajs ]] || die "node_modules/kafkajs missing; run npm ci"

# Fetch the jars once per pom version; the stamp records which pom they match.
# Instances share them: one fetch at a time.
mkdir -p "$STATE_ROOT/kafka"
exec 8>"$STATE_ROOT/kafka/.lib.lock"
flock -w 600 8 || die "could not take $STATE_ROOT/kafka/.lib.lock"
POM_SUM=$(sha256sum "$POM" | cut -d' ' -f1)
if [[ ! -f $LIB/.pom.sha256 || $(<"$LIB/.pom.sha256") != "$POM_SUM" ]]; then
  command -v mvn >/dev/null || die "maven is required to fetch the Kafka jars"
  log "fetching Kafka jars with maven into $LIB"
  rm -rf "$LIB"
  mvn -q -B -f "$POM" dependency:copy-dependencies -DoutputDirectory="$LIB" >>"$SVC_LOG" 2>&1 ||
    die "maven could not fetch the jars; see $SVC_LOG"
  echo "$POM_SUM" >"$LIB/.pom.sha256"
fi
exec 8>&-

cat >"$CONF" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
auto.create.topics.enable=true
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
PROPS

cat >"$SVC_DIR/log4j2.properties" <<'PROPS'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
PROPS

JAVA_OPTS=(
  -Xms128m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -XX:TieredStopAtLevel=1 -Xshare:auto -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$SVC_DIR/log4j2.properties"
  "-Dkafka.logs.dir=$SVC_DIR"
)

# A standalone (dynamic) quorum records the controller's endpoint when the
# storage is formatted, so a different controller port needs fresh storage.
if [[ -f $DATA/meta.properties && $(cat "$DATA/.controller-port" 2>/dev/null) != "$CONTROLLER_PORT" ]]; then
  log "controller port changed; discarding $DATA"
  rm -rf "$DATA"
fi
if [[ ! -f $DATA/meta.properties ]]; then
  log "formatting storage in $DATA"
  rm -rf "$DATA"
  CLUSTER_ID=$(java -cp "$LIB/*" "${JAVA_OPTS[@]}" kafka.tools.StorageTool random-uuid 2>>"$SVC_LOG")
  java -cp "$LIB/*" "${JAVA_OPTS[@]}" kafka.tools.StorageTool format --standalone \
    -t "$CLUSTER_ID" -c "$CONF" >>"$SVC_LOG" 2>&1 || die "storage format failed; see $SVC_LOG"
  echo "$CONTROLLER_PORT" >"$DATA/.controller-port"
fi

svc_launch java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.Kafka "$CONF"
wait_until 120 answers
log "ready on 127.0.0.1:$PORT (pid $(svc_pid))"
echo started
