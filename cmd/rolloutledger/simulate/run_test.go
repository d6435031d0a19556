package simulate

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// small is a run that is quick to push but has every kind of fact.
var small = Options{Seed: 11, Tasks: 16, Steps: 2, MaxTurns: 60, InfraFailureRate: 0.1}

func TestPushOrderAndDedup(t *testing.T) {
	plan := mustGenerate(t, small, "push-test")
	led := newTestLedger(t, 1)
	led.failBefore, led.failAfter = 0.05, 0.05
	srv := led.serve()

	o := Options{URL: srv.URL, Workers: 8, EventsPerRequest: 16}
	res, err := Push(context.Background(), o, plan)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	if res.Events != plan.Len() || res.Run != plan.Run {
		t.Errorf("Result: %d events of run %s, want %d of %s", res.Events, res.Run, plan.Len(), plan.Run)
	}
	led.mu.Lock()
	requests, failed, refusals, conflicts := led.requests, led.failed, led.refusals, led.conflicts
	led.mu.Unlock()
	if res.Retries == 0 || res.Retries != failed {
		t.Errorf("Result: %d retries, the ledger failed %d requests", res.Retries, failed)
	}
	if res.Requests+res.Retries != requests {
		t.Errorf("Result: %d requests + %d retries, the ledger answered %d", res.Requests, res.Retries, requests)
	}
	if len(refusals) > 0 || conflicts > 0 {
		t.Fatalf("refusals %v, conflicts %d", refusals, conflicts)
	}

	log := led.recorded()
	if len(log) != plan.Len() {
		t.Fatalf("ledger holds %d distinct events, plan has %d", len(log), plan.Len())
	}
	pos := make(map[string]int, len(log))
	for i, ev := range log {
		pos[ev.ID] = i
	}
	if log[0].Type != events.TypeRunStarted {
		t.Errorf("first event in the ledger: %s, want run.started", log[0].Type)
	}
	for _, s := range plan.Streams {
		last := -1
		for i, ev := range s.Events {
			p, ok := pos[ev.ID]
			if !ok {
				t.Fatalf("stream %s event %d (%s %s) never recorded", s.Producer, i, ev.Type, ev.ID)
			}
			if p <= last {
				t.Fatalf("stream %s event %d (%s) recorded at %d, before its predecessor at %d", s.Producer, i, ev.Type, p, last)
			}
			last = p
		}
	}
	// The log follows virtual time roughly: no event lands more than a
	// couple of windows away from its place in Plan.All.
	window := windowSize(o.withDefaults(), plan)
	for i, ev := range plan.All() {
		if d := pos[ev.ID] - i; d > 2*window || d < -2*window {
			t.Fatalf("event %d of All (%s from %s) recorded at %d", i, ev.Type, ev.Source, pos[ev.ID])
		}
	}
}

func TestRunDeterministic(t *testing.T) {
	var logs [2][]events.Event
	var runs [2]string
	for i := range logs {
		led := newTestLedger(t, uint64(i))
		led.failBefore = 0.1
		o := small
		o.URL, o.Workers = led.serve().URL, 8
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatalf("Run %d: %v", i, err)
		}
		if !strings.HasPrefix(res.Run, "sim-11-") || len(res.Run) != len("sim-11-")+8 {
			t.Errorf("defaulted run id %q, want sim-11-<8 hex>", res.Run)
		}
		if res.ByType[events.TypeTurnGenerated] == 0 || res.Events != led.recordedLen() {
			t.Errorf("Result %+v, ledger holds %d", res, led.recordedLen())
		}
		logs[i], runs[i] = led.recorded(), res.Run
	}
	if runs[0] == runs[1] {
		t.Errorf("two runs of one seed share the id %s", runs[0])
	}
	if d := diffStreams(byStream(t, logs[0], true), byStream(t, logs[1], true)); d != "" {
		t.Fatalf("two runs of one seed differ: %s", d)
	}
}

func (l *testLedger) recordedLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.log)
}

