package pgsink_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/migrations"
)

// The views migrations 00005 and 00006 rewrote, over the totals and the
// per-attempt rows their triggers keep as the sink inserts, answer exactly
// as the views of migration 00002 did
// over the rows themselves: the same rows, the same values, for a run
// with a trainer, drops, masked turns, compactions and infra failures,
// whose facts were all delivered twice.
func TestViewsOf00005AnswerAsThoseOf00002(t *testing.T) {
	kc := testenv.RealKafka(t)
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	s := startLedger(t, kc, url, schema)
	o := small("views-00005", 5)
	o.URL, o.GroupSize, o.MaxStaleness = s.URL(), 4, 1
	if _, err := simulate.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, kc)
	waitStored(t, url, schema, kc)
	// Every fact delivered a second time, as a retrying producer would:
	// the sink drops them (through its staging tables), and the totals
	// must not count them.
	ctx := context.Background()
	var again []kafkalog.Record
	for _, r := range readLog(t, kc).byRun["views-00005"] {
		again = append(again, kafkalog.Record{Key: []byte("views-00005"), Value: r.Value})
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	if _, err := w.Append(ctx, again); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := len(readLog(t, kc).byRun["views-00005"]); got != 2*len(again) {
		t.Fatalf("the facts topic holds %d of the run's records, want each of %d twice", got, len(again))
	}
	waitProjected(t, s, kc)
	waitStored(t, url, schema, kc)

	conn := connect(t, url)
	old := testenv.Schema(t, url)
	b, err := fs.ReadFile(migrations.FS, "00002_views.sql")
	if err != nil {
		t.Fatal(err)
	}
	up := string(b)
	up = up[strings.Index(up, "-- +goose Up"):strings.Index(up, "-- +goose Down")]
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA "+old+"; SET LOCAL search_path = "+old+", "+schema); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, up); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// run_costs sums doubles, whose last bits depend on the order the
	// rows are added in, which neither view fixes: compared to 1e-9.
	costs := `run, purpose, attempts, solves, solved_tasks, prompt_tokens, cached_tokens, completion_tokens,
		round(cost_usd::numeric, 9), round(cost_per_attempt_usd::numeric, 9), round(cost_per_solve_usd::numeric, 9),
		round(cost_per_solved_task_usd::numeric, 9)`
	for _, view := range []string{"step_metrics", "staleness_histogram", "logprob_gap_by_staleness", "task_metrics",
		"tool_usage", "attempt_costs", "run_costs", "compaction_savings"} {
		cols := "*"
		if view == "run_costs" {
			cols = costs
		}
		got, n := viewRows(t, conn, schema, view, cols)
		want, _ := viewRows(t, conn, old, view, cols)
		if n == 0 {
			t.Errorf("%s: no rows, nothing compared", view)
		}
		if got != want {
			t.Errorf("%s after 00005:\n%s\nwant, as 00002 answers:\n%s", view, got, want)
		}
	}
}

// viewRows is cols of every row of a view as text, in a fixed order.
func viewRows(t *testing.T, conn *pgx.Conn, schema, view, cols string) (string, int) {
	t.Helper()
	var rows []string
	if err := conn.QueryRow(context.Background(), "SELECT coalesce(array_agg(v::text ORDER BY v::text), '{}') FROM (SELECT "+
		cols+" FROM "+pgx.Identifier{schema, view}.Sanitize()+") v").Scan(&rows); err != nil {
		t.Fatalf("%s.%s: %v", schema, view, err)
	}
	return strings.Join(rows, "\n"), len(rows)
}
