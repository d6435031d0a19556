#!/usr/bin/env bash
# Start a single-node Apache Kafka broker (KRaft, combined broker+controller)
# on loopback, from the jars that scripts/kafka/pom.xml resolves from Maven
# Central. Idempotent: re-running it while the broker is up is a no-op, and a
# restart keeps the topics (the data lives in $KAFKA_HOME_DIR/data).
#
# Environment (all optional):
#   KAFKA_HOME_DIR         state dir: libs/, data/, logs/, config  [<repo>/.services/kafka]
#   KAFKA_PORT             client listener on 127.0.0.1            [9092]
#   KAFKA_CONTROLLER_PORT  KRaft controller listener on 127.0.0.1  [9093]
#   KAFKA_SASL_PORT        SASL_PLAINTEXT (SCRAM) listener         [KAFKA_PORT+2]
#   KAFKA_SSL_PORT         SSL (TLS, no SASL) listener             [KAFKA_PORT+3]
#   KAFKA_SASL_SSL_PORT    SASL_SSL (SCRAM over TLS) listener      [KAFKA_PORT+4]
#   KAFKA_SCRAM_USER       SCRAM user created at format time       [ledger]
#   KAFKA_SCRAM_PASSWORD   its password (both SHA-256 and SHA-512) [ledger-secret]
#   KAFKA_START_TIMEOUT    seconds to wait for the broker          [120]
#   KAFKA_HEAP_OPTS        JVM heap flags                          [-Xms256m -Xmx768m]
#   JAVA                   java binary (17 or newer)               [java]
#
# The plain listener (KAFKA_PORT) is what everything uses by default; the
# SASL and TLS listeners exist so that the ledger's Kafka security can be
# tested against a real broker. Their throwaway CA and broker certificate are
# generated on first start under $KAFKA_HOME_DIR/tls (the CA is tls/ca.crt);
# the SCRAM user is added when the storage is formatted (or, for storage
# formatted by an older version of this script, once the broker answers).
# These credentials are for a loopback test broker only.
#
# Progress goes to stderr; nothing is printed on stdout.
# Needs java 17+ and maven; installs both with apt-get (as root) if missing.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)

KAFKA_HOME_DIR=${KAFKA_HOME_DIR:-$REPO/.services/kafka}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}
KAFKA_SSL_PORT=${KAFKA_SSL_PORT:-$((KAFKA_PORT + 3))}
KAFKA_SASL_SSL_PORT=${KAFKA_SASL_SSL_PORT:-$((KAFKA_PORT + 4))}
KAFKA_SCRAM_USER=${KAFKA_SCRAM_USER:-ledger}
KAFKA_SCRAM_PASSWORD=${KAFKA_SCRAM_PASSWORD:-ledger-secret}
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-120}
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}
JAVA=${JAVA:-java}

POM=$SCRIPT_DIR/pom.xml
LOG4J_CONFIG=$SCRIPT_DIR/log4j2.xml
LIBS=$KAFKA_HOME_DIR/libs
DATA=$KAFKA_HOME_DIR/data
LOGS=$KAFKA_HOME_DIR/logs
CONFIG=$KAFKA_HOME_DIR/server.properties
TOOLS_CONFIG=$KAFKA_HOME_DIR/tools.properties
CLUSTER_ID_FILE=$KAFKA_HOME_DIR/cluster.id
PID_FILE=$KAFKA_HOME_DIR/kafka.pid
TLS_DIR=$KAFKA_HOME_DIR/tls
# The PKCS#12 keystore's password: it guards a throwaway key on loopback.
KEYSTORE_PASSWORD=rolloutledger-test
SCRAM_STAMP=$KAFKA_HOME_DIR/scram.users
BOOTSTRAP=127.0.0.1:$KAFKA_PORT

log() { echo "kafka: $*" >&2; }
die() { echo "kafka: ERROR: $*" >&2; exit 1; }

# Lightweight JVM flags for the short-lived admin tools.
TOOL_JVM_OPTS=(-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ActiveProcessorCount=2
  -Dlog4j2.configurationFile="$LOG4J_CONFIG" -Dkafka.logs.dir="$LOGS" -Dkafka.log.file=tools.log)

apt_install() {
  [ "$(id -u)" = 0 ] || die "$* missing; install it (apt-get install $*) or run this as root"
  log "installing $* with apt-get"
  # Serialised with scripts/postgres/start.sh, which may run at the same time.
  (
    flock -w 900 9 || die "timed out waiting for the apt lock"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "$@" >&2
  ) 9>/var/lock/rolloutledger-apt.lock
}

java_major() {
  "$JAVA" -XshowSettings:properties -version 2>&1 |
    sed -n 's/^ *java\.specification\.version = \([0-9][0-9]*\).*/\1/p'
}

