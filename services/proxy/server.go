package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
)

// Server is the recording proxy: an http.Handler and the sender that
// empties its spool into the ledger.
type Server struct {
	o             Options
	sp            *spool
	snd           *sender
	m             *metrics
	w             weights
	as            *attempts
	started       *startedAttempts // --strict's check that the ledger knows an attempt
	vocab         *registrar
	ups           []*url.URL
	engineVersion atomic.Pointer[string] // the probe's, once known
	probed        chan struct{}          // closed when Probe returns
	probeDone     sync.Once
	holding       *holders // settling held turns (held.go)
	mux           *http.ServeMux
	wg            sync.WaitGroup
	cancel        context.CancelFunc
}

// New opens the spool and returns a server; Start begins delivering.
func New(o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	sp, err := openSpool(o.SpoolDir, o.SpoolMaxBytes)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, sp: sp, as: newAttempts(o.IdleAttempt), probed: make(chan struct{}), holding: newHolders()}
	for _, u := range o.Upstreams {
		pu, _ := url.Parse(strings.TrimRight(u, "/"))
		s.ups = append(s.ups, pu)
	}
	if o.PolicyVersion > 0 {
		s.w.version = o.PolicyVersion
	}
	s.m = newMetrics(sp)
	s.snd = newSender(sp, o.Ledger, o.Token, o.Client, o.Logger, s.m)
	s.vocab = newRegistrar(s)
	s.started = newStartedAttempts(s)
	s.routes()
	return s, nil
}

func (s *Server) now() time.Time { return s.o.Now() }

// Start delivers the spool to the ledger and forgets idle attempts until
// Close. It first asks each engine what it is (its version goes into
// every turn).
func (s *Server) Start(ctx context.Context) {
	if err := s.resumeHeld(); err != nil {
		s.o.Logger.Error("proxy: reading the turns held before a restart failed; they stay in the spool", "err", err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.snd.run(ctx) }()
	if s.vocab != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.vocab.run(ctx) }()
	}
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.as.sweep(s.now())
				s.expire()
			}
		}
	}()
}

// expire forgets the prefix marks and last sequences of the attempts not
// answered for AttemptRetention (spool.expire), each under its own lock,
// and its copy in memory with them.
func (s *Server) expire() {
	if s.o.AttemptRetention < 0 {
		return
	}
	before := s.now().Add(-s.o.AttemptRetention).UnixMilli()
	n, err := s.sp.expire(before, func(id identity) func() {
		a := s.as.acquire(id, s.now())
		a.loaded, a.st, a.seq = false, nil, nil // read back, expired, at the next turn
		return func() { s.as.release(a) }
	})
	if err != nil {
		s.o.Logger.Warn("proxy: expiring idle attempts' prefixes failed; the next pass tries again", "err", err)
	}
	if n > 0 {
		s.o.Logger.Info("proxy: expired idle attempts' prefixes", "attempts", n, "idle_for", s.o.AttemptRetention)
	}
}

// Close stops delivering and closes the spool; what was not delivered
// stays there for the next start.
func (s *Server) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.holding.close()
	s.wg.Wait()
	return s.sp.Close()
}

// Handler is the proxy's HTTP interface.
func (s *Server) Handler() http.Handler { return s.mux }

// Pending is how many facts (and held turns, whose facts are not built
// yet) wait for the ledger, and how many facts it refused.
func (s *Server) Pending() (waiting, dead int64) {
	held := s.sp.held.Load() // first: a settled turn's facts are counted before it stops being held
	return held + s.sp.count.Load(), s.sp.dead.Load()
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.health)
	mux.Handle("GET /metrics", s.m.handler())
	mux.HandleFunc("POST /admin/weight-version", s.announce)
	mux.HandleFunc("/", s.dispatch)
	s.mux = mux
}

