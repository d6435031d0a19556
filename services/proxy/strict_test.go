package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/proxy"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// attemptChecks reads the proxy's rolloutledger_proxy_attempt_checks_total
// for an answer (0 when absent).
func attemptChecks(t *testing.T, proxyURL, outcome string) int {
	t.Helper()
	return metricCount(t, proxyURL, "rolloutledger_proxy_attempt_checks_total", outcome)
}

// TestStrictAsksTheLedger: with --strict, an attempt's first request is
// forwarded only once the ledger (real Kafka, authentication on) says the
// scheduler wrote its attempt.started, read after every fact acknowledged
// before; the answer yes is asked once per attempt, even by concurrent
// first requests, and outlives the ledger going away; an attempt the
// ledger does not know, or knows only from its turns, is a 400 naming
// what is missing; a run outside the token's scope a 403; a new attempt
// while the ledger is away a 503 with Retry-After. No refused request
// reaches the engine.
func TestStrictAsksTheLedger(t *testing.T) {
	tok := auth.Token{Name: "rollout", Token: "rollout-" + strings.Repeat("s", 40), Role: auth.Producer, Runs: []string{"strict-*"}}
	a, err := auth.New([]auth.Token{tok})
	if err != nil {
		t.Fatal(err)
	}
	kc := testenv.RealKafka(t)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Auth: a, DataDir: t.TempDir(),
		Only: []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Shutdown(context.Background())
		}
	})
	fe, engURL := startFixtureEngine(t, "vllm", "chat")
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: s.URL(), Token: tok.Token, Strict: true})
	loose := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: s.URL(), Token: tok.Token})
	req := readFixture(t, "vllm", "chat.request.json")
	const run = "strict-run"
	turn := func(p *recorder, run, attempt string) (int, []byte) {
		t.Helper()
		return postJSON(t, p.url+"/r/"+run+"/a/"+attempt+"/v1/chat/completions", req)
	}
	started := func(attempts ...string) {
		t.Helper()
		var facts []events.Fact
		for _, at := range attempts {
			facts = append(facts, &events.AttemptStarted{Attempt: at, Group: "g-1", Task: "t-1", Engine: "vllm", VM: "vm-" + at})
		}
		scheduleWith(t, s.URL(), tok.Token, run, facts...)
	}
	forwarded := func() int { return len(fe.bodies) }

	// Started just before its first request: read after, forwarded.
	started("a-1")
	for i := range 2 {
		if code, body := turn(rec, run, "a-1"); code != http.StatusOK {
			t.Fatalf("turn %d of a started attempt: %d %s", i, code, body)
		}
	}
	if n := attemptChecks(t, rec.url, "started"); n != 1 {
		t.Errorf("two turns of one attempt asked the ledger %d times, want once", n)
	}

	// Eight first requests of one attempt at once: one question.
	started("a-2")
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() { codes[i], _ = turn(rec, run, "a-2") })
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("concurrent first request %d: %d", i, c)
		}
	}
	if n := attemptChecks(t, rec.url, "started"); n != 2 {
		t.Errorf("after a second attempt's eight concurrent first requests the ledger was asked %d times in all, want 2", n)
	}

	// Refusals, none of them forwarded.
	if code, body := turn(loose, run, "a-turns-only"); code != http.StatusOK {
		t.Fatalf("a turn through the proxy without --strict: %d %s", code, body)
	}
	loose.waitDelivered(t)
	before := forwarded()
	for _, c := range []struct {
		run, attempt string
		status       int
		code, names  string
	}{
		{run, "a-never", http.StatusBadRequest, "unknown_attempt", "a-never"},
		{run, "a-turns-only", http.StatusBadRequest, "attempt_not_started", "attempt.started"},
		{"other-run", "a-1", http.StatusForbidden, "ledger_refused", "other-run"},
	} {
		code, body := turn(rec, c.run, c.attempt)
		if code != c.status || errCode(t, body) != c.code || !strings.Contains(string(body), c.names) {
			t.Errorf("%s/%s: %d %s, want %d %s naming %s", c.run, c.attempt, code, body, c.status, c.code, c.names)
		}
	}
	if n := forwarded() - before; n != 0 {
		t.Errorf("%d refused requests reached the engine", n)
	}

	// The ledger goes away: a known attempt goes on, a new one waits.
	started("a-3")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if code, body := turn(rec, run, "a-1"); code != http.StatusOK {
		t.Errorf("a known attempt with the ledger away: %d %s", code, body)
	}
	resp, err := http.DefaultClient.Do(jsonRequest(t, rec.url+"/r/"+run+"/a/a-3/v1/chat/completions", req))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || errCode(t, body) != "ledger_unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a new attempt with the ledger away: %d %s (Retry-After %q), want 503 ledger_unavailable with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if got := fmt.Sprint(attemptChecks(t, rec.url, "unknown"), attemptChecks(t, rec.url, "not_started"), attemptChecks(t, rec.url, "refused")); got != "1 1 1" {
		t.Errorf("answers unknown, not_started, refused counted %s, want 1 1 1", got)
	}
}
