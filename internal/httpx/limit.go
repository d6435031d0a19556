package httpx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// BodyLimits bound what request bodies may hold of a server, and how
// slowly they may arrive. The zero value means the defaults below.
//
// A body is charged by what actually arrives, never by what its
// Content-Length declares: it is read into room that grows as bytes come,
// and each growth is charged before it is made (the charge is at most
// twice what arrived plus [InitialBodyBuffer]). The room is in a buffer
// taken from a pool, of the next power of two, which goes back to the
// pool when the body is released.
// So a client that declares 64 MiB and dribbles a byte now and then holds
// a few KiB, not 64 MiB, and is cut off by the floor rate.
//
// Growth is charged in pieces of at most [BodyChargeStep] against two
// FIFO semaphores, the client's and the server's: a large body waiting
// for room queues behind smaller requests piece by piece, never holding
// the line for its whole size, and one client cannot take more than
// PerClient of the budget. A request that finds no room within Wait is
// answered 503 with Retry-After.
type BodyLimits struct {
	// MaxBytes bounds one request body; default 64 MiB. A declared
	// longer body is refused unread (413), an undeclared (chunked) one as
	// soon as it passes the bound.
	MaxBytes int64
	// Budget bounds the bytes all bodies being read or handled hold at
	// once; default 256 MiB. It is raised to PerClient if smaller.
	Budget int64
	// PerClient bounds the bytes the bodies of one client (see Key) hold
	// at once; default a quarter of Budget. It is raised to MaxBytes if
	// smaller, so every allowed body can be read.
	PerClient int64
	// Wait bounds how long a body waits for room in the budget before it
	// is answered 503 with Retry-After; default 1 s.
	Wait time.Duration
	// MinRate is the floor, in bytes per second, below which a body is
	// cut off: answered 408 and its connection closed. Once Grace has
	// passed since the body was first read, the body must keep up with
	// the rate on average, give or take one RateWindow's worth of bytes
	// (time spent waiting for budget does not count against the client).
	// Default 32 KiB/s; negative disables the floor, leaving the server's
	// ReadTimeout as the only bound. The cut sets the connection's read
	// deadline through http.ResponseController, so the ResponseWriter must
	// be net/http's (HTTP/1 or HTTP/2) or a wrapper that unwraps to it;
	// with another, a body is cut only when a read of it returns.
	MinRate int64
	// Grace is how long a body may arrive at any pace before the floor
	// applies; default 5 s.
	Grace time.Duration
	// RateWindow is the tolerance of the floor, as time at MinRate;
	// default 5 s. A client that sends nothing is cut off Grace +
	// RateWindow (at most Grace + 1.5 RateWindow) after its body was first
	// read, one that stops later at most 2.5 RateWindows after it stopped;
	// one that sends in bursts is not cut while its average keeps up.
	RateWindow time.Duration
	// Key names the client a request comes from, for PerClient; default
	// the host of its remote address ([RemoteHost]).
	Key func(*http.Request) string
}

// Defaults of [BodyLimits].
const (
	DefaultMaxBodyBytes = 64 << 20
	DefaultBodyBudget   = 256 << 20
	DefaultBodyWait     = time.Second
	DefaultMinBodyRate  = 32 << 10
	DefaultBodyGrace    = 5 * time.Second
	DefaultRateWindow   = 5 * time.Second
)

const (
	// InitialBodyBuffer is the buffer a body of unknown or larger length
	// is first read into, and the least a body is charged (when it
	// declares no smaller length).
	InitialBodyBuffer = 16 << 10
	// BodyChargeStep is the largest piece of the budget one request asks
	// for at a time: what a large body waiting for room can keep a small
	// one behind it waiting for.
	BodyChargeStep = 64 << 10
)

