package httpx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// StreamLimits bound what streamed responses (a batch's samples, read
// from storage a piece at a time) may hold of a server, and how slowly
// their clients may read them. The zero value means the defaults below.
//
// A stream charges the budget for what it holds on its client's behalf
// (the stored piece being sent and what is rendered from it) before it
// holds it, so a client that stops reading holds its charge, never more,
// and then only until a write to it makes no progress for WriteTimeout.
// A stream that finds no room within Wait before it has sent any of its
// body is answered 503 with Retry-After; one that has, and needs more
// (a stored piece larger than most), waits up to WriteTimeout, holding
// what it has, and is then cut off.
// One client (one token; one address when the server checks no tokens)
// may have StreamsPerClient streams open; more are answered 429 with
// Retry-After.
type StreamLimits struct {
	// Budget bounds the bytes all streamed responses hold at once;
	// default 256 MiB.
	Budget int64
	// Wait bounds how long a stream waits for room in the budget before
	// it sends its body; default 5 s.
	Wait time.Duration
	// WriteTimeout bounds one write of at most [StreamPiece] bytes to the
	// client; default 30 s. A client that takes less than that in this
	// time (under about 8 KiB/s by default) is cut off and its
	// connection closed, giving back its charge.
	WriteTimeout time.Duration
	// StreamsPerClient bounds the streams one client may have open at
	// once; default 8, negative for no bound.
	StreamsPerClient int
}

// Defaults of [StreamLimits].
const (
	DefaultStreamBudget       = 256 << 20
	DefaultStreamWait         = 5 * time.Second
	DefaultStreamWriteTimeout = 30 * time.Second
	DefaultStreamsPerClient   = 8
)

// StreamPiece is the largest write a stream makes to its client at once:
// each has WriteTimeout to complete.
const StreamPiece = 256 << 10