// dispatch routes every engine request, under /r/{run}/a/{attempt} or not.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	id, route, err := requestIdentity(r)
	if err != nil {
		s.refuse(w, "unknown", err)
		return
	}
	switch {
	case r.Method == http.MethodPost && route == "/v1/chat/completions":
		s.record(w, r, routeChat, id, route)
	case r.Method == http.MethodPost && route == "/v1/completions":
		s.record(w, r, routeCompletion, id, route)
	case r.Method == http.MethodPost && route == "/completion" && s.o.Engine == EngineLlamaCPP:
		s.record(w, r, routeLlamaNative, id, route)
	case r.Method == http.MethodPost && route == "/generate" && s.o.Engine == EngineSGLang:
		s.record(w, r, routeSGLangNative, id, route)
	case r.Method == http.MethodPost && route == "/inference/v1/generate" && s.o.Engine == EngineVLLM:
		s.record(w, r, routeVLLMNative, id, route)
	case r.Method == http.MethodGet && route == "/v1/models":
		s.pass(w, r, id, route)
	case r.Method == http.MethodPost && s.o.Engine == EngineSGLang && strings.HasPrefix(route, "/update_weights_from_"):
		s.update(w, r, route)
	default:
		s.m.requests.WithLabelValues("other", "not_found").Inc()
		httpx.WriteError(w, http.StatusNotFound, "not_found",
			fmt.Sprintf("%s %s is not a route the proxy serves for --engine %s: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, the engine's token-in route, GET /healthz, GET /metrics", r.Method, clip(route), s.o.Engine))
	}
}

func (s *Server) refuse(w http.ResponseWriter, route string, err error) {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{status: http.StatusInternalServerError, code: "internal", msg: err.Error()}
	}
	s.m.requests.WithLabelValues(route, re.code).Inc()
	httpx.WriteError(w, re.status, re.code, re.msg)
}

// pick is the upstream of an identity: rendezvous hashing over the
// upstreams, so an attempt stays on one engine (its prefix cache).
func (s *Server) pick(id identity) *url.URL {
	if len(s.ups) == 1 {
		return s.ups[0]
	}
	best, bestScore := 0, uint64(0)
	for i, u := range s.ups {
		h := sha256.Sum256([]byte(id.key() + "\x00" + u.String()))
		if sc := binary.BigEndian.Uint64(h[:8]); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return s.ups[best]
}

// hop-by-hop headers, and the proxy's own, never go upstream.
var dropHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Accept-Encoding", HeaderRun, HeaderAttempt}

func upstreamHeaders(in http.Header) http.Header {
	out := in.Clone()
	for _, h := range dropHeaders {
		out.Del(h)
	}
	return out
}

func copyAnswerHeaders(w http.ResponseWriter, h http.Header) {
	for k, vs := range h {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade":
			continue
		}
		w.Header()[k] = vs
	}
}

// pass forwards a request the proxy does not record.
func (s *Server) pass(w http.ResponseWriter, r *http.Request, id identity, route string) {
	up := s.pick(id)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = up.Scheme, up.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = up.Path+route, ""
			pr.Out.Host = up.Host
			pr.Out.Header.Del(HeaderRun)
			pr.Out.Header.Del(HeaderAttempt)
		},
		Transport:     s.o.Client.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.o.Logger.Warn("proxy: engine unreachable", "upstream", up.Host, "err", err)
			httpx.WriteError(w, http.StatusBadGateway, "engine_unavailable", "the engine did not answer")
		},
	}
	s.m.requests.WithLabelValues("passthrough", "ok").Inc()
	rp.ServeHTTP(w, r)
}

