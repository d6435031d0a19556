package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// An attempt idle past its retention keeps its numbering but not what
// relates its prompts to its earlier turns: back after that, its next
// prompt is recorded whole, with no parent, and the turns after it relate
// to it again. An attempt answered within the retention is untouched.
func TestIdleAttemptExpires(t *testing.T) {
	// A vLLM stand-in that answers every completion with the recorded one,
	// its prompt ids and count those of the request.
	answer := readFixture(t, "vllm", "completions.response.json")
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"HuggingFaceTB/SmolLM2-135M-Instruct","object":"model"}]}`))
			return
		case "/version":
			w.Write([]byte(`{"version":"fixture"}`))
			return
		}
		var body struct {
			Prompt []int32 `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer["choices"].([]any)[0].(map[string]any)["prompt_token_ids"] = body.Prompt
		usage := answer["usage"].(map[string]any)
		usage["prompt_tokens"], usage["total_tokens"] = len(body.Prompt), len(body.Prompt)+8
		json.NewEncoder(w).Encode(answer)
	}))
	defer eng.Close()
	engURL := eng.URL
	led := startLedger(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	rec := startProxy(t, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineVLLM, Ledger: led.url,
		AttemptRetention: time.Hour, Now: clock})
	const run = "proxy-expiry"
	_, completion := vllmExpected(t, "completions")
	req := readFixture(t, "vllm", "completions.request.json")
	prompts := [][]int32{ints(req["prompt"])}
	for range 3 {
		last := prompts[len(prompts)-1]
		prompts = append(prompts, append(append(slices.Clone(last), completion...), 198))
	}
	send := func(att string, prompt []int32) {
		t.Helper()
		req["prompt"] = prompt
		code, body := postJSON(t, rec.url+"/r/"+run+"/a/"+att+"/v1/completions", req)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", att, code, body)
		}
	}
	send("idle", prompts[0])
	send("idle", prompts[1])
	now.Add(int64(90 * time.Minute))
	send("busy", prompts[0]) // answered 30 minutes before the pass
	now.Add(int64(31 * time.Minute))
	rec.s.ExpireIdle()
	send("idle", prompts[2])
	send("idle", prompts[3])
	send("busy", prompts[1])
	rec.waitDelivered(t)

	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	byKey := map[[2]any]*events.TurnGenerated{}
	for _, tg := range turns {
		byKey[[2]any{tg.Attempt, tg.Turn}] = tg
	}
	check := func(att string, turn int, parent int, observed []int32) {
		t.Helper()
		tg := byKey[[2]any{att, turn}]
		if tg == nil {
			t.Fatalf("%s: no turn %d in the ledger (%d turns)", att, turn, len(turns))
		}
		got := -1
		if tg.Parent != nil {
			got = *tg.Parent
		}
		if got != parent || !slices.Equal(tg.ObservationTokenIDs, observed) || len(tg.Tags) > 0 {
			t.Errorf("%s turn %d: parent %d, observation %v, tags %v; want parent %d, observation %v, no tags", att, turn, got, tg.ObservationTokenIDs, tg.Tags, parent, observed)
		}
	}
	check("idle", 1, 0, []int32{198})
	check("idle", 2, -1, prompts[2]) // past the retention: the whole prompt, no parent
	check("idle", 3, 2, []int32{198})
	check("busy", 1, 0, []int32{198})
	if len(turns) != 6 {
		t.Errorf("%d turns in the ledger, want 6", len(turns))
	}
}
