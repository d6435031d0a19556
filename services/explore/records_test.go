package explore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/explore"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// The records the projector keeps beside its state answer every view as a
// model folded from the topics does, view for view, for a history that
// arrives out of causal order, token arrays included, which they read back
// from the facts log. Past those arrays they need nothing else: after the
// projector's process is gone, its database alone answers every view but
// an attempt's with tokens, through a service whose Kafka cannot be
// reached, and that one says which log it could not read.
func TestRecordsAnswerWithoutKafka(t *testing.T) {
	const run = "run-records"
	plan, err := simulate.Generate(simulate.Options{Seed: 31, Tasks: 10, Steps: 3, BatchGroups: 3, GroupSize: 4,
		MinTurns: 2, MaxTurns: 12, MaxStaleness: 1, Tokens: true, Text: true}, run)
	if err != nil {
		t.Fatal(err)
	}
	evs := orders(plan, 1)["interleaving-0"]
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	recs := make([]kafkalog.Record, 0, len(evs)+1)
	for i, ev := range evs {
		b, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafkalog.Record{Key: []byte(run), Value: b})
		if i == 10 {
			// A redelivery: numbered and counted, and shown once.
			recs = append(recs, kafkalog.Record{Key: []byte(run), Value: b})
		}
	}
	appendFacts(t, kc, recs)
	dir := filepath.Join(t.TempDir(), "projector")
	foldAll(t, kc, dir, run)
	m := modelFromKafka(t, kc, run)

	dead := kc
	dead.Brokers = []string{"127.0.0.1:1"}
	p, err := projector.Open(projector.Options{Kafka: dead, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	serve := func(kc kafkalog.Config) *http.ServeMux {
		s := &explore.Service{Kafka: kc, Runs: p, Records: p.ExplorerRecords, Now: func() time.Time { return now }}
		mux := http.NewServeMux()
		s.Register(mux)
		return mux
	}
	live, cut := serve(kc), serve(dead)
	call := func(mux *http.ServeMux, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	// get answers path through the service without Kafka, and attempts'
	// views (which read token arrays back) through the one with it.
	get := func(path string) any {
		t.Helper()
		mux := cut
		if strings.Contains(path, "/explore/attempts/") {
			mux = live
		}
		rec := call(mux, path)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		var v any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// norm is v as its JSON decodes.
	norm := func(v any) (any, []byte) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var w any
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		return w, b
	}
	same := func(path string, want any) {
		t.Helper()
		w, b := norm(want)
		if got := get(path); !reflect.DeepEqual(got, w) {
			gb, _ := json.Marshal(got)
			t.Errorf("GET %s differs from the model's view:\n got  %.600s\n want %.600s", path, gb, b)
		}
	}
	base := "/v1/runs/" + run + "/explore"
	rv := m.RunView(now)
	if rv.Facts != uint64(len(recs)) || len(rv.Steps) == 0 {
		t.Fatalf("the model holds %d facts and %d steps; want %d facts and a step", rv.Facts, len(rv.Steps), len(recs))
	}
	same("/v1/explore/runs", map[string]any{"runs": []explore.RunSummary{m.Summary(now)}})
	same(base, rv)
	for seq := range uint64(len(rv.Steps)) {
		v, _ := m.StepView(seq + 1)
		same(base+"/steps/"+strconv.FormatUint(seq+1, 10), v)
	}
	var steps []any
	for cursor, pages := "", 0; ; pages++ {
		page := get(base + "/steps?limit=2&cursor=" + cursor).(map[string]any)
		steps = append(steps, page["steps"].([]any)...)
		if cursor, _ = page["next"].(string); cursor == "" {
			break
		}
		if pages > len(rv.Steps) {
			t.Fatal("the steps list pages without end")
		}
	}
	if want, _ := norm(rv.Steps); !reflect.DeepEqual(steps, want) {
		t.Errorf("the steps list in pages of 2 (%d steps) is not the run view's (%d)", len(steps), len(rv.Steps))
	}
	attempts := m.Attempts()
	var paged []explore.AttemptRow
	for cursor, pages := "", 0; ; pages++ {
		var page explore.AttemptPage
		b, _ := json.Marshal(get(base + "/attempts?limit=7&cursor=" + cursor))
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		if page.Total != uint64(len(attempts)) {
			t.Fatalf("page total %d, want %d", page.Total, len(attempts))
		}
		paged = append(paged, page.Attempts...)
		if cursor = page.Next; cursor == "" {
			break
		}
		if pages > len(attempts) {
			t.Fatal("the attempts list pages without end")
		}
	}
	if !reflect.DeepEqual(paged, attempts) {
		t.Errorf("the attempts list in pages of 7 (%d rows) is not the model's (%d rows)", len(paged), len(attempts))
	}
	groups := map[string]bool{}
	tokens := 0
	for i, a := range attempts {
		if i%3 == 0 {
			v, _ := m.AttemptView(a.Attempt)
			same(base+"/attempts/"+a.Attempt, v)
			withTokens := false
			for _, tv := range v.TurnList {
				withTokens = withTokens || len(tv.TokenIDs) > 0
			}
			if withTokens {
				tokens++
				rec := call(cut, base+"/attempts/"+a.Attempt)
				if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "facts_log_unavailable") ||
					!strings.Contains(rec.Body.String(), "kept in the facts log") {
					t.Errorf("attempt %s with tokens, Kafka cut: %d %.300s; want 503 naming the facts log", a.Attempt, rec.Code, rec.Body)
				}
			}
		}
		if !groups[a.Group] {
			groups[a.Group] = true
			g, _ := m.GroupView(a.Group)
			same(base+"/groups/"+a.Group, g)
			sv, _ := m.SideView(a.Group)
			same(base+"/side-by-side/"+a.Group, sv)
		}
	}
	if tokens == 0 {
		t.Error("no attempt viewed has token arrays: the run does not test reading them back")
	}
	tasks := m.Tasks()
	same(base+"/tasks", explore.TaskPage{Tasks: tasks, Total: uint64(len(tasks))})
	for _, tk := range tasks {
		v, _ := m.TaskView(tk.Task)
		same(base+"/tasks/"+tk.Task, v)
	}
	for _, q := range []string{"the", "apply_patch", "zz-not-there"} {
		v, err := m.Search(q, "", 20)
		if err != nil {
			t.Fatal(err)
		}
		same(fmt.Sprintf("%s/search?q=%s&limit=20", base, q), v)
		if v.Next != "" {
			next, _ := m.Search(q, v.Next, 20)
			same(fmt.Sprintf("%s/search?q=%s&limit=20&cursor=%s", base, q, v.Next), next)
		}
	}
}

func appendFacts(t *testing.T, kc kafkalog.Config, recs []kafkalog.Record) {
	t.Helper()
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	if _, err := w.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

// foldAll runs a projector over dir until it has folded the run's
// partition to its end, and stops it.
func foldAll(t *testing.T, kc kafkalog.Config, dir, run string) {
	t.Helper()
	ctx := context.Background()
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	part := kafkalog.PartitionOf([]byte(run), len(ends))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	testenv.CheckFor(t, 90*time.Second, "the projector folds the run", func() bool {
		next, err := p.Offset(part)
		return err == nil && next >= ends[part]
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// modelFromKafka is the model of the run's history read from the topics,
// as the service reads a run it has no records of.
func modelFromKafka(t *testing.T, kc kafkalog.Config, run string) *explore.Model {
	t.Helper()
	ctx := context.Background()
	m := explore.NewModel(run)
	for _, topic := range []string{kc.FactsTopic(), kc.DecisionsTopic()} {
		ends, err := kafkalog.EndOffsets(ctx, kc, topic)
		if err != nil {
			t.Fatal(err)
		}
		part := kafkalog.PartitionOf([]byte(run), len(ends))
		err = kafkalog.ReadPartition(ctx, kc, topic, part, 0, ends[part], func(msg kafkalog.Message) error {
			if topic == kc.DecisionsTopic() {
				return m.Decision(msg.Value)
			}
			ev, err := events.Decode(msg.Value)
			if err != nil || ev.Run != run {
				return err
			}
			m.Fact(int32(msg.Partition), msg.Offset, msg.Value, ev)
			m.Arrived(msg.Time)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// A run the projector folded before it kept the explorer's records (its
// state from an older build) has records that begin mid-run: they are
// marked partial, and its views come from the topics, whole, not from
// the records.
func TestPartialRecordsReadFromKafka(t *testing.T) {
	const run = "run-partial"
	plan, err := simulate.Generate(simulate.Options{Seed: 32, Tasks: 6, Steps: 2, BatchGroups: 2, GroupSize: 4,
		MinTurns: 2, MaxTurns: 6, MaxStaleness: 1, Text: true}, run)
	if err != nil {
		t.Fatal(err)
	}
	evs := plan.All()
	kc := testenv.RealKafka(t)
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	var recs []kafkalog.Record
	for _, ev := range evs {
		b, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafkalog.Record{Key: []byte(run), Value: b})
	}
	half := len(recs) / 2
	dir := filepath.Join(t.TempDir(), "projector")
	appendFacts(t, kc, recs[:half])
	foldAll(t, kc, dir, run)
	// The state as an older build left it: no explorer records.
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteRange([]byte{'x'}, []byte{'y'}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	appendFacts(t, kc, recs[half:])
	foldAll(t, kc, dir, run)

	p, err := projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r, release, err := p.ExplorerRecords(run)
	if err != nil {
		t.Fatal(err)
	}
	snap, ok, err := explore.OpenSnapshot(run, r)
	if err != nil || !ok || !snap.Partial() || snap.Facts() != uint64(len(recs)-half) {
		t.Fatalf("records of a run begun before them: ok %v, partial %v, %d facts, err %v; want partial, with the %d facts folded since",
			ok, snap != nil && snap.Partial(), snap.Facts(), err, len(recs)-half)
	}
	release()
	m := modelFromKafka(t, kc, run)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &explore.Service{Kafka: kc, Runs: p, Records: p.ExplorerRecords, Now: func() time.Time { return now }}
	mux := http.NewServeMux()
	s.Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/runs/"+run+"/explore", nil))
	var got explore.RunView
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("run view: %d %s", rec.Code, rec.Body)
	}
	want := m.RunView(now)
	if got.Facts != uint64(len(recs)) || !reflect.DeepEqual(got.Steps, want.Steps) || got.Funnel != want.Funnel {
		t.Errorf("run view of a partial run: %d facts, %d steps, funnel %+v; want the whole run's %d facts, %d steps, funnel %+v",
			got.Facts, len(got.Steps), got.Funnel, len(recs), len(want.Steps), want.Funnel)
	}
}

// quietPebble keeps Pebble's recovery notes out of the test's output.
type quietPebble struct{ t *testing.T }

func (quietPebble) Infof(string, ...any)                {}
func (q quietPebble) Errorf(format string, args ...any) { q.t.Errorf(format, args...) }
func (q quietPebble) Fatalf(format string, args ...any) { q.t.Fatalf(format, args...) }