// record serves a route whose answers are turns.
func (s *Server) record(w http.ResponseWriter, r *http.Request, kind routeKind, id identity, route string) {
	arrived := s.now()
	rl := kind.String()
	if id.Attempt == "" {
		if s.o.Strict {
			s.refuse(w, rl, badRequest("attempt_required", "--strict: the request names no attempt; use the base URL /r/{run}/a/{attempt}/v1 or the headers %s and %s", HeaderRun, HeaderAttempt))
			return
		}
		s.o.Logger.Debug("proxy: request without an attempt passed through unrecorded", "route", route)
		s.m.requests.WithLabelValues(rl, "unrecorded").Inc()
		s.pass(w, r, id, route)
		return
	}
	if why := s.snd.runRefused(id.Run); why != "" {
		s.refuse(w, rl, &requestError{status: http.StatusForbidden, code: "ledger_refused", msg: fmt.Sprintf("the ledger refuses this proxy's facts for run %q, so its turns cannot be recorded: %s", id.Run, why)})
		return
	}
	if s.sp.full() {
		w.Header().Set("Retry-After", "10")
		s.refuse(w, rl, &requestError{status: http.StatusServiceUnavailable, code: "spool_full", msg: "the ledger has been unreachable long enough to fill the proxy's spool; retry when it is back"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.refuse(w, rl, &requestError{status: http.StatusRequestEntityTooLarge, code: "too_large", msg: fmt.Sprintf("the request body is over %d bytes", s.o.MaxBodyBytes)})
			return
		}
		s.refuse(w, rl, badRequest("bad_body", "reading the request body: %v", err))
		return
	}
	o, err := parseObj(body)
	if err != nil {
		s.refuse(w, rl, badRequest("bad_json", "the request body is not a JSON object: %v", err))
		return
	}
	ex := newExchange(kind, id, o)
	if err := prepare(s.o.Engine, ex); err != nil {
		s.refuse(w, rl, err)
		return
	}
	// --strict: the scheduler has written the attempt's attempt.started
	// (asked once per attempt, after the request is known to be sound).
	if rerr := s.started.check(r.Context(), id); rerr != nil {
		if rerr.code == "client_gone" {
			s.m.requests.WithLabelValues(rl, "client_gone").Inc()
			return
		}
		if rerr.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		s.refuse(w, rl, rerr)
		return
	}
	up := s.pick(id)
	ctx := r.Context()
	// The prompt's ids: the client's, the answer's, or the engine's
	// tokenizer's, asked while the engine generates or, for a held turn,
	// after the answer is given.
	var fetched chan fetchResult
	if s.holds(ex) {
		ex.body = body // asked after the answer is given (held.go)
	} else if ex.clientIDs == nil && !answerHasPromptIDs(s.o.Engine, kind) {
		fetched = make(chan fetchResult, 1)
		go func() {
			t0 := time.Now()
			ids, err := promptIDs(ctx, s.o.Client, s.o.Engine, up.String(), ex)
			s.m.phase.WithLabelValues(phasePromptIDs).Observe(time.Since(t0).Seconds())
			fetched <- fetchResult{ids, err}
		}()
	}
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, up.String()+route, bytes.NewReader(ex.req.bytes()))
	if err != nil {
		s.refuse(w, rl, err)
		return
	}
	ureq.URL.RawQuery = r.URL.RawQuery
	ureq.Header = upstreamHeaders(r.Header)
	ureq.Header.Set("Content-Type", "application/json")
	segs := s.w.startTurn()
	resp, err := s.o.Client.Do(ureq)
	s.m.phase.WithLabelValues(phaseForward).Observe(s.now().Sub(arrived).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			s.m.requests.WithLabelValues(rl, "client_gone").Inc()
			return
		}
		s.o.Logger.Warn("proxy: engine unreachable", "upstream", up.Host, "err", err)
		s.refuse(w, rl, &requestError{status: http.StatusBadGateway, code: "engine_unavailable", msg: "the engine did not answer"})
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The engine's own error, passed through as it is: no turn.
		copyAnswerHeaders(w, resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		s.m.requests.WithLabelValues(rl, "engine_"+strconv.Itoa(resp.StatusCode/100)+"xx").Inc()
		return
	}
	if ex.stream {
		s.relayStream(w, resp, ex, segs, fetched, arrived)
	} else {
		s.relayWhole(w, resp, ex, segs, fetched, arrived)
	}
}

type fetchResult struct {
	ids []int32
	err error
}

// answerHasPromptIDs says whether the engine's answer on a route carries
// the prompt's ids (vLLM's return_token_ids).
func answerHasPromptIDs(engine string, kind routeKind) bool {
	return engine == EngineVLLM && (kind == routeChat || kind == routeCompletion)
}

// readAnswer reads a whole answer into the capture and returns the bytes
// for the client.
func (s *Server) readAnswer(ex *exchange, raw []byte) ([]byte, error) {
	o, err := parseObj(raw)
	if err != nil {
		return nil, err
	}
	c := &ex.cap
	switch ex.kind {
	case routeChat, routeCompletion, routeVLLMNative:
		ans := newAnswer(o)
		c.readAnswer(ans, ex.kind)
		if ex.kind == routeVLLMNative && c.haveIDs {
			c.idsFrom = "native"
		}
		out, _ := strip(raw, ans, ex.asked, false)
		return out, nil
	case routeLlamaNative:
		c.readLlamaNative(o)
		return stripLlamaNative(raw, o, ex.asked), nil
	case routeSGLangNative:
		c.readSGLangNative(o, true)
		return stripSGLangNative(raw, o, ex.asked), nil
	}
	return raw, nil
}

