// Package gateway is the ledger's front door when its services run as
// separate processes: one base URL for producers, trainers and the SDK,
// routing POST /v1/events to the processes that run ingest and the rest of
// /v1 to those that run the api, and failing over between api replicas
// (docs/operations.md, "Staying available").
//
// # Why failover is safe
//
// Two projector replicas over the same partitions fold the same log into
// the same decisions under the same ids ([docs/design.md §12.3], §11.5), so
// a trainer may read batch k from one replica and batch k+1 from the other.
// What differs between replicas is only how far each has folded. The
// gateway therefore sends every api request to one replica, the primary,
// and moves to the next only when the primary fails (its health check, or
// a request to it); and when a replica answers 404 for a batch the gateway
// has already served (from the replica before it), the batch exists in the
// log and the replica is behind: the gateway waits for it to seal the batch
// (at most Options.BatchWait) and asks again, so a trainer never sees a
// batch disappear.
//
// # What is retried
//
// A GET that fails before its answer's headers (connection refused or
// reset, the replica marked down meanwhile) is sent to the next healthy
// replica: GETs change nothing. A POST is never re-sent by the gateway: a
// failure answers 503, the contract's "retry the same request" (event ids
// make retries safe), and the failed upstream is out of the rotation for
// the retry. A failure after an answer's headers were sent (a samples
// stream cut short) reaches the client as a broken response, which the SDK
// retries like any transport error.
//
// # What an unauthenticated client sees
//
// GET /healthz and the 503s answer without a token, so they say only
// whether the gateway can serve, with a stable code: never an upstream's
// address or a network error, which would map the deployment for anyone
// who can reach the port. Which upstream failed and why goes to the log
// and to /metrics (docs/security.md, "What open endpoints show").
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// Services an upstream may announce in its GET /healthz.
const (
	serviceIngest = "ingest"
	serviceAPI    = "api"
)

// Defaults of [Options].
const (
	DefaultCheckInterval = time.Second
	DefaultCheckTimeout  = 2 * time.Second
	DefaultBatchWait     = 30 * time.Second
)

// Options configure a [Gateway]. The zero value of every field but
// Upstreams means its default.
type Options struct {
	// Upstreams are the base URLs (http or https, host and port, no path)
	// of the ledger processes behind the gateway, in order of preference
	// for the api. Which services each runs is read from its GET /healthz.
	Upstreams []string
	// CheckInterval is how often each upstream's /healthz is asked
	// [DefaultCheckInterval]; CheckTimeout bounds one check
	// [DefaultCheckTimeout].
	CheckInterval, CheckTimeout time.Duration
	// BatchWait bounds how long a read of a batch the gateway has already
	// served waits for a lagging replica to seal it [DefaultBatchWait].
	BatchWait time.Duration
	// Transport sends the requests to the upstreams; nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Logger receives failovers, upstreams going down and up, and why
	// each request the gateway answered 503 failed; nil discards.
	Logger *slog.Logger
	// Telemetry receives each upstream's state and failures; nil records
	// nothing.
	Telemetry *telemetry.Telemetry
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if len(o.Upstreams) == 0 {
		errs = append(errs, errors.New("gateway: no upstreams (--upstream URL,URL,...)"))
	}
	seen := map[string]bool{}
	for _, s := range o.Upstreams {
		u, err := parseUpstream(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[u.String()] {
			errs = append(errs, fmt.Errorf("gateway: upstream %s named twice", s))
		}
		seen[u.String()] = true
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"check interval", o.CheckInterval}, {"check timeout", o.CheckTimeout}, {"batch wait", o.BatchWait}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("gateway: %s %v is negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("gateway: upstream %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("gateway: upstream %q is not a base URL such as http://projector:7070", s)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

func (o Options) withDefaults() Options {
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = DefaultCheckTimeout
	}
	if o.BatchWait == 0 {
		o.BatchWait = DefaultBatchWait
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Telemetry = telemetry.OrNop(o.Telemetry)
	return o
}

// upstream is one process behind the gateway.
type upstream struct {
	url *url.URL

	mu       sync.Mutex
	healthy  bool
	services []string
	// down is cancelled when the upstream is marked down, ending the
	// requests in flight to it (a paused process would hold them).
	down    context.Context
	cancel  context.CancelFunc
	lastErr string
}

func (u *upstream) serves(service string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.healthy && slices.Contains(u.services, service)
}

// Gateway routes the ledger's HTTP interface to its processes. Start it
// with [Gateway.Start]; it is an [http.Handler].
type Gateway struct {
	o     Options
	log   *slog.Logger
	ups   []*upstream
	proxy *httputil.ReverseProxy
	check *http.Client

	mu      sync.Mutex
	primary int               // index in ups of the api's current upstream, -1 before the first
	sealed  map[string]uint64 // per run, the highest batch served
	rr      atomic.Uint64     // ingest's round robin

	stop context.CancelFunc
	done chan struct{}
}

// New returns a gateway over o.Upstreams, all considered down until
// [Gateway.Start] has checked them.
func New(o Options) (*Gateway, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	g := &Gateway{o: o, log: o.Logger, sealed: map[string]uint64{}, primary: -1,
		check: &http.Client{Transport: o.Transport, Timeout: o.CheckTimeout}}
	for _, s := range o.Upstreams {
		u, _ := parseUpstream(s)
		up := &upstream{url: u}
		up.down, up.cancel = context.WithCancel(context.Background())
		up.cancel()
		g.ups = append(g.ups, up)
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			// The transport picks the upstream per attempt.
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "", "", ""
		},
		Transport:     (*transport)(g),
		FlushInterval: -1, // long polls and sample streams pass as they come
		ErrorLog:      slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
		ErrorHandler:  g.proxyError,
	}
	return g, nil
}

// Start checks every upstream once, then keeps checking them every
// CheckInterval until [Gateway.Close].
func (g *Gateway) Start(ctx context.Context) {
	g.checkAll(ctx)
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stop, g.done = stop, make(chan struct{})
	go func() {
		defer close(g.done)
		t := time.NewTicker(g.o.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				g.checkAll(cctx)
			}
		}
	}()
}

// Close stops the health checks.
func (g *Gateway) Close() {
	if g.stop != nil {
		g.stop()
		<-g.done
	}
	for _, u := range g.ups {
		u.cancel()
	}
}

func (g *Gateway) checkAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range g.ups {
		wg.Go(func() { g.checkOne(ctx, u) })
	}
	wg.Wait()
	_, ok := g.Health()
	g.o.Telemetry.Metrics.Healthy(ctx, telemetry.CheckUpstreams, ok)
}

