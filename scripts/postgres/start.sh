#!/usr/bin/env bash
# Start a PostgreSQL server for development and CI on 127.0.0.1:$PGPORT,
# with our own data directory (the distro's default cluster and systemd are
# not used), and make sure the application role and database exist.
# Idempotent: re-running it while the server is up only re-checks the role
# and database; a restart keeps the data.
#
# Environment (all optional):
#   PGPORT                 TCP port on 127.0.0.1                        [5432]
#   PG_DATA_DIR            data directory                               [see below]
#   PG_START_TIMEOUT       seconds to wait for the server               [60]
#   PG_APP_USER / PG_APP_PASSWORD / PG_APP_DB                  [rolloutledger]
#   PG_RESET=1             start from an empty data directory (only when
#                          the server is not running; .ci/run sets it)
#
# Data directory: initdb and postgres refuse to run as root, so the server
# runs as the `postgres` OS user (created by the Debian package), which must
# be able to reach its data directory. The default is <repo>/.services/postgres
# when every parent of it is traversable by `postgres`; otherwise (e.g. a clone
# under /root, mode 700) it is /var/lib/postgresql/rolloutledger/<hash of the
# repo path>, which is stable per clone. The choice is recorded in
# <repo>/.services/postgres.datadir for scripts/postgres/stop.sh.
#
# Run as a non-root user, the server runs as that user and the data directory
# must be writable by it.
#
# Authentication: peer on the unix socket, scram-sha-256 (password) on
# loopback TCP. Durability is relaxed (fsync=off, synchronous_commit=off):
# this server is for tests; a clean stop (stop.sh) loses nothing.
#
# Progress goes to stderr; nothing is printed on stdout.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=$REPO/.services

PGPORT=${PGPORT:-5432}
PG_START_TIMEOUT=${PG_START_TIMEOUT:-60}
PG_APP_USER=${PG_APP_USER:-rolloutledger}
PG_APP_PASSWORD=${PG_APP_PASSWORD:-rolloutledger}
PG_APP_DB=${PG_APP_DB:-rolloutledger}
DATADIR_POINTER=$STATE_DIR/postgres.datadir

log() { echo "postgres: $*" >&2; }
die() { echo "postgres: ERROR: $*" >&2; exit 1; }

IS_ROOT=false
[ "$(id -u)" = 0 ] && IS_ROOT=true
# Database superuser: named after the OS user that runs the server, so that
# peer authentication on the unix socket lets the admin connection in.
SUPERUSER=postgres
$IS_ROOT || SUPERUSER=$(id -un)

# Run a command as the server's OS user, from a directory it can read
# (initdb and pg_ctl fail when they cannot resolve the current directory).
as_pg() {
  if $IS_ROOT; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

find_pg_bin() {
  local d
  # shellcheck disable=SC2012 # version-sorted directory names
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
    echo "$d"
  fi
}

install_postgres() {
  $IS_ROOT || die "PostgreSQL is not installed; run: sudo apt-get install postgresql"
  log "installing PostgreSQL with apt-get"
  # Serialised with scripts/kafka/start.sh, which may run at the same time.
  (
    flock -w 900 9 || die "timed out waiting for the apt lock"
    export DEBIAN_FRONTEND=noninteractive
    # The package creates and starts a default cluster on 5432 where an init
    # system allows it; keep it from starting during the install (standard
    # policy-rc.d mechanism), so the port is ours.
    local policy=/usr/sbin/policy-rc.d added_policy=false
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      added_policy=true
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq postgresql; } >&2 || rc=$?
    if $added_policy; then rm -f "$policy"; fi
    [ $rc -eq 0 ] || die "apt-get install postgresql failed"
  ) 9>/var/lock/rolloutledger-apt.lock
}

