package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// trickle is a request body the test feeds: Read blocks until bytes are
// sent, the body is finished, or the read deadline (set through the
// ResponseWriter, as the floor does on a real connection) passes.
type trickle struct {
	mu       sync.Mutex
	buf      []byte
	eof      bool
	deadline time.Time
	wake     chan struct{}
}

func newTrickle() *trickle { return &trickle{wake: make(chan struct{}, 1)} }

func (b *trickle) send(p []byte) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	b.mu.Unlock()
	b.poke()
}

func (b *trickle) finish() {
	b.mu.Lock()
	b.eof = true
	b.mu.Unlock()
	b.poke()
}

func (b *trickle) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *trickle) setDeadline(t time.Time) {
	b.mu.Lock()
	b.deadline = t
	b.mu.Unlock()
	b.poke()
}

func (b *trickle) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		switch {
		case !b.deadline.IsZero() && !time.Now().Before(b.deadline):
			b.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(b.buf) > 0:
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			b.mu.Unlock()
			return n, nil
		case b.eof:
			b.mu.Unlock()
			return 0, io.EOF
		}
		b.mu.Unlock()
		<-b.wake
	}
}

// deadlineWriter is a ResponseRecorder whose read deadline reaches the
// request's trickle body, as http.ResponseController's does a connection.
type deadlineWriter struct {
	*httptest.ResponseRecorder
	body *trickle
}

func (w deadlineWriter) SetReadDeadline(t time.Time) error {
	w.body.setDeadline(t)
	return nil
}

// upload is one request read by a limiter in its own goroutine.
type upload struct {
	body *trickle
	w    deadlineWriter
	done chan struct{}
	got  []byte
	err  error
	at   time.Duration // when Read returned, since the upload started
	rel  func()
}

// start begins reading a request that declares length (-1: chunked) from
// client through l.
func start(l *BodyLimiter, length int64, client string) *upload {
	u := &upload{body: newTrickle(), done: make(chan struct{})}
	u.w = deadlineWriter{ResponseRecorder: httptest.NewRecorder(), body: u.body}
	req := httptest.NewRequest(http.MethodPost, "/v1/events", u.body)
	req.ContentLength = length
	req.RemoteAddr = client + ":1234"
	begun := time.Now()
	go func() {
		defer close(u.done)
		u.got, u.rel, u.err = l.Read(u.w, req)
		u.at = time.Since(begun)
	}()
	return u
}

// wait waits for the upload's Read to return, keeps a copy of the body
// (its buffer is reused once released) and releases its charge.
func (u *upload) wait(t *testing.T) {
	t.Helper()
	<-u.done
	u.got = bytes.Clone(u.got)
	u.rel()
}

func statusOf(err error) int {
	var be *BodyError
	if errors.As(err, &be) {
		return be.Status
	}
	return 0
}

// Bodies are charged by what arrives: uploads that declare the whole
// bound and send nothing hold a small buffer each, and other requests are
// read at once.
func TestBodyLimiterChargesWhatArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewBodyLimiter(BodyLimits{MaxBytes: 1 << 20, Budget: 1 << 20, MinRate: -1})
		var slow []*upload
		for range 8 {
			slow = append(slow, start(l, 1<<20, "192.0.2.1"))
		}
		synctest.Wait()
		if got, want := l.Held(), int64(8*InitialBodyBuffer); got != want {
			t.Errorf("eight silent uploads declaring 1 MiB hold %d bytes, want %d", got, want)
		}
		// Four times the budget declared, and a small request passes.
		small := start(l, 5, "192.0.2.2")
		small.body.send([]byte("[1,2]"))
		small.body.finish()
		small.wait(t)
		if small.err != nil || string(small.got) != "[1,2]" {
			t.Fatalf("small request: got %q %v, want it read", small.got, small.err)
		}
		// As bytes arrive, the charge follows them: at most twice what
		// arrived, never the declared length.
		slow[0].body.send(bytes.Repeat([]byte(" "), 100<<10))
		synctest.Wait()
		if got := l.Held() - 7*InitialBodyBuffer; got < 100<<10 || got > 200<<10 {
			t.Errorf("an upload that sent 100 KiB is charged %d bytes, want between 100 and 200 KiB", got)
		}
		for _, u := range slow {
			u.body.finish()
			u.wait(t)
		}
		if got := l.Held(); got != 0 {
			t.Errorf("after every release: %d bytes held, want 0", got)
		}
	})
}

