#!/usr/bin/env bash
# Stop the broker started by scripts/kafka/start.sh (via its pid file).
# Sends SIGTERM (controlled shutdown) and waits; SIGKILL after
# KAFKA_STOP_TIMEOUT seconds [60]. Data in $KAFKA_HOME_DIR/data is kept.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
KAFKA_HOME_DIR=${KAFKA_HOME_DIR:-$REPO/.services/kafka}
KAFKA_STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-60}
PID_FILE=$KAFKA_HOME_DIR/kafka.pid

log() { echo "kafka: $*" >&2; }

if [ ! -f "$PID_FILE" ]; then
  log "not running (no $PID_FILE)"
  exit 0
fi
pid=$(cat "$PID_FILE")
# Only signal the process if it still is our broker (pids get reused).
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null ||
  ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'; then
  log "not running (stale pid file)"
  rm -f "$PID_FILE"
  exit 0
fi

log "stopping broker (pid $pid)"
kill -TERM "$pid"
deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
while kill -0 "$pid" 2>/dev/null; do
  if [ $SECONDS -ge $deadline ]; then
    log "broker did not stop within ${KAFKA_STOP_TIMEOUT}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    break
  fi
  sleep 0.2
done
rm -f "$PID_FILE"
log "stopped"
