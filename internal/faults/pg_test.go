package faults_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/kafkalog"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/simulate"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func count(t *testing.T, conn *pgx.Conn, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitStored waits until schema holds every record of both topics.
func waitStored(t *testing.T, url, schema string, kc kafkalog.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pgsink.WaitCaughtUp(ctx, url, schema, kc); err != nil {
		t.Fatal(err)
	}
}

// factTables are the tables with one row per fact of a type.
var factTables = map[events.Type]string{
	"run.started": "runs", "task.registered": "tasks", "group.started": "groups",
	"attempt.started": "attempts", "attempt.finished": "attempt_outcomes", "attempt.failed": "attempt_failures",
	"turn.generated": "turns", "tool.called": "tool_calls", "context.compacted": "compactions",
	"reward.computed": "rewards", "policy.published": "policy_versions",
}

// everyFactOnce checks that schema holds one row per fact of plan, by type.
func everyFactOnce(t *testing.T, conn *pgx.Conn, schema string, plan *simulate.Plan) {
	t.Helper()
	for typ, n := range plan.ByType() {
		table, ok := factTables[typ]
		if !ok {
			continue
		}
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE run = $1", pgx.Identifier{schema, table}.Sanitize())
		if got := count(t, conn, q, plan.Run); got != int64(n) {
			t.Errorf("%s holds %d rows of run %s, want one per %s fact: %d", table, got, plan.Run, typ, n)
		}
		dq := fmt.Sprintf("SELECT count(*) - count(DISTINCT event_id) FROM %s", pgx.Identifier{schema, table}.Sanitize())
		if d := count(t, conn, dq); d != 0 {
			t.Errorf("%s holds %d rows with an event id stored before", table, d)
		}
	}
}

// positionalColumn matches the columns that place a row's record in the
// log or commit to the log's bytes: other in a log with duplicates.
var positionalColumn = regexp.MustCompile(`(^|_)(partition|offset)$|^fact_seq$|^tree_|^watermark_`)

// sameTables fails the test unless every table the sink writes holds the
// same rows (as multisets) in schemas a and b. With meaningOnly, columns
// that say where records sit in the log, and the tables that only count
// records, are left out: a log holding duplicates is compared with a
// clean one by what its rows say.
func sameTables(t *testing.T, conn *pgx.Conn, a, b string, meaningOnly bool) {
	t.Helper()
	ctx := context.Background()
	for _, table := range pgsink.TableNames() {
		cols := "*"
		switch {
		case table == "consumed_offsets" && meaningOnly, table == "audit_checkpoints" && meaningOnly, table == "skipped_records" && meaningOnly:
			continue
		case table == "consumed_offsets":
			cols = "topic, partition, next_offset, first_offset, first_sha256"
		case meaningOnly:
			rows, err := conn.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position", a, table)
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			cols = ""
			for _, n := range names {
				if positionalColumn.MatchString(n) || (table == "batches" && n == "digest") {
					continue
				}
				if cols != "" {
					cols += ", "
				}
				cols += pgx.Identifier{n}.Sanitize()
			}
		}
		q := func(x, y string) string {
			return fmt.Sprintf("SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) d",
				cols, pgx.Identifier{x, table}.Sanitize(), cols, pgx.Identifier{y, table}.Sanitize())
		}
		onlyA, onlyB := count(t, conn, q(a, b)), count(t, conn, q(b, a))
		na := count(t, conn, "SELECT count(*) FROM "+pgx.Identifier{a, table}.Sanitize())
		nb := count(t, conn, "SELECT count(*) FROM "+pgx.Identifier{b, table}.Sanitize())
		if onlyA != 0 || onlyB != 0 || na != nb {
			t.Errorf("table %s: %d rows in %s, %d in %s; %d only in the first, %d only in the second", table, na, a, nb, b, onlyA, onlyB)
		}
	}
}