// The floor rate: a body that arrives slower than MinRate once the grace
// has passed is cut off with 408; one that keeps above it is read whole
// however long it takes.
func TestBodyLimiterFloorRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := BodyLimits{MinRate: 1000, Grace: 5 * time.Second, RateWindow: 2 * time.Second}
		l := NewBodyLimiter(o)

		// A byte a second: far below 1000 bytes/s.
		slow := start(l, 1000, "192.0.2.1")
		go func() {
			for range 1000 {
				select {
				case <-slow.done:
					return
				case <-time.After(time.Second):
					slow.body.send([]byte(" "))
				}
			}
		}()
		// 1500 bytes a second for 20 s: above the floor all along.
		steady := start(l, 30_000, "192.0.2.2")
		go func() {
			for range 20 {
				time.Sleep(time.Second)
				steady.body.send(bytes.Repeat([]byte(" "), 1500))
			}
			steady.body.finish()
		}()
		// Nothing at all for the grace, then fast: the grace covers a slow
		// start.
		late := start(l, 10_000, "192.0.2.3")
		go func() {
			time.Sleep(o.Grace - time.Second)
			late.body.send(bytes.Repeat([]byte(" "), 10_000))
			late.body.finish()
		}()

		slow.wait(t)
		if statusOf(slow.err) != http.StatusRequestTimeout || !strings.Contains(slow.err.Error(), "slower than 1000 bytes/s") {
			t.Fatalf("slow body: got %v, want a 408 naming the floor", slow.err)
		}
		if slow.at < o.Grace+o.RateWindow || slow.at > o.Grace+2*o.RateWindow {
			t.Errorf("slow body cut after %v, want between %v and %v", slow.at, o.Grace+o.RateWindow, o.Grace+2*o.RateWindow)
		}
		WriteBodyError(slow.w, slow.err)
		if slow.w.Code != http.StatusRequestTimeout || slow.w.Header().Get("Connection") != "close" {
			t.Errorf("answer: got %d Connection %q, want 408 and the connection closed", slow.w.Code, slow.w.Header().Get("Connection"))
		}
		steady.wait(t)
		if steady.err != nil || len(steady.got) != 30_000 {
			t.Errorf("steady body: got %d bytes, %v; want all 30000", len(steady.got), steady.err)
		}
		late.wait(t)
		if late.err != nil || len(late.got) != 10_000 {
			t.Errorf("late body: got %d bytes, %v; want all 10000", len(late.got), late.err)
		}
	})
}

// When the budget is full a request waits a short while for room, then is
// answered 503 with Retry-After; once room frees, requests pass again.
func TestBodyLimiterWaitsThenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := BodyLimits{MaxBytes: 64 << 10, Budget: 64 << 10, Wait: time.Second, MinRate: -1}
		l := NewBodyLimiter(o)
		// 40 KiB arrived: the buffer grew to the whole bound, the budget.
		big := start(l, -1, "192.0.2.1")
		big.body.send(bytes.Repeat([]byte(" "), 40<<10))
		synctest.Wait()
		if got := l.Held(); got != 64<<10 {
			t.Fatalf("held %d, want the whole budget", got)
		}
		refused := start(l, 10, "192.0.2.2")
		refused.wait(t)
		if statusOf(refused.err) != http.StatusServiceUnavailable || refused.at != o.Wait {
			t.Fatalf("got %v after %v, want 503 after waiting %v", refused.err, refused.at, o.Wait)
		}
		w := httptest.NewRecorder()
		WriteBodyError(w, refused.err)
		var eb ErrorBody
		if json.Unmarshal(w.Body.Bytes(), &eb); w.Code != 503 || w.Header().Get("Retry-After") == "" || eb.Error.Code != "overloaded" {
			t.Errorf("answer: %d Retry-After %q %s, want 503 overloaded with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		// A request that arrives while the budget is full and room frees
		// within the wait is read: the wait absorbs a burst.
		waiting := start(l, 10, "192.0.2.3")
		time.Sleep(o.Wait / 2)
		big.body.finish()
		big.wait(t)
		waiting.body.send([]byte("0123456789"))
		waiting.body.finish()
		waiting.wait(t)
		if waiting.err != nil || waiting.at < o.Wait/2 {
			t.Errorf("got %v after %v, want the body read once the big one left", waiting.err, waiting.at)
		}
	})
}