choose_data_dir() {
  if [ -n "${PG_DATA_DIR:-}" ]; then
    echo "$PG_DATA_DIR"
  elif [ -s "$DATADIR_POINTER" ]; then
    cat "$DATADIR_POINTER"
  elif ! $IS_ROOT || as_pg test -x "$STATE_DIR"; then
    echo "$STATE_DIR/postgres"
  else
    echo "/var/lib/postgresql/rolloutledger/$(printf '%s' "$REPO" | sha256sum | cut -c1-12)"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

print_log() {
  [ -s "$PGLOG" ] || return 0
  echo "----- last 80 lines of $PGLOG -----" >&2
  tail -n 80 "$PGLOG" >&2
}

server_running() { as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }

init_cluster() {
  [ -f "$PGDATA/PG_VERSION" ] && return 0
  log "initialising $PGDATA"
  mkdir -p "$PGDATA"
  if $IS_ROOT; then chown postgres:postgres "$PGDATA"; fi
  chmod 700 "$PGDATA"
  as_pg "$PG_BIN/initdb" -D "$PGDATA" -U "$SUPERUSER" --auth-local=peer --auth-host=scram-sha-256 \
    -E UTF8 --no-locale >"$PGDATA.initdb.log" 2>&1 || {
    cat "$PGDATA.initdb.log" >&2
    die "initdb failed"
  }
  rm -f "$PGDATA.initdb.log"
}

write_config() {
  # Rewritten on every start so that changes here take effect on restart.
  if ! grep -q "^include_if_exists = 'rolloutledger.conf'" "$PGDATA/postgresql.conf"; then
    printf "\n# Settings managed by scripts/postgres/start.sh\ninclude_if_exists = 'rolloutledger.conf'\n" |
      as_pg tee -a "$PGDATA/postgresql.conf" >/dev/null
  fi
  as_pg tee "$PGDATA/rolloutledger.conf" >/dev/null <<CONF
# Written by scripts/postgres/start.sh on every start; edit the script, not this file.
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$SOCKET_DIR'
max_connections = 200
shared_buffers = 128MB
# Test server: trade crash safety for speed. A clean shutdown loses nothing.
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
timezone = 'UTC'
CONF
  as_pg tee "$PGDATA/pg_hba.conf" >/dev/null <<'HBA'
# Written by scripts/postgres/start.sh on every start.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 peer
host    all       all   127.0.0.1/32  scram-sha-256
host    all       all   ::1/128       scram-sha-256
HBA
}

wait_ready() {
  local deadline=$((SECONDS + PG_START_TIMEOUT)) t0=$SECONDS
  while [ $SECONDS -lt $deadline ]; do
    if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" -t 2; then
      log "server ready on 127.0.0.1:$PGPORT after $((SECONDS - t0))s"
      return 0
    fi
    # postmaster.pid appears a moment after pg_ctl returns; give it a grace
    # period before treating "not running" as a failed start.
    if [ $((SECONDS - t0)) -ge 3 ] && ! server_running; then
      print_log
      die "server exited during startup"
    fi
    sleep 0.3
  done
  print_log
  die "server did not accept connections on 127.0.0.1:$PGPORT within ${PG_START_TIMEOUT}s"
}

ensure_app_role_and_db() {
  # Superuser connection over the unix socket (peer auth).
  as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PGPORT" -U "$SUPERUSER" -d postgres \
    -v app_user="$PG_APP_USER" -v app_password="$PG_APP_PASSWORD" -v app_db="$PG_APP_DB" >&2 <<'SQL' ||
SELECT format('CREATE ROLE %I', :'app_user')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app_user') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB CREATEROLE PASSWORD %L', :'app_user', :'app_password') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'app_db', :'app_user')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'app_db') \gexec
SQL
    die "could not create role/database $PG_APP_USER/$PG_APP_DB"
  # The application's own view: password login over TCP.
  PGPASSWORD=$PG_APP_PASSWORD "$PG_BIN/psql" -X -q -At -h 127.0.0.1 -p "$PGPORT" -U "$PG_APP_USER" \
    -d "$PG_APP_DB" -c 'select 1' >/dev/null ||
    die "cannot log in as $PG_APP_USER to $PG_APP_DB on 127.0.0.1:$PGPORT"
}

main() {
  PG_BIN=${PG_BIN:-$(find_pg_bin)}
  if [ -z "$PG_BIN" ]; then
    install_postgres
    PG_BIN=$(find_pg_bin)
    [ -n "$PG_BIN" ] || die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin after install"
  fi
  if $IS_ROOT; then
    getent passwd postgres >/dev/null || die "OS user 'postgres' missing (it comes with the postgresql package)"
  fi

  mkdir -p "$STATE_DIR"
  PGDATA=$(choose_data_dir)
  if $IS_ROOT && ! as_pg test -x "$(dirname "$PGDATA")" 2>/dev/null; then
    mkdir -p "$(dirname "$PGDATA")"
    as_pg test -x "$(dirname "$PGDATA")" ||
      die "the postgres OS user cannot reach $(dirname "$PGDATA"); set PG_DATA_DIR to a path it can reach"
  fi
  echo "$PGDATA" >"$DATADIR_POINTER"
  PGLOG=$PGDATA/postgres.log
  if $IS_ROOT; then
    SOCKET_DIR=/var/run/postgresql
    install -d -o postgres -g postgres -m 2775 "$SOCKET_DIR"
  else
    SOCKET_DIR=/tmp
  fi
  log "using $("$PG_BIN/postgres" --version), data directory $PGDATA"

  if [ "${PG_RESET:-0}" = 1 ] && [ -f "$PGDATA/PG_VERSION" ] && ! server_running; then
    log "PG_RESET=1: removing the old data directory $PGDATA"
    rm -rf "$PGDATA"
  fi
  init_cluster

  if server_running; then
    local running_port
    running_port=$(sed -n 4p "$PGDATA/postmaster.pid" 2>/dev/null || true)
    [ "$running_port" = "$PGPORT" ] ||
      die "our server is already running on port ${running_port:-?}, not $PGPORT; run scripts/postgres/stop.sh first"
    log "server already running (data directory $PGDATA)"
  else
    if port_open "$PGPORT"; then
      die "127.0.0.1:$PGPORT is already in use by another server (not ours: $PGDATA);" \
        "stop it or set PGPORT. $(command -v ss >/dev/null && ss -ltnpH "sport = :$PGPORT" 2>/dev/null | tr -s ' ')"
    fi
    write_config
    log "starting server on 127.0.0.1:$PGPORT, log $PGLOG"
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PGLOG" -W start >/dev/null ||
      { print_log; die "pg_ctl start failed"; }
  fi
  wait_ready
  ensure_app_role_and_db
  log "database $PG_APP_DB ready for role $PG_APP_USER"
}

main "$@"