// checkOne asks u's /healthz, which answers 200 with the services it runs
// once they run and reach Kafka.
func (g *Gateway) checkOne(ctx context.Context, u *upstream) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url.JoinPath("/healthz").String(), nil)
	if err != nil {
		g.markDown(u, telemetry.StageCheck, err)
		return
	}
	resp, err := g.check.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			g.markDown(u, telemetry.StageCheck, err)
		}
		return
	}
	defer resp.Body.Close()
	var h struct {
		Services []string `json:"services"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		g.markDown(u, telemetry.StageCheck, fmt.Errorf("healthz: %s %s", resp.Status, strings.TrimSpace(string(b))))
		return
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h); err != nil {
		g.markDown(u, telemetry.StageCheck, fmt.Errorf("healthz: %w", err))
		return
	}
	u.mu.Lock()
	was := u.healthy
	u.healthy, u.services, u.lastErr = true, h.Services, ""
	if !was {
		u.down, u.cancel = context.WithCancel(context.Background())
	}
	u.mu.Unlock()
	g.o.Telemetry.Metrics.UpstreamUp(ctx, u.url.String(), true)
	if !was {
		g.log.Info("gateway: upstream up", "upstream", u.url.String(), "services", strings.Join(h.Services, ","))
	}
}

// markDown takes u out of the rotation until its next good check, and ends
// the requests in flight to it. stage says what failed: its health check
// or a request to it.
func (g *Gateway) markDown(u *upstream, stage string, err error) {
	u.mu.Lock()
	was, same := u.healthy, u.lastErr == err.Error()
	u.healthy, u.lastErr = false, err.Error()
	u.cancel()
	u.mu.Unlock()
	m := g.o.Telemetry.Metrics
	m.UpstreamUp(context.Background(), u.url.String(), false)
	m.UpstreamFailure(context.Background(), u.url.String(), stage)
	switch {
	case was:
		g.log.Warn("gateway: upstream down", "upstream", u.url.String(), "stage", stage, "err", err)
	case !same:
		g.log.Info("gateway: upstream still down", "upstream", u.url.String(), "stage", stage, "err", err)
	}
}

// ServeHTTP routes a request: POST /v1/events to ingest, the rest of /v1/
// to the api.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var service string
	switch {
	case r.URL.Path == "/v1/events":
		service = serviceIngest
	case strings.HasPrefix(r.URL.Path, "/v1/"):
		service = serviceAPI
	default:
		httpx.WriteError(w, http.StatusNotFound, "not_found", "no route on the gateway; see /v1/events and /v1/runs")
		return
	}
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceKey{}, service)))
}

type serviceKey struct{}

// errUnavailable is wrapped by what the proxy's error handler answers 503
// for.
var errUnavailable = errors.New("gateway: unavailable")

// Messages of the 503s: stable, and naming no upstream (see the package
// documentation).
const (
	msgNoUpstream = "no upstream can serve the request now; retry the same request"
	msgNotSealed  = "the batch was served before, and the replica now serving has not sealed it yet; retry the same request"
)

// unavailableError is a 503's cause: public is what the client reads, err
// what the log does.
type unavailableError struct {
	public string
	err    error
}

func (e *unavailableError) Error() string   { return errUnavailable.Error() + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{errUnavailable, e.err} }

func unavailable(public string, err error) error { return &unavailableError{public: public, err: err} }

func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client left
	}
	public := msgNoUpstream
	if ue, ok := errors.AsType[*unavailableError](err); ok {
		public = ue.public
	}
	g.log.Warn("gateway: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	httpx.WriteError(w, http.StatusServiceUnavailable, "unavailable", public)
}

// candidates are the healthy upstreams running service, in the order to
// try them: for the api the primary first, for ingest a rotation.
func (g *Gateway) candidates(service string) []*upstream {
	n := len(g.ups)
	var start int
	if service == serviceAPI {
		start = max(g.apiPrimary(), 0)
	} else {
		start = int(g.rr.Add(1) % uint64(n))
	}
	var out []*upstream
	for i := range n {
		if u := g.ups[(start+i)%n]; u.serves(service) {
			out = append(out, u)
		}
	}
	return out
}

// apiPrimary is the index of the upstream api requests go to first: the
// current primary while it is healthy, else the next healthy one after it
// in the configured order (the first, at the start); -1 when none is.
func (g *Gateway) apiPrimary() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.ups)
	if g.primary >= 0 && g.ups[g.primary].serves(serviceAPI) {
		return g.primary
	}
	from := max(g.primary, 0)
	for i := range n {
		if j := (from + i) % n; g.ups[j].serves(serviceAPI) {
			if g.primary >= 0 {
				g.log.Warn("gateway: api fails over", "from", g.ups[g.primary].url.String(), "to", g.ups[j].url.String())
			}
			g.primary = j
			return j
		}
	}
	return -1
}

// transport sends each proxied request to an upstream, failing over.
type transport Gateway

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	g := (*Gateway)(t)
	service, _ := req.Context().Value(serviceKey{}).(string)
	cands := g.candidates(service)
	if len(cands) == 0 {
		return nil, unavailable(msgNoUpstream, fmt.Errorf("no healthy upstream runs the %s", service))
	}
	safe := req.Method == http.MethodGet || req.Method == http.MethodHead
	var lastErr error
	for _, u := range cands {
		resp, err := g.send(req, u)
		if err == nil {
			if safe && service == serviceAPI {
				return g.answered(req, u, resp)
			}
			return resp, nil
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		g.markDown(u, telemetry.StageRequest, err)
		lastErr = err
		if !safe {
			break
		}
	}
	return nil, unavailable(msgNoUpstream, lastErr)
}

// send sends req to u, ending it if u is marked down meanwhile.
func (g *Gateway) send(req *http.Request, u *upstream) (*http.Response, error) {
	u.mu.Lock()
	down := u.down
	u.mu.Unlock()
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(down, func() { cancel(fmt.Errorf("upstream %s marked down", u.url)) })
	out := req.Clone(ctx)
	out.URL.Scheme, out.URL.Host, out.Host = u.url.Scheme, u.url.Host, ""
	resp, err := g.o.Transport.RoundTrip(out)
	if err != nil {
		stop()
		cancel(nil)
		if c := context.Cause(ctx); c != nil && req.Context().Err() == nil {
			err = c
		}
		return nil, fmt.Errorf("%s: %w", u.url, err)
	}
	// The body is read after RoundTrip returns: release the context with it.
	resp.Body = &releaseBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	return resp, nil
}

type releaseBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// batchRef is a request for one batch of a run: its manifest or samples
// (seq), or the next batch after a seq (next).
type batchRef struct {
	run  string
	seq  uint64
	next bool
}

// parseBatch recognizes /v1/runs/{run}/batches/{seq}[/samples] and
// /v1/runs/{run}/batches/next?after=K.
func parseBatch(r *http.Request) (batchRef, bool) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "/")
	if len(parts) < 3 || len(parts) > 4 || parts[1] != "batches" || parts[0] == "" {
		return batchRef{}, false
	}
	if parts[2] == "next" && len(parts) == 3 {
		after, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		return batchRef{run: parts[0], seq: after + 1, next: true}, err == nil
	}
	if len(parts) == 4 && parts[3] != "samples" {
		return batchRef{}, false
	}
	seq, err := strconv.ParseUint(parts[2], 10, 64)
	return batchRef{run: parts[0], seq: seq}, err == nil && seq > 0
}

// answered notes the batches served, and holds back a 404 for a batch
// already served: the replica answering is behind the one that served it.
func (g *Gateway) answered(req *http.Request, u *upstream, resp *http.Response) (*http.Response, error) {
	b, ok := parseBatch(req)
	if !ok {
		return resp, nil
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		g.mu.Lock()
		g.sealed[b.run] = max(g.sealed[b.run], b.seq)
		g.mu.Unlock()
		return resp, nil
	case resp.StatusCode != http.StatusNotFound || b.next:
		return resp, nil
	}
	g.mu.Lock()
	served := g.sealed[b.run] >= b.seq
	g.mu.Unlock()
	if !served {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	g.log.Info("gateway: waiting for a replica to seal a batch already served", "upstream", u.url.String(), "run", b.run, "batch", b.seq)
	if err := g.waitSealed(req, u, b); err != nil {
		g.markDownIf(req, u, err)
		return nil, unavailable(msgNotSealed, fmt.Errorf("run %s batch %d was served before, and %s has not sealed it yet (%w)", b.run, b.seq, u.url, err))
	}
	return g.send(req, u)
}

// waitSealed long-polls u until it has sealed batch b.seq of b.run.
func (g *Gateway) waitSealed(req *http.Request, u *upstream, b batchRef) error {
	ctx, cancel := context.WithTimeout(req.Context(), g.o.BatchWait+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(g.o.BatchWait)
	for {
		left := time.Until(deadline).Round(time.Millisecond)
		if left <= 0 {
			return fmt.Errorf("not sealed within %v", g.o.BatchWait)
		}
		q := url.Values{"after": {strconv.FormatUint(b.seq-1, 10)}, "wait": {left.String()}}
		w, err := http.NewRequestWithContext(ctx, http.MethodGet, (&url.URL{Path: "/v1/runs/" + b.run + "/batches/next", RawQuery: q.Encode()}).String(), nil)
		if err != nil {
			return err
		}
		w.Header = req.Header.Clone()
		resp, err := g.send(w, u)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusNoContent:
			continue
		default:
			return fmt.Errorf("waiting for the batch: %s", resp.Status)
		}
	}
}

// markDownIf marks u down after a failed wait unless the client left or
// the wait only ran out.
func (g *Gateway) markDownIf(req *http.Request, u *upstream, err error) {
	var ne net.Error
	if req.Context().Err() == nil && (errors.As(err, &ne) || errors.Is(err, context.Canceled)) {
		g.markDown(u, telemetry.StageRequest, err)
	}
}

// Health is the gateway's view of its upstreams, for the process itself
// and its tests: GET /healthz shows only its Status (see
// [Gateway.ServeHealth]).
type Health struct {
	Status    string           `json:"status"`
	Services  []string         `json:"services"`
	Upstreams []UpstreamHealth `json:"upstreams"`
}

// UpstreamHealth is one upstream's last check.
type UpstreamHealth struct {
	URL      string   `json:"url"`
	Healthy  bool     `json:"healthy"`
	Primary  bool     `json:"primary,omitempty"`
	Services []string `json:"services,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// Health reports the upstreams' states; ok is true when every service
// some upstream announced has a healthy upstream.
func (g *Gateway) Health() (Health, bool) {
	primary := g.apiPrimary()
	h := Health{Status: "ok", Services: []string{"gateway"}}
	announced, up := map[string]bool{}, map[string]bool{}
	for i, u := range g.ups {
		u.mu.Lock()
		uh := UpstreamHealth{URL: u.url.String(), Healthy: u.healthy, Services: slices.Clone(u.services), Error: u.lastErr}
		u.mu.Unlock()
		uh.Primary = i == primary
		for _, s := range uh.Services {
			announced[s] = true
			up[s] = up[s] || uh.Healthy
		}
		h.Upstreams = append(h.Upstreams, uh)
	}
	ok := len(announced) > 0
	for s := range announced {
		ok = ok && up[s]
	}
	if !ok {
		h.Status = "unavailable"
	}
	return h, ok
}

// Codes of GET /healthz's 503.
const CodeUpstreamsUnavailable = "upstreams_unavailable"

// ServeHealth answers GET /healthz, which needs no token: 200 when every
// service is reachable through some upstream, 503 with the stable code
// [CodeUpstreamsUnavailable] otherwise. It names no upstream and no error:
// those are in the log and in /metrics.
func (g *Gateway) ServeHealth(w http.ResponseWriter, _ *http.Request) {
	if _, ok := g.Health(); !ok {
		httpx.WriteError(w, http.StatusServiceUnavailable, CodeUpstreamsUnavailable,
			"no upstream serves one of the ledger's services; the gateway's log and /metrics say which and why")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "services": []string{"gateway"}})
}
