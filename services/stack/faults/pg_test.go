package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
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
