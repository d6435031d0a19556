package proxy_test

import (
	"bufio"
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
// answers are written in testdata/{vllm,sglang} to their documented
// fields (the READMEs there name the versions followed and how to check
// them against a real server), and played back here by a stand-in. The
// code path is the one llamacpp_test.go runs against a real engine.

// fixtureEngine plays back testdata/<engine>/<name>.response.json or
// <name>.sse, the name taken from the request's X-Fixture header (or
// fallback when it has none: the proxy's own follow-up requests), and
// keeps what it was sent.
type fixtureEngine struct {
	dir      string
	fallback string
	// answer, when set, is played back for every request not named.
	answer  []byte
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
}

func startFixtureEngine(t testing.TB, engine, fallback string) (*fixtureEngine, string) {
	t.Helper()
	fe := &fixtureEngine{dir: filepath.Join("testdata", engine), fallback: fallback}
	hs := httptest.NewServer(http.HandlerFunc(fe.serve))
	t.Cleanup(hs.Close)
	return fe, hs.URL
}

func (fe *fixtureEngine) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		w.Write([]byte(`{"object":"list","data":[{"id":"HuggingFaceTB/SmolLM2-135M-Instruct","object":"model"}]}`))
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
	if name == "" && fe.answer != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Write(fe.answer)
		return
	}
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
		http.Error(w, "no fixture "+name, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (fe *fixtureEngine) sent(i int) map[string]any {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return fe.bodies[i]
}

func fixtureBytes(t *testing.T, engine, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", engine, file))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return b
}

func readFixture(t *testing.T, engine, file string) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(fixtureBytes(t, engine, file), &out); err != nil {
		t.Fatalf("fixture %s: %v", file, err)
	}
	return out
}

// fixtureAnswers are a fixture's answer objects: the one of a whole
// answer, or each data chunk of a stream.
func fixtureAnswers(t *testing.T, engine, name string) []map[string]any {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join("testdata", engine, name+".sse")); err == nil {
		var out []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || d == "[DONE]" {
				continue
			}
			var o map[string]any
			if err := json.Unmarshal([]byte(d), &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, o)
		}
		return out
	}
	return []map[string]any{readFixture(t, engine, name+".response.json")}
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

func get(o map[string]any, path ...any) any {
	var cur any = o
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := cur.(map[string]any)
			cur = m[k]
		case int:
			a, _ := cur.([]any)
			if k >= len(a) {
				return nil
			}
			cur = a[k]
		}
	}
	return cur
}

// vllmExpected are the ids a vLLM fixture's answer carries: the prompt's
// and the completion's, joined over a stream's chunks.
func vllmExpected(t *testing.T, name string) (prompt, ids []int32) {
	for _, a := range fixtureAnswers(t, "vllm", name) {
		if p := get(a, "prompt_token_ids"); p != nil && prompt == nil {
			prompt = ints(p)
		}
		if p := get(a, "choices", 0, "prompt_token_ids"); p != nil && prompt == nil {
			prompt = ints(p)
		}
		ids = append(ids, ints(get(a, "choices", 0, "token_ids"))...)
	}
	return prompt, ids
}