func (s *Server) relayWhole(w http.ResponseWriter, resp *http.Response, ex *exchange, segs *segments, fetched chan fetchResult, arrived time.Time) {
	rl := ex.kind.String()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		s.o.Logger.Warn("proxy: reading the engine's answer", "err", err)
		s.refuse(w, rl, &requestError{status: http.StatusBadGateway, code: "engine_unavailable", msg: "the engine's answer broke off"})
		return
	}
	answered := s.now()
	out, err := s.readAnswer(ex, raw)
	if err != nil {
		s.o.Logger.Warn("proxy: the engine's answer is not JSON", "err", err)
		s.refuse(w, rl, &requestError{status: http.StatusBadGateway, code: "engine_answer", msg: "the engine answered something that is not a JSON object"})
		return
	}
	if ex.kind == routeSGLangNative && ex.cap.finish == "abort" {
		first, _ := parseObj(raw)
		joined, err := s.continueAborted(resp.Request.Context(), ex, s.pick(ex.id).String(), first)
		if err != nil {
			s.o.Logger.Warn("proxy: could not continue an aborted turn; passing the abort on", "attempt", ex.id.Attempt, "err", err)
		} else if slices.Contains(ex.cap.tags, "continued") {
			out = stripSGLangNative(joined.bytes(), joined, ex.asked)
		}
		answered = s.now()
	}
	ex.cap.latency = answered.Sub(arrived)
	if ex.body != nil {
		ex.answer = raw
	}
	refused, err := s.commit(ex, segs, fetched, false, arrived)
	if err != nil {
		s.o.Logger.Error("proxy: spool commit failed; the answer is withheld", "err", err)
		s.refuse(w, rl, &requestError{status: http.StatusServiceUnavailable, code: "spool_failed", msg: "the proxy could not store the turn, so it withholds the answer; retry"})
		return
	}
	if refused {
		s.refuse(w, rl, &requestError{status: http.StatusBadGateway, code: "turn_refused",
			msg: "--strict: the engine's answer could not be verified (" + strings.Join(ex.cap.tags, ", ") + "); the turn is recorded as refused and its attempt will not train"})
		return
	}
	s.m.added.WithLabelValues(rl).Observe(s.now().Sub(answered).Seconds())
	copyAnswerHeaders(w, resp.Header)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	s.m.requests.WithLabelValues(rl, "ok").Inc()
}

// relayStream forwards an SSE answer event by event as it arrives,
// recording each chunk, and holds back only the terminator ([DONE], or
// llama.cpp's final chunk) until the turn is in the spool.
func (s *Server) relayStream(w http.ResponseWriter, resp *http.Response, ex *exchange, segs *segments, fetched chan fetchResult, arrived time.Time) {
	rl := ex.kind.String()
	fl, _ := w.(http.Flusher)
	copyAnswerHeaders(w, resp.Header)
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	c := &ex.cap
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	clientGone := false
	write := func(b []byte) {
		if clientGone {
			return
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
		}
	}
	skipBlank := false
	terminated := false
	var held []byte
	var answered time.Time
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			trimmed := bytes.TrimRight(line, "\r\n")
			switch {
			case len(trimmed) == 0:
				if skipBlank {
					skipBlank = false
				} else {
					write(line)
					if fl != nil && !clientGone {
						fl.Flush()
					}
				}
			case bytes.HasPrefix(trimmed, []byte("data:")):
				data := bytes.TrimPrefix(bytes.TrimPrefix(trimmed, []byte("data:")), []byte(" "))
				if isDone(data) {
					terminated = true
					held = append(held, line...)
					continue
				}
				segs.observe(int64(max(len(c.ids), c.entries)))
				out, last := s.readChunk(ex, data)
				if last {
					terminated = true
					held = append(append(held, "data: "...), out...)
					held = append(held, '\n')
					continue
				}
				if out == nil {
					skipBlank = true
					continue
				}
				if bytes.Equal(out, data) {
					write(line)
				} else {
					write(append(append([]byte("data: "), out...), '\n'))
				}
			default:
				write(line)
			}
		}
		if err != nil {
			break
		}
		if clientGone {
			break
		}
	}
	answered = s.now()
	if r := resp.Request; r != nil && r.Context().Err() != nil {
		clientGone = true
	}
	if clientGone || !terminated {
		if clientGone {
			c.tag("client_cut")
		}
		if c.finish == "" {
			c.finish = "abort"
		}
	}
	c.latency = answered.Sub(arrived)
	refused, err := s.commit(ex, segs, fetched, true, arrived)
	if err != nil {
		// The harness must not get the last byte of a turn the spool does
		// not hold: end the stream without its terminator.
		s.o.Logger.Error("proxy: spool commit failed; the stream ends without its terminator", "err", err)
		s.m.requests.WithLabelValues(rl, "spool_failed").Inc()
		return
	}
	if refused {
		msg, _ := json.Marshal(httpx.ErrorBody{Error: httpx.ErrorDetail{Code: "turn_refused", Message: "--strict: the engine's answer could not be verified (" + strings.Join(c.tags, ", ") + "); the turn is recorded as refused and its attempt will not train"}})
		write(append(append([]byte("data: "), msg...), '\n', '\n'))
		s.m.requests.WithLabelValues(rl, "refused").Inc()
		return
	}
	s.m.added.WithLabelValues(rl).Observe(s.now().Sub(answered).Seconds())
	if len(held) > 0 {
		if !bytes.HasSuffix(held, []byte("\n\n")) {
			held = append(held, '\n')
		}
		write(held)
	}
	if fl != nil && !clientGone {
		fl.Flush()
	}
	outcome := "ok"
	if clientGone {
		outcome = "client_cut"
	}
	s.m.requests.WithLabelValues(rl, outcome).Inc()
}

