package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestStreamLimitsValidate(t *testing.T) {
	err := StreamLimits{Budget: -1, Wait: -time.Second, WriteTimeout: -time.Second}.Validate()
	for _, want := range []string{"negative stream budget -1", "negative stream wait -1s", "negative stream write timeout -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	if err := (StreamLimits{}).Validate(); err != nil {
		t.Errorf("the zero value: %v", err)
	}
	if got := (ServerOptions{Streams: StreamLimits{Budget: -1}}).Validate(); got == nil {
		t.Error("ServerOptions.Validate passed a negative stream budget")
	}
}

// One client may have StreamsPerClient streams open; the next is refused
// 429 with Retry-After and the contract's error body naming the client,
// until one closes. Other clients are not counted against it.
func TestStreamsPerClient(t *testing.T) {
	l := NewStreamLimiter(StreamLimits{StreamsPerClient: 2})
	var open []*Stream
	for range 2 {
		s, err := l.Open(httptest.NewRecorder(), "a", `token "a"`)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	_, err := l.Open(httptest.NewRecorder(), "a", `token "a"`)
	w := httptest.NewRecorder()
	WriteStreamError(w, err)
	var eb ErrorBody
	_ = json.Unmarshal(w.Body.Bytes(), &eb)
	if w.Code != http.StatusTooManyRequests || eb.Error.Code != "too_many_streams" || !strings.Contains(eb.Error.Message, `token "a" has 2 responses streaming`) ||
		w.Header().Get("Retry-After") != "1" {
		t.Errorf("a third stream: %d %s (Retry-After %q), want 429 too_many_streams naming the token, Retry-After: 1", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	if _, err := l.Open(httptest.NewRecorder(), "b", `token "b"`); err != nil {
		t.Errorf("another client: %v", err)
	}
	open[0].Abandon()
	if s, err := l.Open(httptest.NewRecorder(), "a", `token "a"`); err != nil {
		t.Errorf("after one closed: %v", err)
	} else {
		s.Abandon()
	}
}

// Charges never take the budget past its size: a stream that finds no
// room waits Wait and is refused 503, and a closed stream gives back all
// it was charged.
func TestStreamBudget(t *testing.T) {
	l := NewStreamLimiter(StreamLimits{Budget: 100, Wait: 50 * time.Millisecond, StreamsPerClient: -1})
	ctx := context.Background()
	a, _ := l.Open(httptest.NewRecorder(), "a", "a")
	b, _ := l.Open(httptest.NewRecorder(), "b", "b")
	for _, step := range []struct {
		s    *Stream
		n    int64
		ok   bool
		held int64
	}{
		{a, 60, true, 60},
		{a, 40, true, 60}, // a charge only grows
		{b, 50, false, 60},
		{b, 40, true, 100},
		{a, 101, false, 100}, // more than the whole budget
	} {
		err := step.s.Reserve(ctx, step.n)
		var se *StreamError
		if step.ok != (err == nil) || (err != nil && (!errors.As(err, &se) || se.Status != http.StatusServiceUnavailable)) {
			t.Errorf("Reserve(%d): %v, want ok %v or a 503", step.n, err, step.ok)
		}
		if got := l.Held(); got != step.held {
			t.Errorf("after Reserve(%d): held %d, want %d", step.n, got, step.held)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b.Abandon()
	if got := l.Held(); got != 0 {
		t.Errorf("all closed: held %d, want 0", got)
	}
}
