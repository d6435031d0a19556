package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// templateGate is a llama.cpp stand-in answering the recorded chat,
// /apply-template and /tokenize, whose /apply-template waits while the
// gate is shut (or until the caller gives up).
type templateGate struct {
	mu      sync.Mutex
	open    chan struct{}
	asked   atomic.Int64 // /apply-template requests that arrived
	answers map[string][]byte
}

func startTemplateGate(t *testing.T) (*templateGate, string) {
	t.Helper()
	g := &templateGate{open: make(chan struct{}), answers: map[string][]byte{}}
	for route, file := range map[string]string{
		"/v1/chat/completions": "chat.response.json",
		"/apply-template":      "apply_template.response.json",
		"/tokenize":            "tokenize_chat_prompt.response.json",
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "llamacpp", file))
		if err != nil {
			t.Fatal(err)
		}
		g.answers[route] = b
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := g.answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == "/apply-template" {
			g.asked.Add(1)
			g.mu.Lock()
			open := g.open
			g.mu.Unlock()
			select {
			case <-open:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(hs.Close)
	return g, hs.URL
}

func (g *templateGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// TestHeldTurnSurvivesClose: a whole llama.cpp chat answer reaches the
// client before the engine's template has answered for its prompt ids
// (the turn is held, synced, in the spool); a proxy closed before the ids
// come leaves it held, and the next proxy on the same spool builds it,
// with its prompt ids, before the attempt's next turn. Each turn reaches
// the ledger once, numbered in the order the answers were given.
func TestHeldTurnSurvivesClose(t *testing.T) {
	led := startLedger(t)
	gate, engURL := startTemplateGate(t)
	dir := t.TempDir()
	const run, attempt = "held-turns", "g-0/a-0"
	opts := proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url, SpoolDir: dir}
	first, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	first.Start(context.Background())
	hs := httptest.NewServer(first.Handler())
	msgs := []map[string]any{
		{"role": "system", "content": "You are a helpful assistant."},
		{"role": "user", "content": "What is the capital of France? Answer in one short sentence."},
	}
	chat := func(url string) {
		t.Helper()
		status, body := postJSON(t, url+"/r/"+run+"/a/g-0%2Fa-0/v1/chat/completions", map[string]any{"model": "smollm2", "messages": msgs, "max_tokens": 24})
		if status != http.StatusOK {
			t.Fatalf("chat: %d %s", status, body)
		}
	}
	// The answer comes back while /apply-template is still shut.
	chat(hs.URL)
	if waiting, _ := first.Pending(); waiting != 1 {
		t.Fatalf("after the answer, with the template shut: %d waiting in the spool, want the one held turn", waiting)
	}
	testenv.CheckFor(t, time.Minute, "the held turn asks the engine's template", func() bool { return gate.asked.Load() == 1 })
	hs.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	gate.release()
	second := startProxy(t, opts)
	// The probe would come next in `rolloutledger proxy`; the held turn's
	// facts wait for it (the engine's version goes into them).
	_ = second.s.Probe(context.Background())
	if waiting, _ := second.s.Pending(); waiting == 0 {
		t.Fatal("the held turn is gone from the spool after a restart, with no facts for it")
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": "The capital of France is Paris."},
		map[string]any{"role": "user", "content": "And of Italy?"})
	chat(second.url)
	second.waitDelivered(t)

	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	if len(turns) != 2 {
		t.Fatalf("%d turns in the ledger, want 2 (the held one once, then the next)", len(turns))
	}
	for i, tg := range turns {
		if tg.Attempt != attempt || tg.Turn != i {
			t.Fatalf("ledger turn %d is attempt %q turn %d, want %q turn %d", i, tg.Attempt, tg.Turn, attempt, i)
		}
		if tg.PromptIDsFrom != "tokenize" || slices.Contains(tg.Tags, "no_prompt_ids") || tg.PromptTokens != 33 {
			t.Fatalf("turn %d: prompt ids from %q, %d prompt tokens, tags %v; want the engine's tokenizer's 33", i, tg.PromptIDsFrom, tg.PromptTokens, tg.Tags)
		}
		if len(tg.TokenIDs) != 8 {
			t.Fatalf("turn %d: %d completion ids, want the answer's 8", i, len(tg.TokenIDs))
		}
	}
	if got := wholeSequence(t, turns, 0); len(got) != 33 || got[0] != 1 {
		t.Fatalf("turn 0's prompt from the ledger: %v", got)
	}
}

// TestHeldTurnsKeepTheirOrder: an attempt's next turn, asked while the one
// before is still held, is numbered after it (its answer waits for the
// held turn's facts), and another attempt's turns do not wait at all.
func TestHeldTurnsKeepTheirOrder(t *testing.T) {
	led := startLedger(t)
	gate, engURL := startTemplateGate(t)
	const run = "held-order"
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url})
	// The stand-in answers every request alike; the seed tells the turns
	// apart in the ledger.
	body := func(seed int) map[string]any {
		return map[string]any{"model": "smollm2", "max_tokens": 24, "seed": seed, "messages": []map[string]any{
			{"role": "system", "content": "You are a helpful assistant."},
			{"role": "user", "content": "What is the capital of France? Answer in one short sentence."},
		}}
	}
	status, raw := postJSON(t, rec.url+"/r/"+run+"/a/a-1/v1/chat/completions", body(1))
	if status != http.StatusOK {
		t.Fatalf("first turn: %d %s", status, raw)
	}
	// The second answer needs the attempt, which the first holds until its
	// ids are in: it goes out once the gate opens.
	done := make(chan int, 1)
	go func() {
		status, _ := postJSON(t, rec.url+"/r/"+run+"/a/a-1/v1/chat/completions", body(2))
		done <- status
	}()
	// Another attempt is not held up by this one's held turn.
	if status, raw := postJSON(t, rec.url+"/r/"+run+"/a/a-2/v1/chat/completions", body(3)); status != http.StatusOK {
		t.Fatalf("another attempt: %d %s", status, raw)
	}
	gate.release()
	if status := <-done; status != http.StatusOK {
		t.Fatalf("second turn: %d", status)
	}
	rec.waitDelivered(t)
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	var a1 [][2]int64 // turn, seed
	for _, tg := range turns {
		if tg.Attempt == "a-1" && tg.Sampling != nil && tg.Sampling.Seed != nil {
			a1 = append(a1, [2]int64{int64(tg.Turn), *tg.Sampling.Seed})
		}
	}
	slices.SortFunc(a1, func(x, y [2]int64) int { return int(x[0] - y[0]) })
	if !slices.Equal(a1, [][2]int64{{0, 1}, {1, 2}}) || len(turns) != 3 {
		t.Fatalf("a-1's turns (number, seed) %v of %d in all; want [[0 1] [1 2]] of 3", a1, len(turns))
	}
}