// readChunk records one stream chunk and returns the payload to forward
// (nil: drop the event) and whether it is the stream's last.
func (s *Server) readChunk(ex *exchange, data []byte) ([]byte, bool) {
	o, err := parseObj(data)
	if err != nil {
		return data, false
	}
	c := &ex.cap
	switch ex.kind {
	case routeChat, routeCompletion, routeVLLMNative:
		if o.has("prompt_token_ids") && c.promptIDs == nil {
			if ids, err := parseIDs(o["prompt_token_ids"]); err == nil {
				c.promptIDs, c.promptFrom = ids, "engine"
			}
		}
		if o.has("usage") {
			c.readUsage(o)
		}
		ans := newAnswer(o)
		if ans.choices() > 0 {
			if ch, ok := ans.choice(0); ok {
				c.readChoice(ch, ex.kind)
			}
		}
		if ex.kind == routeVLLMNative && c.haveIDs {
			c.idsFrom = "native"
		}
		out, _ := strip(data, ans, ex.asked, true)
		return out, false
	case routeLlamaNative:
		c.readLlamaNative(o)
		return stripLlamaNative(data, o, ex.asked), o.bool("stop")
	case routeSGLangNative:
		c.readSGLangNative(o, !o.bool("stream_output_incremental"))
		return stripSGLangNative(data, o, ex.asked), false
	}
	return data, false
}

// commit builds the turn's facts and writes them, with the attempt's new
// state, to the spool. refused: --strict refused the turn (it is recorded
// as refused all the same).
func (s *Server) commit(ex *exchange, segs *segments, fetched chan fetchResult, streamed bool, arrived time.Time) (bool, error) {
	c := &ex.cap
	n := int64(c.usageComplete)
	if n == 0 {
		n = int64(len(c.ids))
	}
	vs := segs.finish(n, streamed)
	if ex.body != nil {
		return false, s.hold(ex, vs, arrived, s.now())
	}
	switch {
	case ex.clientIDs != nil:
		c.promptIDs, c.promptFrom = ex.clientIDs, "client"
	case fetched != nil:
		t0 := time.Now()
		select {
		case fr := <-fetched:
			if fr.err != nil {
				s.o.Logger.Warn("proxy: the engine gave no prompt ids", "attempt", ex.id.Attempt, "err", fr.err)
			} else {
				c.promptIDs, c.promptFrom = fr.ids, "tokenize"
			}
		case <-time.After(30 * time.Second):
			s.o.Logger.Warn("proxy: the engine's tokenizer did not answer in 30 s", "attempt", ex.id.Attempt)
		}
		s.m.phase.WithLabelValues(phasePromptWait).Observe(time.Since(t0).Seconds())
	}
	a := s.as.acquire(ex.id, s.now())
	defer s.as.release(a)
	return s.spoolTurn(a, ex, vs, arrived, s.now(), nil)
}

