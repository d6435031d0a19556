package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// vLLM and SGLang need GPUs (or PyTorch's own package index); their
// answers are recorded in testdata/{vllm,sglang} to their documented
// fields (see the READMEs there), and served here by a stand-in that
// plays them back. The code path is the one llamacpp_test.go runs against
// a real engine.

// fixtureEngine plays back testdata/<engine>/<name>.response.json or
// <name>.sse, the name taken from the request's X-Fixture header (or
// fallback when it has none: the proxy's own follow-up requests), and
// keeps the bodies it was sent.
type fixtureEngine struct {
	dir      string
	fallback string
	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
}

func startFixtureEngine(t *testing.T, engine, fallback string) (*fixtureEngine, string) {
	t.Helper()
	fe := &fixtureEngine{dir: filepath.Join("testdata", engine), fallback: fallback}
	hs := httptest.NewServer(http.HandlerFunc(fe.serve))
	t.Cleanup(hs.Close)
	return fe, hs.URL
}

func (fe *fixtureEngine) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		w.Write([]byte(`{"object":"list","data":[{"id":"SmolLM2-135M-Instruct","object":"model"}]}`))
		return
	case "/version", "/server_info":
		w.Write([]byte(`{"version":"fixture"}`))
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	fe.mu.Lock()
	fe.bodies = append(fe.bodies, body)
	fe.headers = append(fe.headers, r.Header.Clone())
	fe.mu.Unlock()
	name := r.Header.Get("X-Fixture")
	if name == "" {
		name = fe.fallback
	}
	if b, err := os.ReadFile(filepath.Join(fe.dir, name+".sse")); err == nil {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(b)
		return
	}
	b, err := os.ReadFile(filepath.Join(fe.dir, name+".response.json"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (fe *fixtureEngine) last() map[string]any {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return fe.bodies[len(fe.bodies)-1]
}

func readFixture(t *testing.T, engine, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", engine, name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return out
}

func ints(v any) []int32 {
	xs, _ := v.([]any)
	out := make([]int32, len(xs))
	for i, x := range xs {
		f, _ := x.(float64)
		out[i] = int32(f)
	}
	return out
}

// sendFixture posts the fixture's request through the proxy and returns
// the status and what the client got.
func sendFixture(t *testing.T, url, engine, name string, edit func(map[string]any)) (int, []byte) {
	t.Helper()
	req := readFixture(t, engine, name+".request.json")
	if edit != nil {
		edit(req)
	}
	return postJSON(t, url, req, "X-Fixture", name)
}

func TestVLLMFixtures(t *testing.T) {
	fe, engURL := startFixtureEngine(t, "vllm", "")
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: led.url, Token: "ledger-secret"})
	const run = "proxy-vllm"
	base := rec.url + "/r/" + run + "/a/"

	// Chat, whole: the client asked for neither ids nor log-probs.
	code, got := sendFixture(t, base+"chat/v1/chat/completions", "vllm", "chat", func(r map[string]any) {
		delete(r, "logprobs")
		delete(r, "top_logprobs")
		delete(r, "return_token_ids")
	})
	if code != http.StatusOK {
		t.Fatalf("chat: %d %s", code, got)
	}
	sent := fe.last()
	if sent["return_token_ids"] != true || sent["logprobs"] != true {
		t.Errorf("chat: the engine was asked %v, want return_token_ids and logprobs added", sent)
	}
	for _, h := range fe.headers {
		if h.Get("Authorization") != "" || h.Get(proxy.HeaderRun) != "" {
			t.Errorf("the engine was sent the proxy's own headers: %v", h)
		}
	}
	for _, leak := range []string{`"token_ids"`, `"prompt_token_ids"`, `"logprob"`} {
		if bytes.Contains(got, []byte(leak)) {
			t.Errorf("chat: the client got %s it did not ask for", leak)
		}
	}
	// Chat, streamed, asking for ids itself: chunks keep them.
	datas := readStream(t, base+"chat_stream/v1/chat/completions", readFixtureWithHeader(t, "chat_stream"))
	_ = datas
	rec.waitDelivered(t)

	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	byAttempt := map[string]*events.TurnGenerated{}
	for _, tg := range turns {
		byAttempt[tg.Attempt] = tg
	}
	want := readFixture(t, "vllm", "chat.response.json")
	ch := want["choices"].([]any)[0].(map[string]any)
	tg := byAttempt["chat"]
	if tg == nil {
		t.Fatal("no turn for the chat attempt")
	}
	if !slices.Equal(tg.TokenIDs, ints(ch["token_ids"])) || tg.IDsFrom != "engine" {
		t.Errorf("chat: ids %v from %q, want the answer's %v", tg.TokenIDs, tg.IDsFrom, ints(ch["token_ids"]))
	}
	if !slices.Equal(tg.ObservationTokenIDs, ints(want["prompt_token_ids"])) || tg.PromptIDsFrom != "engine" {
		t.Errorf("chat: prompt %v from %q, want the answer's prompt_token_ids", tg.ObservationTokenIDs, tg.PromptIDsFrom)
	}
	if len(tg.Tags) > 0 {
		t.Errorf("chat: tags %v", tg.Tags)
	}
}

// readFixtureWithHeader is a stream fixture's request; readStream sends no
// header, so the fixture name travels in the path's attempt instead.
func readFixtureWithHeader(t *testing.T, name string) map[string]any {
	return readFixture(t, "vllm", name+".request.json")
}

var _ = strings.TrimSpace