func TestVLLMFixtures(t *testing.T) {
	fe, engURL := startFixtureEngine(t, "vllm", "")
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: led.url})
	const run = "proxy-vllm"
	routes := map[string]string{"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/inference/v1/generate"}
	for _, name := range []string{"chat", "chat_stream", "completions", "completions_stream", "generate", "generate_stream"} {
		route := routes[strings.TrimSuffix(name, "_stream")]
		req := readFixture(t, "vllm", name+".request.json")
		// The client asks for neither ids nor log-probs: the proxy adds
		// them upstream and takes them out of what the client gets.
		delete(req, "return_token_ids")
		delete(req, "logprobs")
		delete(req, "top_logprobs")
		url := rec.url + "/r/" + run + "/a/" + name + route
		n := len(fe.bodies)
		var got []byte
		if strings.HasSuffix(name, "_stream") {
			got = []byte(strings.Join(readStream(t, url, req, "X-Fixture", name), "\n"))
		} else {
			code, body := postJSON(t, url, req, "X-Fixture", name)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", name, code, body)
			}
			got = body
		}
		sent := fe.sent(n)
		if route != "/inference/v1/generate" && sent["return_token_ids"] != true {
			t.Errorf("%s: the engine was not asked for return_token_ids: %v", name, sent)
		}
		for _, leak := range []string{`"token_ids"`, `"prompt_token_ids"`, `"token_logprobs"`, `"logprob"`} {
			if route != "/inference/v1/generate" && bytes.Contains(got, []byte(leak)) {
				t.Errorf("%s: the client got %s it did not ask for", name, leak)
			}
		}
	}
	for _, h := range fe.headers {
		if h.Get(proxy.HeaderRun) != "" || h.Get(proxy.HeaderAttempt) != "" {
			t.Errorf("the engine was sent the proxy's identity headers: %v", h)
		}
	}
	rec.waitDelivered(t)
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	if len(turns) != 6 {
		t.Fatalf("%d turns in the ledger, want 6", len(turns))
	}
	for _, tg := range turns {
		prompt, ids := vllmExpected(t, tg.Attempt)
		wantFrom, wantPrompt := "engine", "engine"
		req := readFixture(t, "vllm", tg.Attempt+".request.json")
		switch {
		case strings.HasPrefix(tg.Attempt, "generate"):
			wantFrom, wantPrompt = "native", "client"
			prompt = ints(req["token_ids"])
		case req["prompt"] != nil:
			if _, isIDs := req["prompt"].([]any); isIDs {
				wantPrompt = "client" // token-in: the client's ids are the prompt
			}
		}
		if !slices.Equal(tg.TokenIDs, ids) || tg.IDsFrom != wantFrom {
			t.Errorf("%s: ids %v from %q, want %v from %s", tg.Attempt, tg.TokenIDs, tg.IDsFrom, ids, wantFrom)
		}
		if len(tg.Logprobs) != len(ids) {
			t.Errorf("%s: %d log-probs for %d ids", tg.Attempt, len(tg.Logprobs), len(ids))
		}
		if !slices.Equal(tg.ObservationTokenIDs, prompt) || tg.PromptIDsFrom != wantPrompt {
			t.Errorf("%s: prompt %v from %q, want %v from %s", tg.Attempt, tg.ObservationTokenIDs, tg.PromptIDsFrom, prompt, wantPrompt)
		}
		if len(tg.Tags) > 0 {
			t.Errorf("%s: tags %v", tg.Attempt, tg.Tags)
		}
	}
}

// TestVLLMToolCalls: the assistant's tool call waits for its output in the
// attempt's next request, and becomes a tool.called fact with it.
func TestVLLMToolCalls(t *testing.T) {
	_, engURL := startFixtureEngine(t, "vllm", "")
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: led.url})
	const run = "proxy-tools"
	url := rec.url + "/r/" + run + "/a/att/v1/chat/completions"
	req := readFixture(t, "vllm", "chat_tool_call.request.json")
	code, body := postJSON(t, url, req, "X-Fixture", "chat_tool_call")
	if code != http.StatusOK {
		t.Fatalf("tool call: %d %s", code, body)
	}
	ans := readFixture(t, "vllm", "chat_tool_call.response.json")
	call, _ := get(ans, "choices", 0, "message", "tool_calls", 0).(map[string]any)
	callID, _ := call["id"].(string)
	name, _ := get(call, "function", "name").(string)
	args, _ := get(call, "function", "arguments").(string)
	msgs, _ := req["messages"].([]any)
	msgs = append(msgs,
		get(ans, "choices", 0, "message"),
		map[string]any{"role": "tool", "tool_call_id": callID, "content": "total 0\nREADME.md"})
	req["messages"] = msgs
	if code, body := postJSON(t, url, req, "X-Fixture", "chat"); code != http.StatusOK {
		t.Fatalf("after the tool: %d %s", code, body)
	}
	rec.waitDelivered(t)
	calls, _ := runFacts[*events.ToolCalled](t, led.kc, run)
	if len(calls) != 1 {
		t.Fatalf("%d tool calls in the ledger, want 1", len(calls))
	}
	tc := calls[0]
	if tc.Turn != 0 || tc.CallID != callID || tc.Tool != name || tc.Input != args || tc.Output != "total 0\nREADME.md" || tc.OutputBytes != 17 || tc.Unanswered || !tc.ExitUnknown {
		t.Errorf("tool call %+v, want turn 0 %s(%s) id %s answered with the tool message", tc, name, args, callID)
	}
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	if len(turns) != 2 || turns[0].Finish != "tool_call" {
		t.Fatalf("turns %d, first finish %q; want 2, tool_call", len(turns), turns[0].Finish)
	}
}

