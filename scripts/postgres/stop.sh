#!/usr/bin/env bash
# Stop the server started by scripts/postgres/start.sh (fast shutdown: open
# connections are closed, data is kept). The data directory is the one
# start.sh recorded in <repo>/.services/postgres.datadir, or PG_DATA_DIR.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
DATADIR_POINTER=$REPO/.services/postgres.datadir
PG_STOP_TIMEOUT=${PG_STOP_TIMEOUT:-60}

log() { echo "postgres: $*" >&2; }

PGDATA=${PG_DATA_DIR:-}
if [ -z "$PGDATA" ] && [ -s "$DATADIR_POINTER" ]; then PGDATA=$(cat "$DATADIR_POINTER"); fi
if [ -z "$PGDATA" ] || [ ! -f "$PGDATA/PG_VERSION" ]; then
  log "not running (no data directory)"
  exit 0
fi

PG_BIN=${PG_BIN:-/usr/lib/postgresql/$(cat "$PGDATA/PG_VERSION")/bin}
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  log "not running"
  exit 0
fi
log "stopping server ($PGDATA)"
as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t "$PG_STOP_TIMEOUT" stop >/dev/null
log "stopped"