// Validate reports every problem at once.
func (o BodyLimits) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int64
	}{{"max body bytes", o.MaxBytes}, {"body budget", o.Budget}, {"per-client body bytes", o.PerClient}} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("httpx: negative %s %d", v.name, v.n))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"body wait", o.Wait}, {"body grace", o.Grace}, {"rate window", o.RateWindow}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("httpx: negative %s %v", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

func (o BodyLimits) withDefaults() BodyLimits {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBodyBytes
	}
	if o.Budget <= 0 {
		o.Budget = DefaultBodyBudget
	}
	if o.PerClient <= 0 {
		o.PerClient = o.Budget / 4
	}
	o.PerClient = max(o.PerClient, o.MaxBytes)
	o.Budget = max(o.Budget, o.PerClient)
	if o.Wait <= 0 {
		o.Wait = DefaultBodyWait
	}
	if o.MinRate == 0 {
		o.MinRate = DefaultMinBodyRate
	}
	if o.Grace <= 0 {
		o.Grace = DefaultBodyGrace
	}
	if o.RateWindow <= 0 {
		o.RateWindow = DefaultRateWindow
	}
	if o.Key == nil {
		o.Key = RemoteHost
	}
	return o
}

// RemoteHost is the host part of r's remote address.
func RemoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// BodyLimiter reads request bodies within [BodyLimits]. It is safe for
// concurrent use; one limiter is one budget.
type BodyLimiter struct {
	o    BodyLimits
	sem  *semaphore.Weighted
	held atomic.Int64

	mu      sync.Mutex
	clients map[string]*clientBudget
}

// clientBudget is one client's share, alive while a request of it is.
type clientBudget struct {
	sem  *semaphore.Weighted
	refs int
}

// NewBodyLimiter returns a limiter for o (zero fields: the defaults).
func NewBodyLimiter(o BodyLimits) *BodyLimiter {
	o = o.withDefaults()
	return &BodyLimiter{o: o, sem: semaphore.NewWeighted(o.Budget), clients: map[string]*clientBudget{}}
}

// Held is the number of bytes the bodies being read or handled are
// charged now.
func (l *BodyLimiter) Held() int64 { return l.held.Load() }

// BodyError is why a body was not read: the status and code of the
// answer, and a message for the client. [WriteBodyError] answers it.
type BodyError struct {
	Status  int
	Code    string
	Message string
	// Err is the underlying read error, if any.
	Err error
}

func (e *BodyError) Error() string { return "httpx: " + e.Message }

func (e *BodyError) Unwrap() error { return e.Err }

// WriteBodyError answers a request whose body [BodyLimiter.Read] refused:
// its status and code in the contract's error shape, Retry-After on a 503,
// and, since the body was not read to its end, the connection closed.
func WriteBodyError(w http.ResponseWriter, err error) {
	var be *BodyError
	if !errors.As(err, &be) {
		be = &BodyError{Status: http.StatusBadRequest, Code: "unreadable_body", Message: err.Error()}
	}
	if be.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	w.Header().Set("Connection", "close")
	WriteError(w, be.Status, be.Code, be.Message)
}

