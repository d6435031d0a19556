package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// TestAttemptLookup: GET /v1/runs/{run}/attempts/{attempt} reads after
// every fact the log held when asked (real Kafka): an attempt.started
// acknowledged before the question is found even behind a backlog; an
// attempt no fact names is a 404 only once the projector has folded that
// far, and a 503 projector_behind before; an attempt known only from a
// reward is found, not started.
func TestAttemptLookup(t *testing.T) {
	kc := testenv.RealKafka(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	t.Cleanup(func() { _ = w.Close() })
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	mux := auth.NewRouter(nil, nil)
	(&ingest.Service{Appender: w}).Register(mux)
	(&Service{Projector: p}).Register(mux)
	srv := httptest.NewServer(httpx.Canonical(mux))
	t.Cleanup(srv.Close)
	projDone := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-projDone
		p.Close()
	})

	const run = "lookup-run"
	post := func(facts ...events.Fact) {
		t.Helper()
		ledgertest.Post(t, srv.URL, "", run, "scheduler", facts...)
	}
	ask := func(attempt, wait string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/runs/" + run + "/attempts/" + attempt + "?wait=" + wait)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}

	// A backlog, then the attempts, all acknowledged before the
	// projector starts.
	var backlog []events.Fact
	for i := range 2000 {
		backlog = append(backlog, &events.TaskRegistered{Task: fmt.Sprintf("t-%d", i), Source: "test", Kind: "agentic", Tier: 1, Gates: []events.Gate{}})
	}
	post(backlog...)
	post(&events.GroupStarted{Group: "g-1", Task: "t-1", Size: 2, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "a/1", Group: "g-1", Task: "t-1", Engine: "llama", VM: "vm-1"},
		&events.RewardComputed{Attempt: "a-2", Passed: true, TestsPassed: 1, TestsTotal: 1, Verifier: "v"})

	// Nothing folded yet: not an answer, a 503 saying so.
	if code, v := ask("a-missing", "0s"); code != http.StatusServiceUnavailable || errorCode(v) != "projector_behind" {
		t.Fatalf("before the projector folds: %d %v, want 503 projector_behind", code, v)
	}
	go func() {
		defer close(projDone)
		_ = p.Run(ctx)
	}()
	code, v := ask("a/1", "5m")
	if code != http.StatusOK || v["started"] != true || v["group"] != "g-1" || v["task"] != "t-1" || v["attempt"] != "a/1" {
		t.Fatalf("a started attempt behind a backlog of 2,000 facts: %d %v, want 200, started, g-1, t-1", code, v)
	}
	if code, v := ask("a-2", "5m"); code != http.StatusOK || v["started"] != false || v["rewarded"] != true {
		t.Errorf("an attempt known from its reward only: %d %v, want 200, not started, rewarded", code, v)
	}
	if code, v := ask("a-missing", "5m"); code != http.StatusNotFound || errorCode(v) != "not_found" || !strings.Contains(errorMessage(v), "a-missing") {
		t.Errorf("an attempt no fact names: %d %v, want 404 not_found naming it", code, v)
	}
	// Written after the projector caught up: still read after.
	post(&events.AttemptStarted{Attempt: "a-3", Group: "g-1", Task: "t-1", Engine: "llama", VM: "vm-2"})
	if code, v := ask("a-3", "5m"); code != http.StatusOK || v["started"] != true {
		t.Errorf("an attempt started just before the question: %d %v, want 200, started", code, v)
	}
	for _, tc := range []struct{ attempt, wait, code string }{
		{"a%00b", "1s", "invalid_value"},
		{"a-3", "forever", "invalid_value"},
		{"a-3", "6m", "invalid_value"},
	} {
		if code, v := ask(tc.attempt, tc.wait); code != http.StatusBadRequest || errorCode(v) != tc.code {
			t.Errorf("attempt %q wait %q: %d %v, want 400 %s", tc.attempt, tc.wait, code, v, tc.code)
		}
	}
}

func errorCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func errorMessage(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// With Kafka unreachable the lookup cannot know the log's end: a 503
// kafka_unreachable with Retry-After, naming no broker (and a service
// without a logger does not fail on it).
func TestAttemptLookupKafkaUnreachable(t *testing.T) {
	h := offlineService(t)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/runs/r/attempts/a-1?wait=0s", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"code":"kafka_unreachable"`) ||
		w.Header().Get("Retry-After") == "" || strings.Contains(w.Body.String(), "127.0.0.1") {
		t.Errorf("got %d %s (Retry-After %q), want 503 kafka_unreachable with Retry-After and no broker address", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}
