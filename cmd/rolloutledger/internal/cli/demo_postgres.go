package cli

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// The two view queries the demo prints: what each training step looked
// like, and what the run cost.
var demoQueries = []string{
	`SELECT step, groups, dropped_groups AS dropped, round(zero_signal_rate::numeric, 3) AS zero_signal,
       round(pass_rate::numeric, 3) AS pass_rate, round(masked_turn_fraction::numeric, 3) AS masked,
       round(mean_in_flight::numeric, 2) AS in_flight, round(mean_in_queue::numeric, 2) AS in_queue,
       round(tokens_per_solve) AS tok_per_solve, truncated_fraction AS truncated
  FROM rolloutledger.step_metrics WHERE run = $1 ORDER BY step`,
	`SELECT purpose, attempts, solves, solved_tasks, round(cost_usd::numeric, 4) AS cost_usd,
       round(cost_per_attempt_usd::numeric, 5) AS per_attempt, round(cost_per_solved_task_usd::numeric, 4) AS per_solved_task
  FROM rolloutledger.run_costs WHERE run = $1 ORDER BY purpose`,
}

// demoPostgres projects the demo's log into Postgres when $DATABASE_URL
// is set: it migrates the rolloutledger schema, runs a sink until it has
// stored every fact and decision, and prints two view queries with their
// output. Without $DATABASE_URL it says how to get that, and needs nothing.
func demoPostgres(ctx context.Context, out io.Writer, d *devStack, run string) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(out, "\nPostgres: set DATABASE_URL to also project the run into Postgres and query its views (docs/analysts.md).")
		return nil
	}
	start := time.Now()
	if _, err := pgsink.Migrate(ctx, url, pgsink.DefaultSchema, nil); err != nil {
		return err
	}
	sink, err := pgsink.New(pgsink.Options{Kafka: d.kafka, DatabaseURL: url})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sink.Run(sctx) }()
	defer func() { stop(); <-done }()

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := projected(wctx, d); err != nil {
		return err
	}
	ends, err := pgsink.EndOffsets(wctx, d.kafka)
	if err != nil {
		return err
	}
	if err := sink.WaitStored(wctx, ends); err != nil {
		return err
	}
	st := sink.Stats()
	fmt.Fprintf(out, "\nPostgres read model at %s, schema %s: %d records stored as %d rows in %s\n",
		whereIs(url), pgsink.DefaultSchema, st.Records, st.Rows, time.Since(start).Round(time.Millisecond))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range demoQueries {
		shown := strings.Replace(q, "$1", "'"+run+"'", 1)
		fmt.Fprintf(out, "\n%s;\n\n", shown)
		if err := printQuery(ctx, out, conn, q, run); err != nil {
			return err
		}
	}
	return nil
}

// projected waits until the projector has folded every fact written so
// far, so that every decision about them is on the decisions topic.
func projected(ctx context.Context, d *devStack) error {
	ends, err := kafkalog.EndOffsets(ctx, d.kafka, d.kafka.FactsTopic())
	if err != nil {
		return err
	}
	p := d.stack.Projector()
	for {
		behind := false
		for part, end := range ends {
			if off, err := p.Offset(part); err != nil {
				return err
			} else if off < end {
				behind = true
			}
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the projector did not catch up: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// printQuery prints a query's result as psql's aligned format does.
func printQuery(ctx context.Context, out io.Writer, conn *pgx.Conn, q string, args ...any) error {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var head []string
	for _, f := range rows.FieldDescriptions() {
		head = append(head, f.Name)
	}
	var cells [][]string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		line := make([]string, len(vals))
		for i, v := range vals {
			line[i] = cell(v)
		}
		cells = append(cells, line)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = len(h)
	}
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], len(c))
		}
	}
	row := func(line []string) {
		parts := make([]string, len(line))
		for i, c := range line {
			parts[i] = fmt.Sprintf(" %*s ", width[i], c)
		}
		fmt.Fprintln(out, strings.TrimRight(strings.Join(parts, "|"), " "))
	}
	row(head)
	rule := make([]string, len(head))
	for i := range head {
		rule[i] = strings.Repeat("-", width[i]+2)
	}
	fmt.Fprintln(out, strings.Join(rule, "+"))
	for _, line := range cells {
		row(line)
	}
	fmt.Fprintf(out, "(%d rows)\n", len(cells))
	return nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case driver.Valuer:
		if dv, err := x.Value(); err == nil {
			return cell(dv)
		}
	case float64:
		return fmt.Sprintf("%g", x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}