// Read reads r's body whole within the limits. release gives back what
// the body was charged and its buffer; call it (it is never nil) once the
// body and what was made of it are no longer needed: the buffer is reused
// for other bodies after it. err is a [*BodyError]: 413 for a
// body over MaxBytes, 408 for one that arrives slower than the floor or
// past the server's ReadTimeout, 503 when the budget has no room within
// Wait, 400 when the client went away or the framing is broken.
func (l *BodyLimiter) Read(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	o := l.o
	if r.ContentLength > o.MaxBytes {
		return nil, func() {}, &BodyError{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
			Message: fmt.Sprintf("request body of %d bytes, more than %d", r.ContentLength, o.MaxBytes)}
	}
	key := o.Key(r)
	c := l.client(key)
	var held int64
	var buf []byte
	release = func() {
		if held > 0 {
			l.sem.Release(held)
			c.sem.Release(held)
			l.held.Add(-held)
			held = 0
		}
		putBodyBuffer(buf)
		buf = nil
		l.leave(key, c)
	}
	// want is how large the buffer may have to get: the declared length,
	// or the bound.
	want := o.MaxBytes
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	fl := startFloor(w, o)
	defer fl.stop()
	grow := func(n int64) error {
		fl.pause()
		defer fl.resume()
		ctx, cancel := context.WithTimeout(r.Context(), o.Wait)
		defer cancel()
		for n > 0 {
			piece := min(n, BodyChargeStep)
			if err := c.sem.Acquire(ctx, piece); err != nil {
				return l.overloaded("this client's bodies hold as many bytes as one client may")
			}
			if err := l.sem.Acquire(ctx, piece); err != nil {
				c.sem.Release(piece)
				return l.overloaded("the server holds as many request bodies as it may")
			}
			held += piece
			l.held.Add(piece)
			n -= piece
		}
		return nil
	}
	first := min(want, InitialBodyBuffer)
	if err := grow(max(first, 1)); err != nil {
		return nil, release, err
	}
	// The buffer comes from a pool and may be larger than its charge
	// (up to the next power of two): reads stop at the charge, room, so
	// what a body is charged is what it could have filled.
	room := first
	buf = getBodyBuffer(first)
	for {
		if int64(len(buf)) == want {
			// The buffer holds all a body may have: one more byte means it
			// was longer than allowed; EOF means it is whole.
			var probe [1]byte
			n, err := r.Body.Read(probe[:])
			if n > 0 {
				return nil, release, &BodyError{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
					Message: fmt.Sprintf("request body over %d bytes", want)}
			}
			if err == io.EOF {
				return buf, release, nil
			}
			if err != nil {
				return nil, release, l.readError(fl, len(buf), err)
			}
			continue
		}
		if int64(len(buf)) == room {
			next := min(max(2*room, InitialBodyBuffer), want)
			if err := grow(next - room); err != nil {
				return nil, release, err
			}
			room = next
			if int64(cap(buf)) < room {
				nb := append(getBodyBuffer(room), buf...)
				putBodyBuffer(buf)
				buf = nb
			}
		}
		n, err := r.Body.Read(buf[len(buf):room])
		buf = buf[:len(buf)+n]
		fl.add(n)
		if err == io.EOF {
			return buf, release, nil
		}
		if err != nil {
			return nil, release, l.readError(fl, len(buf), err)
		}
	}
}

func (l *BodyLimiter) overloaded(why string) error {
	return &BodyError{Status: http.StatusServiceUnavailable, Code: "overloaded", Message: why + "; retry shortly"}
}

// readError classifies an error reading a body.
func (l *BodyLimiter) readError(fl *floor, got int, err error) error {
	var tooBig *http.MaxBytesError
	switch {
	case fl.wasCut():
		return &BodyError{Status: http.StatusRequestTimeout, Code: "timeout", Err: err,
			Message: fmt.Sprintf("the request body arrived slower than %d bytes/s (%d bytes read); the connection is closed", l.o.MinRate, got)}
	case IsTimeout(err):
		return &BodyError{Status: http.StatusRequestTimeout, Code: "timeout", Err: err,
			Message: "the request body did not arrive in time"}
	case errors.As(err, &tooBig):
		return &BodyError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Err: err,
			Message: fmt.Sprintf("request body over %d bytes", tooBig.Limit)}
	}
	// Most often the client went away mid-body.
	return &BodyError{Status: http.StatusBadRequest, Code: "unreadable_body", Err: err, Message: "reading the request body: " + err.Error()}
}

func (l *BodyLimiter) client(key string) *clientBudget {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[key]
	if c == nil {
		c = &clientBudget{sem: semaphore.NewWeighted(l.o.PerClient)}
		l.clients[key] = c
	}
	c.refs++
	return c
}

func (l *BodyLimiter) leave(key string, c *clientBudget) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.refs--; c.refs == 0 {
		delete(l.clients, key)
	}
}

// floor cuts off a body that arrives slower than the minimum rate. Once
// the grace has passed, the body owes MinRate bytes every second and pays
// with what arrives; it may be ahead by at most one window's worth (so a
// fast start does not buy a long stall) and behind by at most one window's
// worth (so a bursty sender above the rate is never cut). Past that, a
// timer sets the connection's read deadline in the past: the pending read
// fails at once and the connection is not read again.
type floor struct {
	rc     *http.ResponseController
	rate   float64 // bytes per second owed
	slack  float64 // bytes the body may be ahead or behind: one window's worth
	period time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	gen     int           // of the timer: a stale one that fires does nothing
	due     time.Time     // when the timer fires
	left    time.Duration // of the grace, while paused in it
	last    time.Time     // when debt was last brought up to date
	debt    float64       // bytes behind the rate (negative: ahead)
	got     int64         // bytes arrived since last
	inGrace bool
	paused  bool
	cut     bool
	done    bool
}

