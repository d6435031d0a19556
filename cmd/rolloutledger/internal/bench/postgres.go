package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

func postgresFigures(ctx context.Context, e *env) ([]*Figure, error) {
	var out []*Figure
	for _, tokens := range []bool{false, true} {
		figs, err := sinkFigures(ctx, e, tokens)
		if err != nil {
			return nil, err
		}
		out = append(out, figs...)
	}
	return out, nil
}

// sinkFigures measures a fresh sink's drain of a simulated run beside
// psql's \copy of the same rows: payload-free, or with every turn's token
// arrays inline, as a real run's turns carry them. The rows are the same
// either way (the sink stores a turn's token counts, not its tokens); the
// records the sink reads and decodes are not.
func sinkFigures(ctx context.Context, e *env, tokens bool) ([]*Figure, error) {
	name, sub := "pgsink into Postgres", "payload-free"
	if tokens {
		name, sub = "pgsink into Postgres, inline token turns", "tokens"
	}
	sink := &Figure{Name: name, Unit: "rows/s", Command: e.cmd(GroupPostgres) + " ; go test -run '^$' -bench 'SinkVsPsqlCopy/" + sub + "' -benchtime 3x ./cmd/rolloutledger/internal/bench/"}
	psql := &Figure{Name: "psql \\copy of the same rows", Unit: "rows/s", Command: sink.Command}
	if tokens {
		psql.Name = "psql \\copy of the same rows (token run)"
	}
	if e.o.DatabaseURL == "" {
		sink.Skipped, psql.Skipped = true, true
		sink.Note = "no database: pass --database-url or set $DATABASE_URL"
		return []*Figure{sink, psql}, nil
	}
	if _, err := exec.LookPath(e.o.Psql); err != nil {
		psql.Skipped, psql.Note = true, e.o.Psql+" is not on PATH"
	}
	o := simulate.Options{Seed: 1, Tasks: 96, Steps: 8, Tokens: tokens}
	if e.o.Short {
		o = simulate.Options{Seed: 1, Tasks: 12, Steps: 2, BatchGroups: 2, MaxTurns: 30, Tokens: tokens}
	}
	sr, err := generate(o, "bench-sink")
	if err != nil {
		return nil, err
	}
	bytes := 0
	for _, v := range sr.values {
		bytes += len(v)
	}
	kc := e.kafka("sink-"+sub, 12)
	records, err := seedWithDecisions(ctx, kc, sr)
	if err != nil {
		return nil, err
	}
	for run := range e.o.Runs {
		e.log.Info("postgres", "run", run+1, "records", records, "tokens", tokens)
		schema := e.schema()
		took, rows, err := DrainSink(ctx, kc, e.o.DatabaseURL, schema)
		if err != nil {
			return nil, err
		}
		sink.Runs = append(sink.Runs, float64(rows)/took.Seconds())
		sink.Note = fmt.Sprintf("a fresh sink draining %d Kafka records (a simulated run's facts, %d MB of them, and its decisions) into %d rows of a fresh schema, timed to the commit of the last", records, bytes/1e6, rows)
		if psql.Skipped {
			continue
		}
		took, rows, err = PsqlCopy(ctx, e.o.Psql, e.o.DatabaseURL, schema, e.schema())
		if err != nil {
			return nil, err
		}
		psql.Runs = append(psql.Runs, float64(rows)/took.Seconds())
		psql.Note = "the sink's rows exported to CSV, then loaded by psql \\copy into the same tables of a fresh schema (same indexes and constraints), parents first"
	}
	// The goal rose from 0.7 to 0.9 once 0.7 was met.
	sink.link = func(map[string]*Figure) { sink.against(psql, 0.9, ">= 90% of psql \\copy") }
	return []*Figure{sink, psql}, nil
}

func (e *env) schema() string {
	e.n++
	s := fmt.Sprintf("%s_%d", strings.ReplaceAll(e.prefix, "-", "_"), e.n)
	e.drop = append(e.drop, s)
	return s
}