// One client cannot hold more than its share: its next request waits and
// is refused while another client's is read at once.
func TestBodyLimiterPerClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := BodyLimits{MaxBytes: 128 << 10, Budget: 1 << 20, PerClient: 128 << 10, Wait: time.Second, MinRate: -1}
		l := NewBodyLimiter(o)
		hog := start(l, -1, "192.0.2.1")
		hog.body.send(bytes.Repeat([]byte(" "), 100<<10))
		synctest.Wait()
		again := start(l, 10, "192.0.2.1")
		other := start(l, 10, "192.0.2.2")
		other.body.send([]byte("0123456789"))
		other.body.finish()
		other.wait(t)
		if other.err != nil || other.at != 0 {
			t.Errorf("another client: got %v after %v, want it read at once", other.err, other.at)
		}
		again.wait(t)
		if statusOf(again.err) != http.StatusServiceUnavailable || !strings.Contains(again.err.Error(), "client") {
			t.Errorf("the same client beyond its share: got %v, want 503 naming the client's share", again.err)
		}
		hog.body.finish()
		hog.wait(t)
	})
}

// Bodies over the bound: a declared length is refused unread and
// uncharged; an undeclared one as soon as it passes the bound.
func TestBodyLimiterTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewBodyLimiter(BodyLimits{MaxBytes: 100 << 10, MinRate: -1})
		declared := start(l, 100<<10+1, "192.0.2.1")
		declared.wait(t)
		if statusOf(declared.err) != http.StatusRequestEntityTooLarge {
			t.Errorf("declared too long: got %v, want 413", declared.err)
		}
		chunked := start(l, -1, "192.0.2.1")
		chunked.body.send(bytes.Repeat([]byte(" "), 100<<10+1))
		chunked.wait(t)
		if statusOf(chunked.err) != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked too long: got %v, want 413", chunked.err)
		}
		exact := start(l, -1, "192.0.2.1")
		exact.body.send(bytes.Repeat([]byte(" "), 100<<10))
		exact.body.finish()
		exact.wait(t)
		if exact.err != nil || len(exact.got) != 100<<10 {
			t.Errorf("chunked at the bound: got %d bytes, %v", len(exact.got), exact.err)
		}
		if got := l.Held(); got != 0 {
			t.Errorf("held %d after every release, want 0", got)
		}
	})
}

// Time spent waiting for the budget is the server's, not the client's:
// it does not count against the floor.
func TestBodyLimiterWaitIsNotTheClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := BodyLimits{MaxBytes: 64 << 10, Budget: 64 << 10, PerClient: 64 << 10, Wait: 4 * time.Second,
			MinRate: 1000, Grace: time.Second, RateWindow: time.Second}
		l := NewBodyLimiter(o)
		big := start(l, -1, "192.0.2.1")
		// Fast enough for the floor: 40 KiB at once, then 2 KiB a second
		// for 3 s.
		big.body.send(bytes.Repeat([]byte(" "), 40<<10))
		synctest.Wait() // big holds the whole budget
		go func() {
			for range 3 {
				time.Sleep(time.Second)
				big.body.send(bytes.Repeat([]byte(" "), 2<<10))
			}
			big.body.finish()
		}()
		// A request that waits 3 s for room, then sends its body at once.
		queued := start(l, 2000, "192.0.2.2")
		queued.body.send(bytes.Repeat([]byte(" "), 2000))
		queued.body.finish()
		big.wait(t)
		queued.wait(t)
		if big.err != nil || queued.err != nil {
			t.Errorf("got %v and %v, want both bodies read", big.err, queued.err)
		}
		if queued.at < 3*time.Second {
			t.Errorf("the queued body was read after %v, want it to have waited for the big one (3 s)", queued.at)
		}
	})
}

