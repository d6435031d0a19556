package stack_test

import (
	"net/http"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// A method a known route does not serve is 405 with Allow, in the
// contract's error shape, with authentication and without.
func TestUnsupportedMethod(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	open, err := stack.Start(t.Context(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Shutdown(t.Context()) })
	authed := startAuthStack(t, kc, stack.Options{})
	for _, c := range []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/v1/events", "POST"},
		{http.MethodGet, "/v1/events", "POST"},
		{http.MethodDelete, "/v1/events", "POST"},
		{http.MethodPatch, "/v1/events", "POST"},
		{http.MethodOptions, "/v1/events", "POST"},
		{http.MethodPost, "/v1/runs", "GET, HEAD"},
		{http.MethodPost, "/v1/runs/r/status", "GET, HEAD"},
		{http.MethodPut, "/v1/runs/r/batches/next", "GET, HEAD"},
		{http.MethodDelete, "/v1/runs/r/batches/1", "GET, HEAD"},
		{http.MethodPost, "/v1/runs/r/batches/1/samples", "GET, HEAD"},
		{http.MethodPost, "/v1/runs/r/tasks/t/1", "GET, HEAD"},
		{http.MethodPost, "/v1/runs/r/tasks", "GET, HEAD"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodDelete, "/metrics", "GET, HEAD"},
	} {
		for name, url := range map[string]string{"open": open.URL(), "authenticated": authed.URL()} {
			t.Run(name+" "+c.method+" "+c.path, func(t *testing.T) {
				req, err := http.NewRequest(c.method, url+c.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+secrets["admin"])
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b := readAll(resp)
				if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
					t.Fatalf("got %d Allow %q %s, want 405 Allow %q", resp.StatusCode, resp.Header.Get("Allow"), b, c.allow)
				}
				if c.method != http.MethodHead {
					checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, http.StatusMethodNotAllowed, "method_not_allowed")
				}
			})
		}
	}
	// Paths no route knows stay 404, and need a token first where tokens
	// are configured.
	for _, p := range []string{"/v1/nothing", "/v1/runs/r/nothing", "/"} {
		resp, b := authed.do(t, nil, http.MethodPut, p, "admin", nil)
		checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, http.StatusNotFound, "not_found")
		if resp, _ := authed.do(t, nil, http.MethodPut, p, asNone, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("PUT %s without a token: got %d, want 401", p, resp.StatusCode)
		}
	}
}

func readAll(resp *http.Response) []byte {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out
		}
	}
}

// Token guessing shows in the ingest's request counter: a POST /v1/events
// refused by authentication (401) or by the role (403) is counted with its
// outcome like every other.
func TestIngestCountsAuthRefusals(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	s := startAuthStack(t, kc, stack.Options{})
	evs := body(t, runEvents("counted", 1))
	for _, as := range []string{asNone, asUnknown, asUnknown, "reader", "producer-a"} {
		resp, b := s.do(t, nil, http.MethodPost, "/v1/events", as, evs)
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: got %d %s, want a refusal", as, resp.StatusCode, b)
		}
	}
	mfs := scrape(t, s.URL())
	for outcome, want := range map[string]float64{telemetry.OutcomeUnauthorized: 3, telemetry.OutcomeForbidden: 2} {
		if got := sum(mfs, telemetry.NameIngestRequests, map[string]string{"outcome": outcome}); got != want {
			t.Errorf("%s{outcome=%q}: got %v, want %v", telemetry.NameIngestRequests, outcome, got, want)
		}
	}
}
