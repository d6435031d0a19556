#!/bin/sh
# Runs once, when the Postgres volume is initialized: Grafana's login role,
# a member of rolloutledger_reader. The migrations create that role if it is
# missing and grant it SELECT on the read model (migrations/00003); creating
# it here first lets the login exist before the first migration. Grafana
# reads through it and so can never write.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v grafana_password="${GRAFANA_DB_PASSWORD:-grafana}" <<'SQL'
SELECT 'CREATE ROLE rolloutledger_reader NOLOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rolloutledger_reader') \gexec
CREATE ROLE grafana LOGIN PASSWORD :'grafana_password' IN ROLE rolloutledger_reader;
ALTER ROLE grafana SET search_path = rolloutledger;
ALTER ROLE grafana SET default_transaction_read_only = on;
ALTER ROLE grafana SET statement_timeout = '30s';
SQL