// TestSGLangFixtures: versions as the engine reports them, per span, and
// a weight update that aborted generation continued token-in, so the
// harness sees one answer.
func TestSGLangFixtures(t *testing.T) {
	fe, engURL := startFixtureEngine(t, "sglang", "generate_continue")
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineSGLang, Ledger: led.url})
	const run = "proxy-sglang"
	answers := map[string][]byte{}
	for _, name := range []string{"generate", "generate_stream", "generate_weight_update", "generate_abort"} {
		// The weight update and the abort answer generate's request.
		reqName := name
		if name == "generate_weight_update" || name == "generate_abort" {
			reqName = "generate"
		}
		req := readFixture(t, "sglang", reqName+".request.json")
		url := rec.url + "/r/" + run + "/a/" + name + "/generate"
		if name == "generate_stream" {
			answers[name] = []byte(strings.Join(readStream(t, url, req, "X-Fixture", name), "\n"))
			continue
		}
		code, body := postJSON(t, url, req, "X-Fixture", name)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, body)
		}
		answers[name] = body
	}
	if bytes.Contains(answers["generate_abort"], []byte(`"abort"`)) {
		t.Errorf("the harness saw the abort: %s", answers["generate_abort"])
	}
	rec.waitDelivered(t)
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	by := map[string]*events.TurnGenerated{}
	for _, tg := range turns {
		by[tg.Attempt] = tg
	}
	outputIDs := func(name string) []int32 {
		as := fixtureAnswers(t, "sglang", name)
		var ids []int32
		for _, e := range get(as[len(as)-1], "meta_info", "output_token_logprobs").([]any) {
			f, _ := e.([]any)[1].(float64)
			ids = append(ids, int32(f))
		}
		return ids
	}
	for _, name := range []string{"generate", "generate_stream", "generate_weight_update"} {
		tg := by[name]
		if tg == nil {
			t.Fatalf("%s: no turn", name)
		}
		if want := outputIDs(name); !slices.Equal(tg.TokenIDs, want) || len(tg.Tags) > 0 {
			t.Errorf("%s: ids %v tags %v, want %v untagged", name, tg.TokenIDs, tg.Tags, want)
		}
		for _, sg := range tg.VersionSegments {
			if sg.Known != events.KnownEngine {
				t.Errorf("%s: segment %+v not known from the engine", name, sg)
			}
		}
	}
	if n := len(by["generate_weight_update"].VersionSegments); n != 2 {
		t.Errorf("weight update: %d segments %+v, want 2", n, by["generate_weight_update"].VersionSegments)
	}
	ab := by["generate_abort"]
	want := append(outputIDs("generate_abort"), outputIDs("generate_continue")...)
	if !slices.Equal(ab.TokenIDs, want) || !slices.Equal(ab.Tags, []string{"continued"}) || ab.Finish == "abort" {
		t.Errorf("aborted turn: ids %v tags %v finish %s, want %v continued", ab.TokenIDs, ab.Tags, ab.Finish, want)
	}
	if len(ab.VersionSegments) != 2 || ab.VersionSegments[1].Start != int64(len(outputIDs("generate_abort"))) {
		t.Errorf("aborted turn: segments %+v, want a second one where the continuation began", ab.VersionSegments)
	}
	cont := fe.sent(len(fe.bodies) - 1)
	if in := ints(cont["input_ids"]); len(in) == 0 {
		t.Errorf("the continuation was not token-in: %v", cont)
	}
}
