package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/docs"
	"github.com/rolloutledger/rolloutledger/migrations"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// analystsTimeout bounds one documented query; a query of the views before
// migration 00005 that takes longer is reported at this bound.
const analystsTimeout = 30 * time.Second

// analystsFigures times every query of docs/analysts.md against one run of
// about AnalystsFacts facts in Postgres. The run is a simulated run stored
// by the pgsink (from Kafka, as in production), then copied in SQL as many
// times as it takes, with every key rewritten per copy (ids, attempts,
// groups, tasks, steps, log positions) so that the copies are one run's
// distinct facts and decisions; the inserts fire the same triggers as the
// sink's. With AnalystsBefore the same queries also run against the views
// as migration 00002 defined them, over the same tables.
func analystsFigures(ctx context.Context, e *env) ([]*Figure, error) {
	if e.o.DatabaseURL == "" {
		return []*Figure{{Name: "analysts' queries", Skipped: true, Command: e.cmd(GroupAnalysts),
			Note: "no database: pass --database-url or set $DATABASE_URL"}}, nil
	}
	return analystsAt(ctx, e, e.o.AnalystsFacts, e.cmd(GroupAnalysts, fmt.Sprintf("--analysts-facts %d", e.o.AnalystsFacts)))
}

// analystsAt times the documented queries on one run of about facts facts;
// command reproduces the figures.
func analystsAt(ctx context.Context, e *env, facts int, command string) ([]*Figure, error) {
	o := simulate.Options{Seed: 1, Tasks: 96, Steps: 8, MaxStaleness: 3}
	if e.o.Short {
		o = simulate.Options{Seed: 1, Tasks: 12, Steps: 2, BatchGroups: 2, MaxTurns: 30}
	}
	sr, err := generate(o, "bench-analysts-source")
	if err != nil {
		return nil, err
	}
	kc := e.kafka("analysts", 12)
	if _, err := seedWithDecisions(ctx, kc, sr); err != nil {
		return nil, err
	}
	src := e.schema()
	if _, _, err := DrainSink(ctx, kc, e.o.DatabaseURL, src); err != nil {
		return nil, err
	}
	dst := e.schema()
	if _, err := pgsink.Migrate(ctx, e.o.DatabaseURL, dst, nil); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, e.o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	run := "fireflash-" + randomHex(4)
	t0 := time.Now()
	loaded, copies, err := replicateRun(ctx, conn, e, src, dst, run, facts)
	if err != nil {
		return nil, err
	}
	e.log.Info("analysts: run loaded", "run", run, "facts", loaded, "copies", copies, "took", time.Since(t0).Round(time.Second))

	var before string
	if e.o.AnalystsBefore {
		before = e.schema()
		if err := createOldViews(ctx, conn, before, dst); err != nil {
			return nil, err
		}
	}
	if e.o.AnalystsKeep {
		e.drop = slices.DeleteFunc(e.drop, func(s string) bool { return s == dst || s == before })
		e.log.Info("analysts: keeping the loaded run", "schema", dst, "old_views", before, "run", run)
	}
	load := fmt.Sprintf("%d facts (%d copies of a simulated run of seed 1 stored by the pgsink, keys rewritten per copy; loaded in SQL, not through Kafka)", loaded, copies)
	var figs []*Figure
	for _, b := range docs.SQLBlocks(docs.Analysts) {
		if strings.Contains(b.SQL, "CREATE ROLE") || strings.HasPrefix(strings.TrimSpace(b.SQL), `\set`) ||
			strings.HasPrefix(strings.TrimSpace(b.SQL), "SET ") {
			continue
		}
		name := fmt.Sprintf("analysts.md:%d %s", b.Line, queryLabel(b.SQL))
		f := &Figure{Name: name, Unit: "ms", Command: command,
			Note: "one run of " + load + "; JIT off, as docs/analysts.md has analysts' roles set"}
		var old *Figure
		if before != "" {
			old = &Figure{Name: name + " (views of 00002)", Unit: "ms", Command: f.Command + " --analysts-before",
				Note: "the same query and rows, through the views as migration 00002 defined them, JIT as the server has it; timed once"}
		}
		for range e.o.Runs {
			took, err := timeBlock(ctx, conn, dst, b.SQL, run, false)
			if err != nil {
				return nil, fmt.Errorf("docs/analysts.md:%d: %w", b.Line, err)
			}
			f.Runs = append(f.Runs, float64(took)/float64(time.Millisecond))
			if old != nil && len(old.Runs) == 0 { // once: they may take the whole timeout
				took, err := timeBlock(ctx, conn, before+", "+dst, b.SQL, run, true)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "57014" { // query_canceled: statement_timeout
					took, old.Note = analystsTimeout, old.Note+fmt.Sprintf("; over the %s statement_timeout", analystsTimeout)
				} else if err != nil {
					return nil, fmt.Errorf("docs/analysts.md:%d before 00005: %w", b.Line, err)
				}
				old.Runs = append(old.Runs, float64(took)/float64(time.Millisecond))
			}
		}
		f.link = func(map[string]*Figure) { f.goalAtMost(1000, "<= 1 s") }
		figs = append(figs, f)
		if old != nil {
			figs = append(figs, old)
		}
	}
	return figs, nil
}

var fromName = regexp.MustCompile(`(?i)\bFROM\s+([a-z_]+)`)

// queryLabel names a documented query by the first table or view it reads.
func queryLabel(sql string) string {
	if m := fromName.FindStringSubmatch(sql); m != nil {
		return m[1]
	}
	return "query"
}

