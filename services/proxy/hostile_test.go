package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/proxy"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func errCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an error body: %s", body)
	}
	if e.Error.Message == "" {
		t.Errorf("error %q has no message", e.Error.Code)
	}
	return e.Error.Code
}

// TestBadRequestsNeverReachTheEngine: every refusal is a clear 4xx with
// the contract's error body, and the engine never sees a half-parsed or
// refused request.
func TestBadRequestsNeverReachTheEngine(t *testing.T) {
	fe, engURL := startFixtureEngine(t, "vllm", "")
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: "http://127.0.0.1:1", Strict: true, MaxBodyBytes: 1 << 16})
	post := func(path string, body []byte, header ...string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, rec.url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	cases := []struct {
		name   string
		path   string
		body   []byte
		header []string
		status int
		code   string
	}{
		{"no attempt in strict mode", "/v1/chat/completions", chat, nil, 400, "attempt_required"},
		{"run id with a space", "/r/run%20one/a/a1/v1/chat/completions", chat, nil, 400, "bad_run"},
		{"run id ..", "/r/..%2F..%2Fetc/a/a1/v1/chat/completions", chat, nil, 400, "bad_run"},
		{"attempt id with a NUL", "/r/run/a/a%00/v1/chat/completions", chat, nil, 400, "bad_attempt"},
		{"attempt id too long", "/r/run/a/" + strings.Repeat("a", 201) + "/v1/chat/completions", chat, nil, 400, "bad_attempt"},
		{"header and path disagree", "/r/run/a/a1/v1/chat/completions", chat, []string{proxy.HeaderAttempt, "a2"}, 400, "bad_attempt"},
		{"malformed JSON", "/r/run/a/a1/v1/chat/completions", []byte(`{"messages":[`), nil, 400, "bad_json"},
		{"not an object", "/r/run/a/a1/v1/chat/completions", []byte(`[1,2]`), nil, 400, "bad_json"},
		{"oversized body", "/r/run/a/a1/v1/chat/completions", append(append([]byte(`{"messages":"`), bytes.Repeat([]byte("x"), 1<<17)...), `"}`...), nil, 413, "too_large"},
		{"n above 1", "/r/run/a/a1/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"hi"}],"n":4}`), nil, 400, "n_unsupported"},
		{"chat without messages", "/r/run/a/a1/v1/chat/completions", []byte(`{"model":"m"}`), nil, 400, "bad_request"},
		{"token-in route without ids", "/r/run/a/a1/inference/v1/generate", []byte(`{"token_ids":"hello"}`), nil, 400, "bad_prompt"},
		{"unknown route", "/r/run/a/a1/v1/embeddings", chat, nil, 404, "not_found"},
		// A sound request in strict mode with the ledger away: whether the
		// attempt was started cannot be known, so it is not forwarded.
		{"strict, the ledger unreachable", "/r/run/a/a1/v1/chat/completions", chat, nil, 503, "ledger_unavailable"},
	}
	for _, c := range cases {
		status, body := post(c.path, c.body, c.header...)
		if status != c.status {
			t.Errorf("%s: status %d %s, want %d", c.name, status, body, c.status)
			continue
		}
		if code := errCode(t, body); code != c.code {
			t.Errorf("%s: code %q (%s), want %q", c.name, code, body, c.code)
		}
	}
	if n := len(fe.bodies); n != 0 {
		t.Errorf("the engine was sent %d of the refused requests", n)
	}
	// An engine's own error passes through with its status and body, and
	// records no turn (a proxy that does not ask the ledger first).
	rec = startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: "http://127.0.0.1:1", MaxBodyBytes: 1 << 16})
	status, body := post("/r/run/a/a1/v1/chat/completions", chat, "X-Fixture", "no-such-fixture")
	if status != http.StatusNotFound || !bytes.Contains(body, []byte("no-such-fixture")) {
		t.Errorf("engine error: got %d %s, want the engine's 404 passed through", status, body)
	}
	if waiting, _ := rec.s.Pending(); waiting != 0 {
		t.Errorf("an engine error spooled %d facts", waiting)
	}
}

// TestLedgerAuth: the proxy writes with the producer token it was given,
// scoped to runs; a run the token may not write is refused at once after
// the ledger said so, its facts kept as dead letters, not lost.
func TestLedgerAuth(t *testing.T) {
	tokens := []auth.Token{{Name: "producer-a", Token: "pra-" + strings.Repeat("q", 40), Role: auth.Producer, Runs: []string{"run-a*"}}}
	a, err := auth.New(tokens)
	if err != nil {
		t.Fatal(err)
	}
	kc := testenv.RealKafka(t)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Auth: a, DataDir: t.TempDir(),
		Only: []string{stack.ServiceIngest}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	fe, engURL := startFixtureEngine(t, "vllm", "chat")
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: s.URL(), Token: tokens[0].Token})
	req := readFixture(t, "vllm", "chat.request.json")
	if code, body := postJSON(t, rec.url+"/r/run-a1/a/x/v1/chat/completions", req, "Authorization", "Bearer engine-key"); code != 200 {
		t.Fatalf("allowed run: %d %s", code, body)
	}
	if got := fe.headers[len(fe.headers)-1].Get("Authorization"); got != "Bearer engine-key" {
		t.Errorf("the client's own Authorization for the engine became %q", got)
	}
	rec.waitDelivered(t)
	if code, body := postJSON(t, rec.url+"/r/run-b/a/x/v1/chat/completions", req); code != 200 {
		t.Fatalf("first request of a forbidden run: %d %s (the proxy cannot know before the ledger says)", code, body)
	}
	testenv.CheckFor(t, time.Minute, "the ledger's refusal reaches the proxy", func() bool {
		_, dead := rec.s.Pending()
		return dead > 0
	})
	code, body := postJSON(t, rec.url+"/r/run-b/a/x/v1/chat/completions", req)
	if code != http.StatusForbidden || errCode(t, body) != "ledger_refused" {
		t.Errorf("a run the ledger refuses: got %d %s, want 403 ledger_refused", code, body)
	}
	for _, h := range fe.headers {
		if strings.Contains(h.Get("Authorization"), tokens[0].Token) {
			t.Error("the ledger token reached the engine")
		}
	}
}
