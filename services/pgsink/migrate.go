package pgsink

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/rolloutledger/rolloutledger/migrations"
)

// MigrateResult reports what [Migrate] did.
type MigrateResult struct {
	// Applied lists the versions applied now, in order.
	Applied []int64
	// Version is the schema's version afterwards.
	Version int64
}

// Migrate brings schema (default [DefaultSchema]) up to the newest version
// of the embedded migrations, creating it if needed. The migrations' record
// (goose's version table) lives in the schema itself, so a schema renamed by
// a rebuild keeps its history. Concurrent calls are serialized by an
// advisory lock, and applying an up-to-date schema changes nothing.
func Migrate(ctx context.Context, databaseURL, schema string, log *slog.Logger) (MigrateResult, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if !schemaName.MatchString(schema) {
		return MigrateResult{}, fmt.Errorf("pgsink: schema %q: want [a-z_][a-z0-9_]{0,62}", schema)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("pgsink: database URL: %w", err)
	}
	// Unqualified names in the migrations resolve to the target schema
	// (schemaName admits nothing that needs quoting here).
	cfg.RuntimeParams["search_path"] = schema
	cfg.RuntimeParams["application_name"] = "rolloutledger-migrate"
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return MigrateResult{}, fmt.Errorf("pgsink: create schema %s: %w", schema, err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return MigrateResult{}, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("pgsink: migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("pgsink: migrate %s: %w", schema, err)
	}
	var out MigrateResult
	for _, r := range results {
		out.Applied = append(out.Applied, r.Source.Version)
		log.Info("migration applied", "schema", schema, "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
	}
	if out.Version, err = p.GetDBVersion(ctx); err != nil {
		return out, fmt.Errorf("pgsink: schema version: %w", err)
	}
	return out, nil
}

// schemaExists reports whether schema exists.
func schemaExists(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok)
	return ok, err
}
