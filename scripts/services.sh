#!/usr/bin/env bash
# Local Kafka + PostgreSQL for development and CI.
#
#   eval "$(scripts/services.sh)"    start both (in parallel), export the env
#   scripts/services.sh start         same; prints the export lines
#   scripts/services.sh env           only print the export lines
#   scripts/services.sh stop          stop both (data is kept in .services/)
#
# Progress goes to stderr; stdout carries only the `export` lines:
#   KAFKA_BROKERS  127.0.0.1:$KAFKA_PORT
#   DATABASE_URL   postgres://rolloutledger:rolloutledger@127.0.0.1:$PGPORT/rolloutledger?sslmode=disable
# and, for the tests of the ledger's Kafka security, the broker's SASL and
# TLS test listeners (not used by anything else):
#   KAFKA_SASL_BROKERS      SASL_PLAINTEXT (SCRAM)  127.0.0.1:$KAFKA_PORT+2
#   KAFKA_SSL_BROKERS       SSL                     127.0.0.1:$KAFKA_PORT+3
#   KAFKA_SASL_SSL_BROKERS  SASL_SSL                127.0.0.1:$KAFKA_PORT+4
#   KAFKA_SSL_CA_FILE       the test CA that signed the broker's certificate
#   KAFKA_SCRAM_USER, KAFKA_SCRAM_PASSWORD  the SCRAM user made at format time
# Ports and locations follow the variables documented in scripts/kafka/start.sh
# and scripts/postgres/start.sh. Exits non-zero if either service fails.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_PORT=${KAFKA_PORT:-9092}
PGPORT=${PGPORT:-5432}
PG_APP_USER=${PG_APP_USER:-rolloutledger}
PG_APP_PASSWORD=${PG_APP_PASSWORD:-rolloutledger}
PG_APP_DB=${PG_APP_DB:-rolloutledger}
KAFKA_HOME_DIR=${KAFKA_HOME_DIR:-$(cd "$SCRIPT_DIR/.." && pwd)/.services/kafka}
KAFKA_SCRAM_USER=${KAFKA_SCRAM_USER:-ledger}
KAFKA_SCRAM_PASSWORD=${KAFKA_SCRAM_PASSWORD:-ledger-secret}
export KAFKA_PORT PGPORT PG_APP_USER PG_APP_PASSWORD PG_APP_DB

print_env() {
  # Single quotes: the URL contains '?', which an unquoted eval would glob.
  printf "export KAFKA_BROKERS='127.0.0.1:%s'\n" "$KAFKA_PORT"
  printf "export DATABASE_URL='postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable'\n" \
    "$PG_APP_USER" "$PG_APP_PASSWORD" "$PGPORT" "$PG_APP_DB"
  printf "export KAFKA_SASL_BROKERS='127.0.0.1:%s'\n" "${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}"
  printf "export KAFKA_SSL_BROKERS='127.0.0.1:%s'\n" "${KAFKA_SSL_PORT:-$((KAFKA_PORT + 3))}"
  printf "export KAFKA_SASL_SSL_BROKERS='127.0.0.1:%s'\n" "${KAFKA_SASL_SSL_PORT:-$((KAFKA_PORT + 4))}"
  printf "export KAFKA_SSL_CA_FILE='%s'\n" "$KAFKA_HOME_DIR/tls/ca.crt"
  printf "export KAFKA_SCRAM_USER='%s'\n" "$KAFKA_SCRAM_USER"
  printf "export KAFKA_SCRAM_PASSWORD='%s'\n" "$KAFKA_SCRAM_PASSWORD"
}

start() {
  local t0=$SECONDS kafka_pid pg_pid kafka_rc=0 pg_rc=0
  # Both scripts write progress to stderr only; their stdout is discarded so
  # nothing but the export lines reaches ours.
  "$SCRIPT_DIR/kafka/start.sh" >/dev/null &
  kafka_pid=$!
  "$SCRIPT_DIR/postgres/start.sh" >/dev/null &
  pg_pid=$!
  wait "$kafka_pid" || kafka_rc=$?
  wait "$pg_pid" || pg_rc=$?
  if [ $kafka_rc -ne 0 ] || [ $pg_rc -ne 0 ]; then
    [ $kafka_rc -eq 0 ] || echo "services: Kafka failed to start (exit $kafka_rc)" >&2
    [ $pg_rc -eq 0 ] || echo "services: PostgreSQL failed to start (exit $pg_rc)" >&2
    exit 1
  fi
  echo "services: Kafka and PostgreSQL up in $((SECONDS - t0))s" >&2
  print_env
}

stop() {
  local rc=0
  "$SCRIPT_DIR/kafka/stop.sh" >/dev/null || rc=1
  "$SCRIPT_DIR/postgres/stop.sh" >/dev/null || rc=1
  return $rc
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  env) print_env ;;
  *)
    echo "usage: $0 [start|stop|env]" >&2
    exit 2
    ;;
esac