// Validate reports every problem at once.
func (o StreamLimits) Validate() error {
	var errs []error
	if o.Budget < 0 {
		errs = append(errs, fmt.Errorf("httpx: negative stream budget %d", o.Budget))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"stream wait", o.Wait}, {"stream write timeout", o.WriteTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("httpx: negative %s %v", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

func (o StreamLimits) withDefaults() StreamLimits {
	if o.Budget <= 0 {
		o.Budget = DefaultStreamBudget
	}
	if o.Wait <= 0 {
		o.Wait = DefaultStreamWait
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultStreamWriteTimeout
	}
	if o.StreamsPerClient == 0 {
		o.StreamsPerClient = DefaultStreamsPerClient
	}
	return o
}

// StreamLimiter admits streamed responses within [StreamLimits]. It is
// safe for concurrent use; one limiter is one budget.
type StreamLimiter struct {
	o    StreamLimits
	sem  *semaphore.Weighted
	held atomic.Int64

	mu   sync.Mutex
	open map[string]int
}

// NewStreamLimiter returns a limiter for o (zero fields: the defaults).
func NewStreamLimiter(o StreamLimits) *StreamLimiter {
	o = o.withDefaults()
	return &StreamLimiter{o: o, sem: semaphore.NewWeighted(o.Budget), open: map[string]int{}}
}

// Held is the number of bytes the open streams are charged now.
func (l *StreamLimiter) Held() int64 { return l.held.Load() }

// Limits are the limiter's limits, defaults filled in.
func (l *StreamLimiter) Limits() StreamLimits { return l.o }

// StreamError is why a stream was refused or cut: the status and code of
// the answer when its status was not sent yet, and a message for the
// client. [WriteStreamError] answers it.
type StreamError struct {
	Status  int
	Code    string
	Message string
}

func (e *StreamError) Error() string { return "httpx: " + e.Message }

// WriteStreamError answers a stream refused before its status was sent:
// the contract's error body, with Retry-After on a 429 or 503.
func WriteStreamError(w http.ResponseWriter, err error) {
	var se *StreamError
	if !errors.As(err, &se) {
		se = &StreamError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	}
	if se.Status == http.StatusTooManyRequests || se.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	WriteError(w, se.Status, se.Code, se.Message)
}

// Open admits a stream of the client key (named in the refusal as who),
// writing to w. err is a [*StreamError], 429, when the client has
// StreamsPerClient streams open. Close the stream when done.
func (l *StreamLimiter) Open(w http.ResponseWriter, key, who string) (*Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[key]; l.o.StreamsPerClient > 0 && n >= l.o.StreamsPerClient {
		return nil, &StreamError{Status: http.StatusTooManyRequests, Code: "too_many_streams",
			Message: fmt.Sprintf("%s has %d responses streaming, the most one client may; retry when one ends", who, n)}
	}
	l.open[key]++
	return &Stream{l: l, key: key, w: w, rc: http.NewResponseController(w)}, nil
}

// Stream is one streamed response: its charge against the budget, and
// the writer that sends its body in pieces, each within WriteTimeout.
type Stream struct {
	l        *StreamLimiter
	key      string
	w        http.ResponseWriter
	rc       *http.ResponseController
	held     int64
	wrote    bool // some of the body was written
	deadline bool // a write deadline was set
	closed   bool
}

// Held is the bytes this stream is charged.
func (s *Stream) Held() int64 { return s.held }

// Reserve raises the stream's charge to n bytes if it is less, waiting at
// most Wait for room (WriteTimeout once some of the body is written);
// call it before holding what it covers. err is a [*StreamError], 503,
// when no room came in time or n is more than the whole budget.
func (s *Stream) Reserve(ctx context.Context, n int64) error {
	more := n - s.held
	if more <= 0 {
		return nil
	}
	if n > s.l.o.Budget {
		return &StreamError{Status: http.StatusServiceUnavailable, Code: "overloaded",
			Message: fmt.Sprintf("this response needs %d bytes at once, more than the server's budget for responses (%d)", n, s.l.o.Budget)}
	}
	wait := s.l.o.Wait
	if s.wrote {
		wait = s.l.o.WriteTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.l.sem.Acquire(ctx, more); err != nil {
		return &StreamError{Status: http.StatusServiceUnavailable, Code: "overloaded",
			Message: "the server holds as many streamed responses as it may; retry shortly"}
	}
	s.held = n
	s.l.held.Add(more)
	return nil
}

// Write sends p to the client in pieces of at most [StreamPiece] bytes,
// each of which must be taken within WriteTimeout: past it the write
// fails and the connection is closed.
func (s *Stream) Write(p []byte) (int, error) {
	n := 0
	s.wrote = true
	for len(p) > 0 {
		piece := p[:min(len(p), StreamPiece)]
		// Not every ResponseWriter can (a test recorder): then only the
		// server's own timeouts apply.
		if s.rc.SetWriteDeadline(time.Now().Add(s.l.o.WriteTimeout)) == nil {
			s.deadline = true
		}
		k, err := s.w.Write(piece)
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// Close flushes what the server buffered of the body, within
// WriteTimeout, then gives back the stream's charge and its slot. It
// returns the flush's error, if any. The write deadline stays, so that
// the end of the body net/http writes after the handler returns is
// bounded too; [NewServer] clears it when the connection's next request
// starts.
func (s *Stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.deadline {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.l.o.WriteTimeout))
		err = s.rc.Flush()
	}
	s.release()
	return err
}

// Abandon gives back the stream's charge and its slot without sending
// what is buffered: the response is being cut off.
func (s *Stream) Abandon() {
	if !s.closed {
		s.closed = true
		s.release()
	}
}

func (s *Stream) release() {
	if s.held > 0 {
		s.l.sem.Release(s.held)
		s.l.held.Add(-s.held)
		s.held = 0
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.l.open[s.key]--; s.l.open[s.key] <= 0 {
		delete(s.l.open, s.key)
	}
}
