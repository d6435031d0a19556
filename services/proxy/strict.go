package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// maxKnownAttempts bounds the attempts --strict remembers as started; past
// it the oldest are forgotten, and asked about again if they come back.
const maxKnownAttempts = 1 << 16

// attemptLookupWait is how long the ledger may wait for its projector to
// fold up to the log's end before it answers (docs/design.md §15.4).
const attemptLookupWait = 10 * time.Second

// startedAttempts answers --strict's question before an attempt's first turn:
// has the scheduler written its attempt.started? It asks the ledger once
// per attempt (GET /v1/runs/{run}/attempts/{attempt}, which reads after
// every fact the log held), shares one question among concurrent first
// requests, and remembers the answer yes, so the attempt's later turns —
// and the ledger going away mid-attempt — cost nothing
// (docs/design.md §19.1).
type startedAttempts struct {
	base   string
	token  string
	client *http.Client
	s      *Server

	flight singleflight.Group
	mu     sync.Mutex
	known  map[string]struct{}
	order  []string // known, oldest first: the ring maxKnownAttempts evicts from
	next   int
}

func newStartedAttempts(s *Server) *startedAttempts {
	if !s.o.Strict {
		return nil
	}
	return &startedAttempts{base: strings.TrimRight(s.o.Ledger, "/"), token: s.o.Token, client: s.o.Client, s: s, known: map[string]struct{}{}}
}

// check is nil when the ledger has attempt.started for id's attempt, else
// the error the harness gets.
func (a *startedAttempts) check(ctx context.Context, id identity) *requestError {
	if a == nil {
		return nil
	}
	k := id.key()
	a.mu.Lock()
	_, ok := a.known[k]
	a.mu.Unlock()
	if ok {
		return nil
	}
	ch := a.flight.DoChan(k, func() (any, error) {
		// One question for every request waiting on it: not ended by the
		// first one's client going away.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptLookupWait+5*time.Second)
		defer cancel()
		outcome, rerr := a.ask(qctx, id)
		a.s.m.attemptChecks.WithLabelValues(outcome).Inc()
		if rerr == nil {
			a.remember(k)
		}
		return rerr, nil
	})
	select {
	case <-ctx.Done():
		return &requestError{status: http.StatusServiceUnavailable, code: "client_gone", msg: "the request ended while the ledger was asked about its attempt"}
	case r := <-ch:
		rerr, _ := r.Val.(*requestError)
		return rerr
	}
}

func (a *startedAttempts) remember(k string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.known[k]; ok {
		return
	}
	if len(a.order) < maxKnownAttempts {
		a.order = append(a.order, k)
	} else {
		delete(a.known, a.order[a.next])
		a.order[a.next] = k
		a.next = (a.next + 1) % maxKnownAttempts
	}
	a.known[k] = struct{}{}
}

// ask puts the question to the ledger; outcome labels the metric.
func (a *startedAttempts) ask(ctx context.Context, id identity) (outcome string, _ *requestError) {
	u := fmt.Sprintf("%s/v1/runs/%s/attempts/%s?wait=%s", a.base, url.PathEscape(id.Run), url.PathEscape(id.Attempt), attemptLookupWait)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "unavailable", &requestError{status: http.StatusInternalServerError, code: "internal", msg: err.Error()}
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	unavailable := func(why string) *requestError {
		a.s.o.Logger.Warn("proxy: --strict cannot ask the ledger about an attempt", "run", id.Run, "attempt", id.Attempt, "err", why)
		return &requestError{status: http.StatusServiceUnavailable, code: "ledger_unavailable",
			msg: fmt.Sprintf("--strict: the ledger cannot say now whether attempt %q of run %q was started; retry", id.Attempt, id.Run)}
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return "unavailable", unavailable(err.Error())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		var v struct {
			Started *bool `json:"started"`
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Started == nil {
			return "unavailable", unavailable(fmt.Sprintf("the ledger's answer has no started: %.200s", body))
		}
		if !*v.Started {
			return "not_started", badRequest("attempt_not_started",
				"--strict: the ledger has facts of attempt %q of run %q but no attempt.started; the scheduler writes attempt.started before the attempt's first request", id.Attempt, id.Run)
		}
		return "started", nil
	case http.StatusNotFound:
		return "unknown", badRequest("unknown_attempt",
			"--strict: the ledger has no attempt %q in run %q; the scheduler writes attempt.started before the attempt's first request", id.Attempt, id.Run)
	case http.StatusUnauthorized, http.StatusForbidden:
		var le ledgerError
		_ = json.Unmarshal(body, &le)
		return "refused", &requestError{status: http.StatusForbidden, code: "ledger_refused",
			msg: fmt.Sprintf("--strict: the ledger refuses this proxy's question about run %q (its token needs the producer role for the run): %s", id.Run, le.Error.Message)}
	}
	return "unavailable", unavailable(fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body))
}