// seedWithDecisions appends the run's facts, folds them at the positions
// Kafka gave them, and appends the decisions, as the projector would.
func seedWithDecisions(ctx context.Context, kc kafkalog.Config, sr *simRun) (int, error) {
	pos, err := seed(ctx, kc, sr.run, sr.values)
	if err != nil {
		return 0, err
	}
	recs := make([]projections.Record, len(sr.records))
	for i, r := range sr.records {
		r.Partition, r.Offset = pos[i].Partition, pos[i].Offset
		recs[i] = r
	}
	ds, err := projections.FoldAll(sr.run, recs)
	if err != nil {
		return 0, err
	}
	values := make([][]byte, len(ds))
	for i, d := range ds {
		values[i] = d.Value
	}
	w := kafkalog.NewWriter(kc, kc.DecisionsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	if _, err := appendValues(ctx, w, sr.run, values); err != nil {
		return 0, err
	}
	return len(recs) + len(ds), nil
}

// DrainSink runs a sink into a fresh schema until it stored every record
// of the log, and returns how long that took and the rows it inserted.
// The pgsink's Go benchmark measures with it too.
func DrainSink(ctx context.Context, kc kafkalog.Config, url, schema string) (time.Duration, int64, error) {
	if _, err := pgsink.Migrate(ctx, url, schema, nil); err != nil {
		return 0, 0, err
	}
	ends, err := pgsink.EndOffsets(ctx, kc)
	if err != nil {
		return 0, 0, err
	}
	pending := 0
	for _, e := range ends {
		if e > 0 {
			pending++
		}
	}
	done := make(chan struct{})
	var rows int64
	sink, err := pgsink.New(pgsink.Options{Kafka: kc, DatabaseURL: url, Schema: schema, OnCommit: func(c pgsink.Commit) {
		rows += c.Rows
		for tp, next := range c.Next {
			if end := ends[tp]; end > 0 && next >= end {
				ends[tp] = 0
				if pending--; pending == 0 {
					close(done)
				}
			}
		}
	}})
	if err != nil {
		return 0, 0, err
	}
	sctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	start := time.Now()
	go func() { defer close(ran); _ = sink.Run(sctx) }()
	defer func() { cancel(); <-ran }()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return 0, 0, fmt.Errorf("the sink did not catch up within 10 minutes")
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return time.Since(start), rows, nil
}

// PsqlCopy exports every table the sink filled in from to CSV, then times
// psql (the binary at psql) loading the same rows into the same tables of
// a fresh schema with \copy, one table after another, parents first.
func PsqlCopy(ctx context.Context, psql, url, from, to string) (time.Duration, int64, error) {
	if _, err := pgsink.Migrate(ctx, url, to, nil); err != nil {
		return 0, 0, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	dir, err := os.MkdirTemp("", "rolloutledger-bench-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	var script strings.Builder
	var rows int64
	for _, table := range pgsink.TableNames() {
		if table == "prices" {
			continue // the analysts' table: the migrations wrote its one row
		}
		file := filepath.Join(dir, table+".csv")
		f, err := os.Create(file)
		if err != nil {
			return 0, 0, err
		}
		tag, err := conn.PgConn().CopyTo(ctx, f, fmt.Sprintf("COPY %s TO STDOUT WITH (FORMAT csv)", pgx.Identifier{from, table}.Sanitize()))
		f.Close()
		if err != nil {
			return 0, 0, err
		}
		rows += tag.RowsAffected()
		fmt.Fprintf(&script, "\\copy %s FROM '%s' WITH (FORMAT csv)\n", pgx.Identifier{to, table}.Sanitize(), file)
	}
	scriptFile := filepath.Join(dir, "load.psql")
	if err := os.WriteFile(scriptFile, []byte(script.String()), 0o644); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", scriptFile).CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("psql: %v\n%s", err, out)
	}
	return took, rows, nil
}

func dropSchemas(ctx context.Context, url string, schemas []string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			return err
		}
	}
	return nil
}