func TestRunRefused(t *testing.T) {
	led := newTestLedger(t, 1)
	led.token = "s3cret"
	url := led.serve().URL
	o := Options{Seed: 1, Tasks: 2, Steps: 1, URL: url}
	_, err := Run(context.Background(), o)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Run without the token: %v, want ErrRefused with 401", err)
	}
	o.Token = "s3cret"
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("Run with the token: %v", err)
	}

	// A 400 names the event and field.
	o.Client = &http.Client{Transport: roundTrip(func(r *http.Request) *http.Response {
		return response(http.StatusBadRequest, `{"error":{"code":"invalid_value","message":"event 0 field data.task: nope","index":0,"field":"data.task"}}`)
	})}
	_, err = Run(context.Background(), o)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "run.started") || !strings.Contains(err.Error(), "data.task: nope") {
		t.Fatalf("Run against a refusing ledger: %v", err)
	}
}

// TestRunGivesUp runs in a synctest bubble: a minute of 503s takes no time.
func TestRunGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		o := Options{Seed: 1, Tasks: 2, Steps: 1, URL: "http://ledger.invalid",
			Client: &http.Client{Transport: roundTrip(func(r *http.Request) *http.Response {
				tries++
				return response(http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"kafka is down"}}`)
			})}}
		start := time.Now()
		res, err := Run(context.Background(), o)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "kafka is down") {
			t.Fatalf("Run: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d < giveUpAfter-backoffCap || d > giveUpAfter+backoffCap {
			t.Errorf("gave up after %s, want about %s", d, giveUpAfter)
		}
		if res.Events != 0 || res.Retries != tries-1 || tries < 30 {
			t.Errorf("Result %+v after %d tries", res, tries)
		}
	})
}

func TestRunCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		o := Options{Seed: 1, Tasks: 2, Steps: 1, URL: "http://ledger.invalid",
			Client: &http.Client{Transport: roundTrip(func(r *http.Request) *http.Response {
				cancel()
				return response(http.StatusServiceUnavailable, `{}`)
			})}}
		if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
	})
}

type roundTrip func(*http.Request) *http.Response

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	resp := f(r)
	resp.Request = r
	return resp, nil
}

func response(status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
	}
}

func TestWindows(t *testing.T) {
	plan := mustGenerate(t, small, "w")
	wins := windows(plan, 100, false)
	if len(wins[0]) != 1 || len(wins[0][0].events) != 1 || wins[0][0].events[0].Type != events.TypeRunStarted {
		t.Fatalf("first window: %d units, want run.started alone", len(wins[0]))
	}
	next := map[string]int{} // producer -> index of its next event
	streams := map[string][]events.Event{}
	for _, s := range plan.Streams {
		streams[s.Producer] = s.Events
	}
	total := 0
	for w, units := range wins {
		seen := map[string]bool{}
		n := 0
		for _, u := range units {
			if seen[u.stream] {
				t.Fatalf("window %d: stream %s in two units", w, u.stream)
			}
			seen[u.stream] = true
			for _, ev := range u.events {
				if want := streams[u.stream][next[u.stream]]; ev.ID != want.ID {
					t.Fatalf("window %d: stream %s out of order", w, u.stream)
				}
				next[u.stream]++
			}
			n += len(u.events)
		}
		if w > 0 && w < len(wins)-1 && n != 100 {
			t.Errorf("window %d holds %d events, want 100", w, n)
		}
		total += n
	}
	if total != plan.Len() {
		t.Errorf("windows hold %d events, plan %d", total, plan.Len())
	}
}

func TestJoinRecords(t *testing.T) {
	big := make([]byte, maxRequestBytes/3)
	for i := range big {
		big[i] = 'x'
	}
	recs := [][]byte{big, big, big, []byte(`{}`)}
	body, n := joinRecords(recs)
	if n != 2 || len(body) != 2*len(big)+3 || body[0] != '[' || body[len(body)-1] != ']' {
		t.Errorf("joinRecords took %d records into %d bytes", n, len(body))
	}
	body, n = joinRecords([][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)})
	if n != 2 || string(body) != `[{"a":1},{"b":2}]` {
		t.Errorf("joinRecords: %q, %d", body, n)
	}
}
