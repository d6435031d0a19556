package httpx

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"time"
)

// ServerOptions bound what one client may hold of a server: how long it may
// take to send a request, and how many connections all clients together may
// keep open. The zero value means the defaults below.
//
// There is deliberately no server-wide write timeout: a long poll for the
// next batch legitimately waits up to minutes before it writes, and a
// trainer reading a large samples body is not an attack. What a slow
// reader can hold is bounded by Streams instead: the routes that stream
// large bodies charge a shared budget for what they hold and cut off a
// client whose reads make no progress.
type ServerOptions struct {
	// ReadHeaderTimeout bounds reading a request's line and headers;
	// default 10 s. A client that dribbles its headers (Slowloris) is
	// disconnected when it passes.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; default
	// 2 min. A body dribbled slower than that is refused with 408 (a
	// [BodyLimiter] cuts one slower than its floor rate much sooner).
	ReadTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection may wait for its
	// next request; default 2 min.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; default 64 KiB.
	MaxHeaderBytes int
	// MaxConns caps the connections open at once; default 4096, negative
	// for no cap. Connections beyond it wait, unanswered, in the kernel's
	// listen backlog until another closes: with the timeouts above, a
	// client that opens connections and sends nothing holds each one for at
	// most ReadHeaderTimeout.
	MaxConns int
	// Streams bound the responses that stream large bodies (a batch's
	// samples): the bytes they may hold at once, how many one client may
	// have open, and how slowly a client may read ([StreamLimits]).
	Streams StreamLimits
}

// Defaults of [ServerOptions].
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 4096
)

// Validate reports every problem at once.
func (o ServerOptions) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read header timeout", o.ReadHeaderTimeout}, {"read timeout", o.ReadTimeout}, {"idle timeout", o.IdleTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("httpx: negative %s %v", d.name, d.v))
		}
	}
	if o.MaxHeaderBytes < 0 {
		errs = append(errs, fmt.Errorf("httpx: negative max header bytes %d", o.MaxHeaderBytes))
	}
	if err := o.Streams.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	return o
}

// NewServer returns an http.Server for h with o's timeouts and limits, and
// the listener to serve it on: ln, capped at o.MaxConns connections. Every
// request goes through [Canonical] first, with no write deadline left by
// a [Stream] of the connection's previous request.
func NewServer(ln net.Listener, h http.Handler, o ServerOptions, log *slog.Logger) (*http.Server, net.Listener) {
	o = o.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.MaxConns > 0 {
		ln = limitListener(ln, o.MaxConns)
	}
	return &http.Server{
		Handler:           clearWriteDeadline(Canonical(h)),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, ln
}

// clearWriteDeadline lifts the write deadline a [Stream] leaves on its
// connection for net/http's last write of its body, before the
// connection's next request, which may be a long poll.
func clearWriteDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

// Canonical refuses, with 400 and the contract's error body, a request
// whose path is not in canonical form ("..", ".", "//" segments, or a
// trailing slash). http.ServeMux would answer those with a redirect to the
// cleaned path, which turns /v1/runs/../status into a request for another
// resource; the ledger's clients never need one, so it says what was wrong
// instead. The one exception is "/ui/", the run explorer's address, where
// a trailing slash is what a person types and what relative asset links
// need.
func Canonical(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The escaped form is what ServeMux matches and cleans; an escaped
		// "%2e%2e" or "%2f" is a segment's content, for the route to judge.
		p := r.URL.EscapedPath()
		if p == "" || p[0] != '/' || (p != "/" && p != "/ui/" && path.Clean(p) != p) {
			WriteError(w, http.StatusBadRequest, "invalid_path", fmt.Sprintf("path %q is not in canonical form (no '.', '..' or empty segments, no trailing slash)", clip(p)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsTimeout reports whether err is a network timeout: for a request body,
// the server's ReadTimeout passing while the client was still sending.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:197] + "..."
}
