package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// testLedger answers POST /v1/events like the ingest server: it decodes
// strictly, refuses with the contract's error body, dedups by id and
// records each event once, in arrival order. It can fail requests with 503,
// before recording them (nothing appended) or after (appended, but the
// producer does not know).
type testLedger struct {
	t                     testing.TB
	token                 string
	failBefore, failAfter float64

	mu        sync.Mutex
	rng       *rand.Rand
	byID      map[string][]byte // canonical bytes of each recorded event
	log       []events.Event    // first arrivals, in order
	requests  int
	failed    int
	refusals  []string
	conflicts int
}

func newTestLedger(t testing.TB, seed uint64) *testLedger {
	return &testLedger{t: t, rng: rand.New(rand.NewPCG(seed, 0x1ed9e7)), byID: map[string][]byte{}}
}

func (l *testLedger) serve() *httptest.Server {
	srv := httptest.NewServer(l)
	l.t.Cleanup(srv.Close)
	return srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, code, msg string, index int, field string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "index": index, "field": field}})
}

func (l *testLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/events" {
		refuse(w, http.StatusNotFound, "not_found", r.Method+" "+r.URL.Path, 0, "")
		return
	}
	if l.token != "" && r.Header.Get("Authorization") != "Bearer "+l.token {
		refuse(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token", 0, "")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		refuse(w, http.StatusUnsupportedMediaType, "content_type", "want application/json, got "+ct, 0, "")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		refuse(w, http.StatusBadRequest, "malformed", err.Error(), 0, "")
		return
	}
	evs, err := events.DecodeBatch(body)
	if err != nil {
		fe, _ := events.AsFieldError(err)
		l.mu.Lock()
		l.refusals = append(l.refusals, err.Error())
		l.mu.Unlock()
		refuse(w, http.StatusBadRequest, fe.Code(), err.Error(), fe.Index, fe.Field)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	if l.rng.Float64() < l.failBefore {
		l.failed++
		refuse(w, http.StatusServiceUnavailable, "unavailable", "kafka did not acknowledge", 0, "")
		return
	}
	type ack struct {
		ID        string `json:"id"`
		Partition int    `json:"partition"`
		Offset    int    `json:"offset"`
	}
	acks := make([]ack, len(evs))
	for i, ev := range evs {
		rec, err := events.Encode(ev)
		if err != nil {
			l.t.Errorf("re-encoding a decoded event: %v", err)
		}
		if prev, ok := l.byID[ev.ID]; ok {
			if !bytes.Equal(prev, rec) {
				l.conflicts++
			}
		} else {
			l.byID[ev.ID] = rec
			l.log = append(l.log, ev)
		}
		acks[i] = ack{ID: ev.ID, Offset: len(l.log) - 1}
	}
	if l.rng.Float64() < l.failAfter {
		l.failed++
		refuse(w, http.StatusServiceUnavailable, "unavailable", "kafka acknowledged too late", 0, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": acks})
}

// recorded returns the recorded log and a check-free snapshot of counters.
func (l *testLedger) recorded() []events.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Event(nil), l.log...)
}

// blanked is an event's canonical encoding with its id (and run, if
// asked) replaced, for comparing content across generations.
func blanked(t testing.TB, ev events.Event, run bool) string {
	ev.ID = "00000000-0000-7000-8000-000000000000"
	if run {
		ev.Run = "run"
	}
	b, err := events.Encode(ev)
	if err != nil {
		t.Fatalf("encode %s: %v", ev.Type, err)
	}
	return string(b)
}

// byStream groups blanked encodings by source, in order.
func byStream(t testing.TB, evs []events.Event, run bool) map[string][]string {
	out := map[string][]string{}
	for _, ev := range evs {
		out[ev.Source] = append(out[ev.Source], blanked(t, ev, run))
	}
	return out
}

func planStreams(t testing.TB, p *Plan, run bool) map[string][]string {
	out := map[string][]string{}
	for _, s := range p.Streams {
		for _, ev := range s.Events {
			out[s.Producer] = append(out[s.Producer], blanked(t, ev, run))
		}
	}
	return out
}

func diffStreams(a, b map[string][]string) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d streams vs %d", len(a), len(b))
	}
	for name, xs := range a {
		ys := b[name]
		if len(xs) != len(ys) {
			return fmt.Sprintf("stream %s: %d events vs %d", name, len(xs), len(ys))
		}
		for i := range xs {
			if xs[i] != ys[i] {
				return fmt.Sprintf("stream %s event %d:\n  %s\nvs\n  %s", name, i, xs[i], ys[i])
			}
		}
	}
	return ""
}
