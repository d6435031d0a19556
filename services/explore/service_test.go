package explore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// runList is the projector's run list as the service reads it.
type runList []string

func (l runList) RunIDs() ([]string, error) { return l, nil }

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// exploreKafka is a real broker's topics holding a few facts of each run.
func exploreKafka(t *testing.T, runs ...string) kafkalog.Config {
	t.Helper()
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []kafkalog.Record
	for _, run := range runs {
		for i, f := range []events.Fact{&events.RunStarted{Model: "m", Harness: "h"},
			&events.TaskRegistered{Task: "t", Source: "s", Kind: "swe", Tier: 1, Gates: []events.Gate{}}} {
			b, err := events.Encode(events.New(run, "test", at.Add(time.Duration(i)*time.Second), f))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, kafkalog.Record{Key: []byte(run), Value: b})
		}
	}
	if _, err := w.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	return kc
}

func status(t *testing.T, h http.Handler, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// A view of a run id the ledger never saw is a 404 that reads nothing
// from Kafka and keeps nothing, however many such ids are asked for.
func TestUnknownRunsCostNothing(t *testing.T) {
	kc := exploreKafka(t, "run-known")
	s := &Service{Kafka: kc, Runs: runList{"run-known"}}
	mux := http.NewServeMux()
	s.Register(mux)
	if got := status(t, mux, "/v1/runs/run-known/explore"); got != http.StatusOK {
		t.Fatalf("the known run: got %d, want 200", got)
	}
	reads := s.kafkaReads.Load()
	start := time.Now()
	for i := range 500 {
		for _, route := range []string{"", "/attempts", "/tasks/t", "/steps/1", "/groups/g"} {
			path := fmt.Sprintf("/v1/runs/never-seen-%d/explore%s", i, route)
			if got := status(t, mux, path); got != http.StatusNotFound {
				t.Fatalf("%s: got %d, want 404", path, got)
			}
		}
	}
	t.Logf("2,500 views of unknown runs answered in %s", time.Since(start).Round(time.Millisecond))
	if got := s.kafkaReads.Load() - reads; got != 0 {
		t.Errorf("unknown runs read Kafka %d times, want 0", got)
	}
	if got := s.followers(); got != 1 {
		t.Errorf("%d runs' models kept, want 1 (the known run's)", got)
	}
}

// A run whose facts are arriving is live, whatever clock its producers
// put in `at` (these facts say 2026-01-01).
func TestLiveByArrival(t *testing.T) {
	kc := exploreKafka(t, "run-arriving")
	s := &Service{Kafka: kc, Runs: runList{"run-arriving"}}
	mux := http.NewServeMux()
	s.Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/explore/runs", nil))
	var got struct {
		Runs []RunSummary `json:"runs"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got.Runs) != 1 {
		t.Fatalf("runs list: %v %s", err, rec.Body)
	}
	if r := got.Runs[0]; r.Status != "live" || time.Since(r.LastArrival) > time.Minute {
		t.Errorf("a run whose facts just arrived: status %q, last arrival %s; want live, now", r.Status, r.LastArrival)
	}
}

// The models kept are bounded: past MaxFollowers the least recently read
// goes, and a model not read for FollowerIdle goes.
func TestFollowersBounded(t *testing.T) {
	runs := runList{"run-1", "run-2", "run-3", "run-4"}
	kc := exploreKafka(t, runs...)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &Service{Kafka: kc, Runs: runs, Now: clk.now, MaxFollowers: 2, FollowerIdle: time.Minute}
	mux := http.NewServeMux()
	s.Register(mux)
	kept := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []string
		for r := range s.runs {
			out = append(out, r)
		}
		slices.Sort(out)
		return out
	}
	for _, step := range []struct {
		read    string
		advance time.Duration
		want    []string
	}{
		{"run-1", 0, []string{"run-1"}},
		{"run-2", 10 * time.Second, []string{"run-1", "run-2"}},
		{"run-1", 10 * time.Second, []string{"run-1", "run-2"}},
		{"run-3", 10 * time.Second, []string{"run-1", "run-3"}}, // run-2 least recently read
		{"run-4", 55 * time.Second, []string{"run-3", "run-4"}}, // run-1 idle for 65 s
		{"run-4", 2 * time.Minute, []string{"run-4"}},           // run-3 idle
	} {
		clk.add(step.advance)
		if got := status(t, mux, "/v1/runs/"+step.read+"/explore"); got != http.StatusOK {
			t.Fatalf("read %s: got %d, want 200", step.read, got)
		}
		if got := kept(); !slices.Equal(got, step.want) {
			t.Errorf("after reading %s: kept %v, want %v", step.read, got, step.want)
		}
	}
	// With no requests, the sweep drops what went idle.
	clk.add(2 * time.Minute)
	s.sweepIdle()
	if got := s.followers(); got != 0 {
		t.Errorf("after the idle sweep: %d kept, want 0", got)
	}
}
