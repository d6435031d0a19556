-- Least privilege: analysts read through rolloutledger_reader, a role that
-- cannot log in and can only SELECT from this schema's tables and views
-- (those of later migrations too, through default privileges). Grant it to
-- an analyst's login role:
--
--   CREATE ROLE alice LOGIN PASSWORD '...';
--   GRANT rolloutledger_reader TO alice;
--
-- Roles belong to the cluster, not the database: the role is created once
-- and reused by every schema the migrations build. Creating it needs
-- CREATEROLE; where the migrating role lacks it, a DBA creates the role
-- beforehand (CREATE ROLE rolloutledger_reader NOLOGIN) and the migration
-- only grants.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rolloutledger_reader') THEN
        CREATE ROLE rolloutledger_reader NOLOGIN;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO rolloutledger_reader', current_schema());
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO rolloutledger_reader', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO rolloutledger_reader', current_schema());
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I REVOKE SELECT ON TABLES FROM rolloutledger_reader', current_schema());
    EXECUTE format('REVOKE SELECT ON ALL TABLES IN SCHEMA %I FROM rolloutledger_reader', current_schema());
    EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM rolloutledger_reader', current_schema());
END
$$;
-- +goose StatementEnd
