// Package migrations holds the versioned SQL of the analysts' Postgres read
// model (docs/design.md §13), embedded in the binary. services/pgsink applies it
// with goose, into one schema (`rolloutledger` unless told otherwise).
//
// # Conventions
//
//   - Files are NNNNN_name.sql, applied in order, each in one transaction;
//     a released file is never edited: a change is a new file.
//   - Statements name no schema. The migrator sets search_path to the target
//     schema, so the same files build `rolloutledger`, a rebuild's fresh
//     schema, and the tests' throwaway ones. Grants that must name the
//     schema use current_schema() in a DO block.
//   - 00003 grants rolloutledger_reader SELECT on everything and sets
//     default privileges for the migrating role; a later migration run by
//     another role grants SELECT on what it creates itself.
//   - Every fact table is keyed by the fact's event id and holds one row per
//     distinct id; every decision table by its run and sequence number.
//     The sink inserts with ON CONFLICT DO NOTHING, so a delivery that
//     repeats an id lands once.
package migrations

import "embed"

// FS holds the migration files at its root.
//
//go:embed *.sql
var FS embed.FS
