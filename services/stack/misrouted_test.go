package stack_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/report"
	"github.com/rolloutledger/rolloutledger/services/api"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// toPartition sends every message to one partition: a producer whose
// partitioner is not the ledger's.
type toPartition int

func (p toPartition) Balance(_ kafka.Message, _ ...int) int { return int(p) }

// Facts of a run written to partitions the run does not map to are
// misrouted findings (docs/design.md §11.2). A user sees the same count
// wherever a finding is shown: the run's status, replay --verify, the
// audit's text and HTML, and the read model's audit_findings; a finding
// recorded twice on the decisions topic counts once.
func TestMisroutedFindingsVisible(t *testing.T) {
	kc := testenv.RealKafka(t)
	dbURL := testenv.Postgres(t)
	schema := testenv.Schema(t, dbURL)
	s, err := stack.Start(context.Background(), stack.Options{
		Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: dbURL, PostgresSchema: schema,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const run = "misrouted-visible"
	const folded = 6
	if code, b := post(t, s.URL(), body(t, runEvents(run, folded)), nil); code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, b)
	}
	ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	n := len(ends)
	if n < 2 {
		t.Fatalf("the facts topic has %d partitions; the test needs two", n)
	}
	// Two turns of the run, each written to a partition it does not map to.
	const misrouted = 2
	wrong := (kafkalog.PartitionOf([]byte(run), n) + 1) % n
	w := &kafka.Writer{Addr: kafka.TCP(kc.Brokers...), Topic: kc.FactsTopic(), Balancer: toPartition(wrong), RequiredAcks: kafka.RequireAll}
	for _, ev := range runEvents(run, misrouted+1)[1:] {
		ev.ID = events.NewID()
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(run), Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()

	status := func() api.Status {
		var st api.Status
		code, b := get(t, s.URL()+"/v1/runs/"+run+"/status")
		if code != http.StatusOK {
			t.Fatalf("status: %d %s", code, b)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	testenv.CheckFor(t, 2*time.Minute, "the projector folds the run and reports the misrouted facts", func() bool {
		st := status()
		return st.FactsFolded == folded && st.Findings > misrouted
	})

	// verify and audit read what the projector recorded on the decisions
	// topic: wait until both findings are there.
	verify := func() *replay.Report {
		src, err := replay.OpenKafka(ctx, kc, run)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := replay.Verify(ctx, src, replay.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	testenv.CheckFor(t, time.Minute, "replay counts the recorded misrouted findings", func() bool {
		return verify().Misrouted == misrouted
	})

	// The projector records again after a crash; the same finding twice
	// on the decisions topic is still one finding.
	var again []byte
	for _, r := range decisionsOf(t, kc, run) {
		var env projections.Envelope
		if json.Unmarshal(r, &env) == nil && projections.IsMisrouted(env) {
			again = r
			break
		}
	}
	if again == nil {
		t.Fatal("no misrouted finding on the decisions topic")
	}
	dw := &kafka.Writer{Addr: kafka.TCP(kc.Brokers...), Topic: kc.DecisionsTopic(), Balancer: &kafka.Murmur2Balancer{Consistent: true}, RequiredAcks: kafka.RequireAll}
	if err := dw.WriteMessages(ctx, kafka.Message{Key: []byte(run), Value: again}); err != nil {
		t.Fatal(err)
	}
	dw.Close()

	rep := verify()
	if rep.Misrouted != misrouted || !rep.OK() {
		t.Errorf("replay --verify: got misrouted %d, ok %v (%+v), want %d and ok", rep.Misrouted, rep.OK(), rep.First, misrouted)
	}

	src, err := replay.OpenKafka(ctx, kc, run)
	if err != nil {
		t.Fatal(err)
	}
	a, v, err := replay.Audit(ctx, src, replay.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The run's turns carry tokens before its attempt started: one
	// numbered finding beside the misrouted ones.
	if got := a.FindingsByKind.Get(projections.FindingMisrouted); got != misrouted || len(a.Findings) != misrouted+1 {
		t.Errorf("audit: got %d misrouted of %d findings, want %d of %d", got, len(a.Findings), misrouted, misrouted+1)
	}
	if st := status(); st.Findings != uint64(len(a.Findings)) {
		t.Errorf("status findings: got %d, the audit lists %d", st.Findings, len(a.Findings))
	}

	// The explorer: the audit's findings, the misrouted ones unnumbered
	// (no fold numbers them) and the fold's numbered as the audit numbers
	// them, whatever order the decisions topic holds them in.
	type shown struct {
		Seq  uint64                   `json:"seq"`
		Kind string                   `json:"kind"`
		Fact projections.FactPosition `json:"fact"`
	}
	var view struct {
		Findings    int     `json:"findings"`
		FindingList []shown `json:"finding_list"`
	}
	testenv.CheckFor(t, time.Minute, "the explorer shows every finding", func() bool {
		code, b := get(t, s.URL()+"/v1/runs/"+run+"/explore")
		if code != http.StatusOK {
			t.Fatalf("explorer: %d %s", code, b)
		}
		if err := json.Unmarshal(b, &view); err != nil {
			t.Fatal(err)
		}
		return view.Findings >= len(a.Findings)
	})
	var want []shown
	for _, f := range a.Findings {
		want = append(want, shown{Seq: f.Seq, Kind: f.Finding.Kind, Fact: f.Fact})
	}
	order := func(x, y shown) int {
		return cmp.Or(cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.Fact.Partition, y.Fact.Partition), cmp.Compare(x.Fact.Offset, y.Fact.Offset))
	}
	slices.SortFunc(want, order)
	slices.SortFunc(view.FindingList, order)
	if view.Findings != len(a.Findings) || !slices.Equal(view.FindingList, want) {
		t.Errorf("the explorer shows %d findings %+v, the audit %+v", view.Findings, view.FindingList, want)
	}
	var text, html bytes.Buffer
	if err := report.WriteText(&text, report.Data{Audit: a, Verify: v}); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteHTML(&html, report.Data{Audit: a, Verify: v}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(text.String(), "  misrouted "); got != misrouted {
		t.Errorf("audit text lists %d misrouted findings, want %d:\n%s", got, misrouted, text.String())
	}
	if !strings.Contains(text.String(), "findings     3: misrouted 2, unstarted_tokens 1") {
		t.Errorf("audit text does not count the findings:\n%s", text.String())
	}
	if got := strings.Count(html.String(), "<td>misrouted</td>"); got != misrouted {
		t.Errorf("audit HTML lists %d misrouted findings, want %d", got, misrouted)
	}

	// The read model, once it has stored everything recorded.
	pgEnds, err := pgsink.EndOffsets(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sink().WaitStored(ctx, pgEnds); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pg int
	q := "SELECT count(*) FROM " + pgx.Identifier{schema, "audit_findings"}.Sanitize() + " WHERE run = $1 AND kind = 'misrouted'"
	if err := conn.QueryRow(ctx, q, run).Scan(&pg); err != nil {
		t.Fatal(err)
	}
	if pg != misrouted {
		t.Errorf("audit_findings: got %d misrouted rows, want %d", pg, misrouted)
	}
}

// decisionsOf reads the decisions topic's records of run, to its end.
func decisionsOf(t *testing.T, kc kafkalog.Config, run string) [][]byte {
	t.Helper()
	src, err := replay.OpenKafka(context.Background(), kc, run)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	err = src.Decisions(context.Background(), func(r replay.Recorded) error {
		out = append(out, bytes.Clone(r.Value))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
