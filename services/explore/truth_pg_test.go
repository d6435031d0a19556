package explore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/explore"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// TestExplorerAgreesWithPostgres: a run whose rewards all reach the log
// before their attempts, served by the ledger — the explorer's attempt
// figures (verdict, tests, batch, score, reward, advantage) and each
// task's solved count equal the Postgres read model's.
func TestExplorerAgreesWithPostgres(t *testing.T) {
	const run = "run-truth-pg"
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	plan, err := simulate.Generate(simulate.Options{Seed: 25, Tasks: 12, Steps: 4, BatchGroups: 3, GroupSize: 4,
		MinTurns: 2, MaxTurns: 10, MaxStaleness: 1}, run)
	if err != nil {
		t.Fatal(err)
	}
	evs := orders(plan, 0)["rewards-first"]
	recs := make([]kafkalog.Record, len(evs))
	folded := make([]projections.Record, len(evs))
	for i, ev := range evs {
		b, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = kafkalog.Record{Key: []byte(run), Value: b}
		dec, _ := events.Decode(b)
		folded[i] = projections.Record{Value: b, Event: dec, Offset: int64(i)}
	}
	ds, err := projections.FoldAll(run, folded)
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for _, d := range ds {
		if d.Kind == projections.KindBatchSealed {
			batches++
		}
	}
	if batches == 0 {
		t.Fatal("the run seals no batch")
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	for i := 0; i < len(recs); i += 1000 {
		if _, err := w.Append(ctx, recs[i:min(i+1000, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()

	var logs testenv.LogBuffer
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: schema,
		Only:   []string{stack.ServiceProjector, stack.ServicePgsink, stack.ServiceAPI},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("stack log:\n%s", logs.String())
		}
	})
	api := s.URL() + "/v1/runs/" + run + "/explore"
	testenv.CheckFor(t, 2*time.Minute, fmt.Sprintf("the explorer to show the %d batches", batches), func() bool {
		resp, err := http.Get(api)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v explore.RunView
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&v) == nil && v.Batches == batches
	})
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ends, err := pgsink.EndOffsets(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 2*time.Minute, "the read model to store everything", func() bool {
		n, err := pgsink.Behind(ctx, conn, schema, ends)
		return err == nil && n == 0
	})

	var attempts struct {
		Attempts []explore.AttemptRow `json:"attempts"`
	}
	resp, err := http.Get(api + "/attempts")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&attempts)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The read model's figures of each attempt: its first reward, and its
	// batch's judgement.
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT a.attempt, a.task, r.passed, r.tests_passed, r.tests_total, b.batch, b.score, b.reward, b.advantage
		FROM (SELECT DISTINCT ON (attempt) attempt, task FROM %[1]s WHERE run = $1 ORDER BY attempt, log_partition, log_offset) a
		LEFT JOIN (SELECT DISTINCT ON (attempt) attempt, passed, tests_passed, tests_total FROM %[2]s WHERE run = $1 ORDER BY attempt, log_partition, log_offset) r USING (attempt)
		LEFT JOIN %[3]s b ON b.run = $1 AND b.attempt = a.attempt`,
		pgx.Identifier{schema, "attempts"}.Sanitize(), pgx.Identifier{schema, "rewards"}.Sanitize(), pgx.Identifier{schema, "batch_attempts"}.Sanitize()), run)
	if err != nil {
		t.Fatal(err)
	}
	type pgRow struct {
		task                     string
		passed                   *bool
		testsPassed, testsTotal  *int64
		batch                    *int64
		score, reward, advantage *float64
	}
	pg := map[string]pgRow{}
	for rows.Next() {
		var id string
		var r pgRow
		if err := rows.Scan(&id, &r.task, &r.passed, &r.testsPassed, &r.testsTotal, &r.batch, &r.score, &r.reward, &r.advantage); err != nil {
			t.Fatal(err)
		}
		pg[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(pg) != len(attempts.Attempts) || len(pg) == 0 {
		t.Fatalf("the read model holds %d attempts, the explorer %d", len(pg), len(attempts.Attempts))
	}
	solved := map[string]int{}
	bad := 0
	for _, a := range attempts.Attempts {
		r := pg[a.Attempt]
		if r.passed != nil && *r.passed {
			solved[r.task]++
		}
		var batch uint64
		if r.batch != nil {
			batch = uint64(*r.batch)
		}
		got := fmt.Sprint(deref(a.Passed), deref(a.TestsPassed), deref(a.TestsTotal), a.Batch, deref(a.Score), deref(a.Reward), deref(a.Advantage))
		want := fmt.Sprint(deref(r.passed), deref(r.testsPassed), deref(r.testsTotal), batch, deref(r.score), deref(r.reward), deref(r.advantage))
		if got != want {
			if bad++; bad <= 10 {
				t.Errorf("attempt %s: the explorer shows %s, Postgres %s (passed, tests passed, total, batch, score, reward, advantage)", a.Attempt, got, want)
			}
		}
	}
	var tasks struct {
		Tasks []explore.TaskRow `json:"tasks"`
	}
	resp, err = http.Get(api + "/tasks")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&tasks)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range tasks.Tasks {
		if tr.Solved != solved[tr.Task] {
			t.Errorf("task %s: the explorer shows solved %d, Postgres %d", tr.Task, tr.Solved, solved[tr.Task])
		}
	}
}