// timeBlock runs one documented block in a transaction with the search
// path, the run for psql's :'run', and the statement timeout set, and
// returns how long its statements took; the transaction is rolled back (the
// price block writes). The analysts' roles have JIT compilation off, as
// docs/analysts.md has the DBA set it; jit keeps the server's setting, as
// before migration 00005.
func timeBlock(ctx context.Context, conn *pgx.Conn, searchPath, sql, run string, jit bool) (time.Duration, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL search_path = %s; SET LOCAL statement_timeout = %d", searchPath, analystsTimeout.Milliseconds())); err != nil {
		return 0, err
	}
	if !jit {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return 0, err
		}
	}
	lit := "'" + strings.ReplaceAll(run, "'", "''") + "'"
	var took time.Duration
	for _, st := range docs.Statements(sql) {
		st = strings.ReplaceAll(st, ":'run'", lit)
		start := time.Now()
		rows, err := tx.Query(ctx, st, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		took += time.Since(start)
	}
	return took, nil
}

// replicateRun copies the run stored in src into dst as one run of at
// least facts facts, and returns its size and the number of copies.
func replicateRun(ctx context.Context, conn *pgx.Conn, e *env, src, dst, run string, facts int) (int64, int, error) {
	var perCopy int64
	for _, t := range []string{"runs", "tasks", "groups", "group_closures", "attempts", "attempt_outcomes", "attempt_failures",
		"turns", "tool_calls", "compactions", "rewards", "policy_versions", "gradient_steps"} {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{src, t}.Sanitize()).Scan(&n); err != nil {
			return 0, 0, err
		}
		perCopy += n
	}
	if perCopy == 0 {
		return 0, 0, errors.New("the sink stored no facts")
	}
	copies := int((int64(facts) + perCopy - 1) / perCopy)
	// Keys that must differ per copy: steps and log positions are shifted
	// past the source's, names are prefixed with the copy.
	var steps, offsets int64
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(max(seq), 0) + 1 FROM %s`, pgx.Identifier{src, "batches"}.Sanitize())).Scan(&steps); err != nil {
		return 0, 0, err
	}
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT greatest((SELECT max(log_offset) FROM %s), (SELECT max(log_offset) FROM %s)) + 1`,
		pgx.Identifier{src, "turns"}.Sanitize(), pgx.Identifier{src, "batches"}.Sanitize())).Scan(&offsets); err != nil {
		return 0, 0, err
	}
	const chunk = 16 // copies per statement
	for _, table := range pgsink.TableNames() {
		switch table {
		case "consumed_offsets", "skipped_records":
			continue
		}
		cols, err := columns(ctx, conn, dst, table)
		if err != nil {
			return 0, 0, err
		}
		names := make([]string, len(cols))
		exprs := make([]string, len(cols))
		for i, c := range cols {
			names[i] = pgx.Identifier{c.name}.Sanitize()
			exprs[i] = rewrite(c, run, steps, offsets)
		}
		last := copies
		if table == "runs" {
			last = 1
		}
		for lo := 0; lo < last; lo += chunk {
			hi := min(lo+chunk, last)
			q := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM generate_series(%d, %d) AS k, %s AS s ORDER BY k, s.ctid",
				pgx.Identifier{dst, table}.Sanitize(), strings.Join(names, ", "), strings.Join(exprs, ", "),
				lo, hi-1, pgx.Identifier{src, table}.Sanitize())
			if _, err := conn.Exec(ctx, q); err != nil {
				return 0, 0, fmt.Errorf("copy %s: %w", table, err)
			}
		}
		e.log.Info("analysts: table loaded", "table", table)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return 0, 0, err
	}
	return perCopy * int64(copies), copies, nil
}

type column struct{ name, typ string }

func columns(ctx context.Context, conn *pgx.Conn, schema, table string) ([]column, error) {
	rows, err := conn.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.name, &c.typ)
	})
}

// rewrite is the expression of column c in copy k (the SQL variable k).
func rewrite(c column, run string, steps, offsets int64) string {
	q := "s." + pgx.Identifier{c.name}.Sanitize()
	switch {
	case c.name == "run":
		return "'" + run + "'"
	case c.typ == "uuid":
		// The copy's number in the first 8 hex digits: unique, and each
		// copy's keys land together in the index.
		return fmt.Sprintf("(lpad(to_hex(k), 8, '0') || substr(%s::text, 9))::uuid", q)
	}
	switch c.name {
	case "attempt", "group_id", "task", "retry_of":
		return fmt.Sprintf("k || '/' || %s", q)
	case "batch", "seq", "step":
		return fmt.Sprintf("%s + k * %d", q, steps)
	case "log_offset", "turn_offset", "fact_offset", "watermark_offset", "completed_offset", "fact_seq":
		return fmt.Sprintf("%s + k * %d", q, offsets)
	}
	return q
}

// createOldViews creates, in schema before, the views as migration 00002
// defined them, over the tables of schema tables.
func createOldViews(ctx context.Context, conn *pgx.Conn, before, tables string) error {
	b, err := fs.ReadFile(migrations.FS, "00002_views.sql")
	if err != nil {
		return err
	}
	up := string(b)
	up = up[strings.Index(up, "-- +goose Up"):strings.Index(up, "-- +goose Down")]
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %s; SET LOCAL search_path = %s, %s",
		pgx.Identifier{before}.Sanitize(), pgx.Identifier{before}.Sanitize(), pgx.Identifier{tables}.Sanitize())); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, up); err != nil {
		return fmt.Errorf("the views of 00002: %w", err)
	}
	return tx.Commit(ctx)
}