func startFloor(w http.ResponseWriter, o BodyLimits) *floor {
	f := &floor{rc: http.NewResponseController(w), inGrace: true}
	if o.MinRate < 0 {
		f.done = true
		return f
	}
	f.rate = float64(o.MinRate)
	f.slack = f.rate * o.RateWindow.Seconds()
	f.period = max(o.RateWindow/2, time.Millisecond)
	f.mu.Lock()
	f.arm(o.Grace)
	f.mu.Unlock()
	return f
}

func (f *floor) tick(gen int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.paused || gen != f.gen {
		return
	}
	now := time.Now()
	if f.inGrace {
		f.inGrace, f.last, f.got, f.debt = false, now, 0, 0
		f.arm(f.period)
		return
	}
	f.settle(now)
	if f.debt > f.slack {
		f.cut, f.done = true, true
		// Not every ResponseWriter can (a test recorder): then the cut
		// shows when the pending read returns.
		_ = f.rc.SetReadDeadline(time.Unix(1, 0))
		return
	}
	f.arm(f.period)
}

// settle brings the debt up to now; f.mu is held.
func (f *floor) settle(now time.Time) {
	f.debt += f.rate*now.Sub(f.last).Seconds() - float64(f.got)
	f.debt = max(f.debt, -f.slack)
	f.last, f.got = now, 0
}

// arm starts a timer for d; f.mu is held.
func (f *floor) arm(d time.Duration) {
	f.gen++
	gen := f.gen
	f.due = time.Now().Add(d)
	f.timer = time.AfterFunc(d, func() { f.tick(gen) })
}

func (f *floor) add(n int) {
	f.mu.Lock()
	f.got += int64(n)
	f.mu.Unlock()
}

// pause stops the clock while the server, not the client, is the one
// waiting (for budget); resume goes on from where it stood.
func (f *floor) pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer == nil || f.done || f.paused {
		return
	}
	f.paused = true
	f.gen++
	f.timer.Stop()
	f.left = max(time.Until(f.due), 0)
	if !f.inGrace {
		f.settle(time.Now())
	}
}

func (f *floor) resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer == nil || f.done || !f.paused {
		return
	}
	f.paused = false
	f.last = time.Now()
	f.arm(f.left)
}

func (f *floor) wasCut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut
}

func (f *floor) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	f.gen++
	if f.timer != nil {
		f.timer.Stop()
	}
}

// bodyBufferClasses is how many sizes of body buffer are pooled: powers of
// two from [InitialBodyBuffer] to DefaultMaxBodyBytes. A larger buffer is
// made for its body and left to the collector.
const bodyBufferClasses = 13

// bodyBuffers pools the buffers bodies are read into, class i holding
// buffers of capacity InitialBodyBuffer<<i. A body's buffer goes back when
// its release is called, so a server taking large bodies at a high rate
// reuses a few buffers instead of allocating (and zeroing) one for every
// request; a pool's buffers not taken again are freed by the collector.
var bodyBuffers [bodyBufferClasses]sync.Pool

// bodyBufferClass is the class of the smallest pooled buffer of at least n
// bytes, or -1 when n is beyond the largest.
func bodyBufferClass(n int64) int {
	for c := range bodyBufferClasses {
		if n <= int64(InitialBodyBuffer)<<c {
			return c
		}
	}
	return -1
}

// getBodyBuffer returns an empty buffer of at least n bytes.
func getBodyBuffer(n int64) []byte {
	c := bodyBufferClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if b, ok := bodyBuffers[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, int64(InitialBodyBuffer)<<c)
}

// putBodyBuffer gives b back to its class's pool; a buffer of no class's
// exact size (a large body's) is left to the collector.
func putBodyBuffer(b []byte) {
	c := bodyBufferClass(int64(cap(b)))
	if c < 0 || int64(cap(b)) != int64(InitialBodyBuffer)<<c {
		return
	}
	bodyBuffers[c].Put(&b)
}