func TestBodyLimitsValidate(t *testing.T) {
	err := BodyLimits{MaxBytes: -1, Wait: -time.Second, Grace: -1}.Validate()
	for _, want := range []string{"max body bytes", "body wait", "body grace"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to name %s", err, want)
		}
	}
	o := BodyLimits{}.withDefaults()
	if o.MaxBytes != DefaultMaxBodyBytes || o.Budget != DefaultBodyBudget || o.PerClient != DefaultBodyBudget/4 ||
		o.Wait != DefaultBodyWait || o.MinRate != DefaultMinBodyRate || o.Grace != DefaultBodyGrace || o.RateWindow != DefaultRateWindow {
		t.Errorf("zero value: got %+v, want the defaults", o)
	}
	if o := (BodyLimits{MaxBytes: 10 << 20, Budget: 1 << 20}).withDefaults(); o.PerClient != 10<<20 || o.Budget != 10<<20 {
		t.Errorf("a budget below the bound: got per client %d, budget %d; want both raised to the bound", o.PerClient, o.Budget)
	}
}

// Buffers go back to a pool when a body is released and are taken again
// by later bodies: each body read reads as exactly its own bytes, whatever
// larger or smaller body the buffer held before, declared or chunked.
func TestBodyLimiterReusedBuffersHoldOnlyTheirBody(t *testing.T) {
	l := NewBodyLimiter(BodyLimits{MaxBytes: 4 << 20, MinRate: -1})
	sizes := []int{3 << 20, 1, 0, 100 << 10, InitialBodyBuffer, InitialBodyBuffer + 1, 2 << 20, 5, 3<<20 + 7}
	for round := range 3 {
		for i, n := range sizes {
			want := bytes.Repeat([]byte{byte('a' + (i+round)%26)}, n)
			for _, length := range []int64{int64(n), -1} {
				req := httptest.NewRequest(http.MethodPost, "/v1/events", bytes.NewReader(want))
				req.ContentLength = length
				got, release, err := l.Read(httptest.NewRecorder(), req)
				if err != nil {
					t.Fatalf("body of %d bytes (declared %d): %v", n, length, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("round %d, body of %d bytes (declared %d): read %d bytes, not the body sent", round, n, length, len(got))
				}
				release()
			}
		}
	}
	if got := l.Held(); got != 0 {
		t.Errorf("after every release: %d bytes held, want 0", got)
	}
}

// Buffers past the largest pooled size are made for their body and never
// pooled; pooled ones come in their class's exact size.
func TestBodyBufferClasses(t *testing.T) {
	for _, c := range []struct {
		n       int64
		wantCap int64
	}{
		{0, InitialBodyBuffer}, {1, InitialBodyBuffer}, {InitialBodyBuffer, InitialBodyBuffer},
		{InitialBodyBuffer + 1, 2 * InitialBodyBuffer}, {DefaultMaxBodyBytes, DefaultMaxBodyBytes},
		{DefaultMaxBodyBytes + 1, DefaultMaxBodyBytes + 1},
	} {
		b := getBodyBuffer(c.n)
		if int64(cap(b)) != c.wantCap || len(b) != 0 {
			t.Errorf("buffer for %d bytes: len %d cap %d, want empty with cap %d", c.n, len(b), cap(b), c.wantCap)
		}
		if c.n > DefaultMaxBodyBytes && bodyBufferClass(int64(cap(b))) >= 0 {
			t.Errorf("a buffer of %d bytes has a pool class", cap(b))
		}
		putBodyBuffer(b)
	}
}