// spoolTurn builds a turn's facts with what its exchange knows and spools
// them with the attempt's new state (and the removal of the turn's held
// record, held). The caller holds the attempt.
func (s *Server) spoolTurn(a *attempt, ex *exchange, vs []events.VersionSegment, arrived, answered time.Time, held []byte) (bool, error) {
	if !a.loaded {
		st, seq, err := s.sp.loadAttempt(ex.id)
		if err != nil {
			return false, err
		}
		a.st, a.seq, a.loaded = st, seq, true
	}
	t0 := time.Now()
	f := s.buildTurn(ex, a.st, a.seq, vs, arrived, answered)
	recs, err := s.encode(ex.id, f)
	if err != nil {
		return false, err
	}
	t1 := time.Now()
	s.m.phase.WithLabelValues(phaseBuild).Observe(t1.Sub(t0).Seconds())
	if err := s.sp.commitTurn(ex.id, f.state, a.seq, f.seq, recs, held); err != nil {
		return false, err
	}
	s.m.phase.WithLabelValues(phaseSpool).Observe(time.Since(t1).Seconds())
	a.st, a.seq = f.state, f.seq
	// The run's vocabulary, once, in the background.
	s.vocab.want(ex.id.Run, s.pick(ex.id).String())
	outcome := "ok"
	switch {
	case f.refused:
		outcome = "refused"
	case len(f.turn.Tags) > 0:
		outcome = "tagged"
	}
	s.m.turns.WithLabelValues(outcome).Inc()
	return f.refused, nil
}

// health answers whether the proxy can take turns: the spool has room and
// nothing was refused. It names no upstream, ledger address or error
// text; those go to the log and /metrics.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	lastErr, _ := s.snd.state()
	held := s.sp.held.Load() // before the facts, as in Pending
	body := map[string]any{
		"status":       "ok",
		"spool_facts":  s.sp.count.Load(),
		"held_turns":   held,
		"dead_letters": s.sp.dead.Load(),
		"ledger":       "ok",
	}
	status := http.StatusOK
	if lastErr != "" {
		body["ledger"] = "unreachable"
		body["status"] = "degraded"
	}
	if s.sp.full() {
		body["status"] = "spool_full"
		status = http.StatusServiceUnavailable
	}
	httpx.WriteJSON(w, status, body)
}

// announce takes the trainer's word that the engines now serve a version.
func (s *Server) announce(w http.ResponseWriter, r *http.Request) {
	if !s.adminAllowed(r) {
		httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "announcing a weight version needs the proxy's admin token (or a loopback client when none is set)")
		return
	}
	var body struct {
		Version *int64 `json:"version"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil || json.Unmarshal(raw, &body) != nil || body.Version == nil || *body.Version < 0 {
		httpx.WriteError(w, http.StatusBadRequest, "bad_request", `want {"version": N} with N >= 0`)
		return
	}
	if !s.w.set(*body.Version) {
		cur, _ := s.w.current()
		httpx.WriteError(w, http.StatusConflict, "version_backwards", fmt.Sprintf("version %d is older than the current %d: versions only move forward", *body.Version, cur))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]int64{"version": *body.Version})
}

func (s *Server) adminAllowed(r *http.Request) bool {
	if s.o.AdminToken != "" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		return subtle.ConstantTimeCompare([]byte(got), []byte(s.o.AdminToken)) == 1
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// update passes an engine's own weight-update route (SGLang's
// /update_weights_from_*) to every upstream, and when all succeeded and
// the request named a weight_version, takes it as the current version.
func (s *Server) update(w http.ResponseWriter, r *http.Request, route string) {
	if !s.adminAllowed(r) {
		httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "updating weights through the proxy needs its admin token (or a loopback client when none is set)")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		httpx.WriteError(w, http.StatusRequestEntityTooLarge, "too_large", "an update request is at most 1 MiB")
		return
	}
	var lastStatus int
	var lastBody []byte
	var lastHeader http.Header
	for _, up := range s.ups {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, up.String()+route, bytes.NewReader(raw))
		if err != nil {
			httpx.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		req.Header = upstreamHeaders(r.Header)
		resp, err := s.o.Client.Do(req)
		if err != nil {
			s.o.Logger.Warn("proxy: engine unreachable for a weight update", "upstream", up.Host, "err", err)
			httpx.WriteError(w, http.StatusBadGateway, "engine_unavailable", "an engine did not answer the update")
			return
		}
		lastBody, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		lastStatus, lastHeader = resp.StatusCode, resp.Header
		if resp.StatusCode != http.StatusOK {
			break
		}
	}
	if lastStatus == http.StatusOK {
		if o, err := parseObj(raw); err == nil {
			if v, ok := o.int("weight_version"); ok {
				s.w.set(v)
			} else if v, ok := parseVersion(o.str("weight_version")); ok {
				s.w.set(v)
			}
		}
	}
	copyAnswerHeaders(w, lastHeader)
	w.WriteHeader(lastStatus)
	_, _ = w.Write(lastBody)
}