ensure_tools() {
  local want=()
  command -v "$JAVA" >/dev/null 2>&1 || want+=(openjdk-17-jre-headless)
  command -v openssl >/dev/null 2>&1 || want+=(openssl)
  # Maven is only needed while the jars are not resolved yet.
  if [ ! -f "$LIBS/.resolved" ] && ! command -v mvn >/dev/null 2>&1; then want+=(maven); fi
  [ ${#want[@]} -eq 0 ] || apt_install "${want[@]}"
  local major
  major=$(java_major)
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    die "Kafka 4 needs java 17 or newer; '$JAVA' is version '${major:-unknown}' (set JAVA=/path/to/java)"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A real metadata round trip (ListTopics via the admin client), with short
# client timeouts so that a broker that is not ready fails fast.
broker_answers() {
  "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$BOOTSTRAP" --command-config "$TOOLS_CONFIG" --list >/dev/null 2>&1
}

pid_alive() {
  local pid
  [ -f "$PID_FILE" ] || return 1
  pid=$(cat "$PID_FILE")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

# For the process this script just launched: alive unless it has exited. The
# command line is not checked here: for a moment after the fork the child is
# still a copy of this shell (its cmdline is not yet java's), and reading it
# then made a healthy start look like a crash. An exited child that the shell
# has not reaped yet is a zombie, which kill -0 still reports as alive.
launched_alive() {
  local pid state
  pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
  [ "$state" != Z ]
}

print_log_tail() {
  local f
  for f in "$LOGS/server.log" "$LOGS/stdout.log"; do
    [ -s "$f" ] || continue
    echo "----- last 80 lines of $f -----" >&2
    tail -n 80 "$f" >&2
  done
}

resolve_jars() {
  local stamp
  stamp=$(sha256sum "$POM" | cut -d' ' -f1)
  if [ -f "$LIBS/.resolved" ] && [ "$(cat "$LIBS/.resolved")" = "$stamp" ]; then
    return 0
  fi
  log "resolving Kafka jars from Maven Central (scripts/kafka/pom.xml)"
  local t0=$SECONDS
  rm -rf "$LIBS.tmp"
  # (sed: maven 3.8 -q still emits bare colour resets)
  mvn -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS.tmp" -DincludeScope=runtime 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2 ||
    die "could not resolve the Kafka jars with maven"
  ls "$LIBS.tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "maven did not produce kafka_2.13 in $LIBS.tmp"
  echo "$stamp" >"$LIBS.tmp/.resolved"
  rm -rf "$LIBS"
  mv "$LIBS.tmp" "$LIBS"
  log "jars resolved in $((SECONDS - t0))s: $(basename "$(ls "$LIBS"/kafka_2.13-*.jar)")"
}

# A throwaway CA and a broker certificate for 127.0.0.1 and localhost, made
# once per state dir. Clients trust $TLS_DIR/ca.crt.
ensure_tls() {
  [ -s "$TLS_DIR/broker.p12" ] && [ -s "$TLS_DIR/ca.crt" ] && return 0
  log "generating a test CA and broker certificate in $TLS_DIR"
  rm -rf "$TLS_DIR.tmp"
  mkdir -p "$TLS_DIR.tmp"
  (
    cd "$TLS_DIR.tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=rolloutledger test CA" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >broker.ext
    openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.crt 2>/dev/null
    openssl pkcs12 -export -in broker.crt -inkey broker.key -certfile ca.crt -name broker \
      -passout "pass:$KEYSTORE_PASSWORD" -out broker.p12
    rm -f broker.csr broker.ext ca.srl
  ) || die "could not generate the test certificates with openssl"
  rm -rf "$TLS_DIR"
  mv "$TLS_DIR.tmp" "$TLS_DIR"
}

write_config() {
  local scram_jaas='org.apache.kafka.common.security.scram.ScramLoginModule required;'
  cat >"$CONFIG" <<PROPS
# Written by scripts/kafka/start.sh on every start; edit the script, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL

# Test listeners for the ledger's Kafka security: SCRAM users live in the
# cluster metadata (added at format time); TLS uses the throwaway CA.
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=$scram_jaas
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$scram_jaas
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram_jaas
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram_jaas
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$KEYSTORE_PASSWORD
ssl.key.password=$KEYSTORE_PASSWORD
ssl.client.auth=none
ssl.enabled.protocols=TLSv1.2,TLSv1.3

log.dirs=$DATA
num.partitions=12
# auto.create.topics.enable stays at its default (true).

# Single node: every internal topic has one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0

# Records of up to 1 MiB plus batch/header overhead.
message.max.bytes=2097152
replica.fetch.max.bytes=2097152

num.network.threads=2
num.io.threads=4
PROPS
  cat >"$TOOLS_CONFIG" <<PROPS
# Client settings of the readiness check in scripts/kafka/start.sh.
request.timeout.ms=5000
default.api.timeout.ms=8000
retry.backoff.ms=200
PROPS
}

format_storage() {
  if [ -f "$DATA/meta.properties" ]; then
    return 0
  fi
  if [ ! -s "$CLUSTER_ID_FILE" ]; then
    "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool random-uuid >"$CLUSTER_ID_FILE.tmp" ||
      die "kafka.tools.StorageTool random-uuid failed"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  local cluster_id
  cluster_id=$(tr -d '[:space:]' <"$CLUSTER_ID_FILE")
  log "formatting $DATA (cluster id $cluster_id)"
  "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
    --standalone --ignore-formatted --cluster-id "$cluster_id" --config "$CONFIG" \
    --add-scram "SCRAM-SHA-256=[name=$KAFKA_SCRAM_USER,password=$KAFKA_SCRAM_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_SCRAM_USER,password=$KAFKA_SCRAM_PASSWORD]" \
    >"$LOGS/format.log" 2>&1 || {
    cat "$LOGS/format.log" >&2
    die "kafka.tools.StorageTool format failed (see $LOGS/tools.log)"
  }
  echo "$KAFKA_SCRAM_USER" >"$SCRAM_STAMP"
}

# Storage formatted before the SCRAM user existed gets it through the admin
# API once the broker answers (the plain listener needs no credentials).
ensure_scram_user() {
  [ -f "$SCRAM_STAMP" ] && [ "$(cat "$SCRAM_STAMP")" = "$KAFKA_SCRAM_USER" ] && return 0
  log "adding SCRAM user $KAFKA_SCRAM_USER"
  local mech
  # One mechanism per request: Kafka refuses two changes of one user's
  # credentials in the same request.
  for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
    "$JAVA" "${TOOL_JVM_OPTS[@]}" -cp "$LIBS/*" org.apache.kafka.tools.ConfigCommand \
      --bootstrap-server "$BOOTSTRAP" --command-config "$TOOLS_CONFIG" --alter \
      --add-config "$mech=[password=$KAFKA_SCRAM_PASSWORD]" \
      --entity-type users --entity-name "$KAFKA_SCRAM_USER" >&2 ||
      die "could not add the SCRAM user $KAFKA_SCRAM_USER ($mech)"
  done
  echo "$KAFKA_SCRAM_USER" >"$SCRAM_STAMP"
}

launch() {
  # Keep the previous run's log aside, so a failure shows only this run.
  local f
  for f in server.log stdout.log; do
    if [ -f "$LOGS/$f" ]; then mv -f "$LOGS/$f" "$LOGS/$f.prev"; fi
  done
  log "starting broker on $BOOTSTRAP (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT; SASL $KAFKA_SASL_PORT, SSL $KAFKA_SSL_PORT, SASL_SSL $KAFKA_SASL_SSL_PORT), log $LOGS/server.log"
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of flags
  nohup "$JAVA" $KAFKA_HEAP_OPTS -server -XX:ActiveProcessorCount=2 \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONFIG" -Dkafka.logs.dir="$LOGS" \
    -cp "$LIBS/*" kafka.Kafka "$CONFIG" \
    </dev/null >"$LOGS/stdout.log" 2>&1 &
  echo $! >"$PID_FILE"
}

wait_ready() {
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT)) t0=$SECONDS
  while [ $SECONDS -lt $deadline ]; do
    if ! launched_alive; then
      print_log_tail
      die "broker process exited during startup"
    fi
    # The JVM-based metadata check costs a second or two, so only try it once
    # the listener accepts connections.
    if port_open "$KAFKA_PORT" && broker_answers; then
      log "broker ready on $BOOTSTRAP after $((SECONDS - t0))s (pid $(cat "$PID_FILE"))"
      return 0
    fi
    sleep 0.5
  done
  print_log_tail
  die "broker did not answer on $BOOTSTRAP within ${KAFKA_START_TIMEOUT}s"
}

main() {
  mkdir -p "$KAFKA_HOME_DIR" "$LOGS"
  ensure_tools
  resolve_jars
  ensure_tls
  write_config

  if pid_alive; then
    log "broker process already running (pid $(cat "$PID_FILE")); waiting for it to answer"
    wait_ready
    ensure_scram_user
    if ! port_open "$KAFKA_SASL_PORT"; then
      log "WARNING: this broker was started without the SASL/TLS test listeners (an older configuration);" \
        "restart it (scripts/kafka/stop.sh, then this script) for the Kafka security tests"
    fi
    return 0
  fi
  if port_open "$KAFKA_PORT"; then
    if broker_answers; then
      log "a Kafka broker is already answering on $BOOTSTRAP; leaving it alone"
      return 0
    fi
    die "127.0.0.1:$KAFKA_PORT is taken by something that does not answer as a Kafka broker"
  fi
  if port_open "$KAFKA_CONTROLLER_PORT"; then
    die "controller port 127.0.0.1:$KAFKA_CONTROLLER_PORT is already in use (set KAFKA_CONTROLLER_PORT)"
  fi
  local v
  for v in KAFKA_SASL_PORT KAFKA_SSL_PORT KAFKA_SASL_SSL_PORT; do
    if port_open "${!v}"; then
      die "port 127.0.0.1:${!v} is already in use (set $v)"
    fi
  done

  rm -f "$PID_FILE"
  format_storage
  launch
  wait_ready
  ensure_scram_user
}

main "$@"
