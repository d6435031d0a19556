package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// Tokens of the test ledger: the admin pushes the simulated run and
// trains it; two trainers read samples.
const (
	adminToken    = "admin-secret-0123456789abcdef0123456789"
	trainerToken  = "trainer-secret-0123456789abcdef01234567"
	trainer2Token = "trainer2-secret-0123456789abcdef0123456"
)

// testLedger is ingest, the projector and this service behind the token
// router and httpx's server, on real Kafka, as a stack assembles them
// (services/stack imports this package, so its tests cannot be used
// here).
type testLedger struct {
	url   string
	svc   *Service
	run   string
	p     *projector.Projector
	dir   string // the projector's state directory
	authn *auth.Authenticator
}

// startLedger starts a ledger with these server options and pushes a
// token-bearing simulated run of steps steps through it, trained by the
// simulator's trainer stand-in, so batches 1..steps are sealed.
func startLedger(tb testing.TB, so httpx.ServerOptions, steps int) *testLedger {
	tb.Helper()
	kc := testenv.RealKafka(tb)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		tb.Fatal(err)
	}
	authn, err := auth.New([]auth.Token{
		{Name: "admin", Token: adminToken, Role: auth.Admin},
		{Name: "trainer", Token: trainerToken, Role: auth.Trainer},
		{Name: "trainer2", Token: trainer2Token, Role: auth.Trainer},
	})
	if err != nil {
		tb.Fatal(err)
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	tb.Cleanup(func() { _ = w.Close() })
	dir := tb.TempDir()
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	projDone := make(chan struct{})
	go func() {
		defer close(projDone)
		_ = p.Run(ctx)
	}()
	// Cleanups run last first: the servers close before the projector.
	tb.Cleanup(func() {
		cancel()
		<-projDone
		p.Close()
	})
	l := &testLedger{run: "stalled-run", p: p, dir: dir, authn: authn}
	s := l.serve(tb, so, func(mux *auth.Router) { (&ingest.Service{Appender: w}).Register(mux) })
	l.url, l.svc = s.url, s.svc
	opts := simulate.Options{URL: l.url, Run: l.run, Seed: 5, Tasks: 24, Steps: steps, BatchGroups: 4, MaxTurns: 60,
		Trainer: true, Tokens: true, Token: adminToken}
	res, err := simulate.Run(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.Steps) != steps {
		tb.Fatalf("the trainer stand-in took %d steps, want %d", len(res.Steps), steps)
	}
	return l
}

// served is a server of this service over a ledger's projector.
type served struct {
	url string
	svc *Service
	// closed counts the connections the server closed.
	closed *atomic.Int64
}

// serve starts another HTTP server of this service over the ledger's
// projector, with these options; more registers other routes on it.
func (l *testLedger) serve(tb testing.TB, so httpx.ServerOptions, more ...func(*auth.Router)) served {
	tb.Helper()
	mux := auth.NewRouter(l.authn, nil)
	for _, f := range more {
		f(mux)
	}
	svc := &Service{Projector: l.p, Streams: so.Streams}
	svc.Register(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv, ln := httpx.NewServer(ln, mux, so, nil)
	s := served{url: "http://" + ln.Addr().String(), svc: svc, closed: new(atomic.Int64)}
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			s.closed.Add(1)
		}
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return s
}

// samplesPath is the path of batch seq's samples.
func (l *testLedger) samplesPath(seq int) string {
	return fmt.Sprintf("/v1/runs/%s/batches/%d/samples", l.run, seq)
}

// stalledReader sends a samples request on a connection with a small
// receive buffer and reads nothing: a client that stopped reading.
func stalledReader(tb testing.TB, addr, path, token, accept string) net.Conn {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: %s\r\n\r\n", path, addr, token, accept)
	if _, err := conn.Write([]byte(req)); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// fetch reads a whole response and returns its status, headers and body.
func fetch(ctx context.Context, url, token, accept string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// offlineService is the api service over a projector whose Kafka cannot be
// reached, behind the router and path canonicalisation a ledger uses: what
// the routes answer before they can read the log.
func offlineService(tb testing.TB) http.Handler {
	p, err := projector.Open(projector.Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	mux := auth.NewRouter(nil, nil)
	(&Service{Projector: p}).Register(mux)
	return httpx.Canonical(mux)
}
