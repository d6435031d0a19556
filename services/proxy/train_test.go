package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// schedule posts facts as a scheduler and verifier would.
func schedule(t *testing.T, ledgerURL, run string, facts ...events.Fact) {
	t.Helper()
	scheduleWith(t, ledgerURL, "", run, facts...)
}

// scheduleWith is schedule with a ledger token ("" for none).
func scheduleWith(t *testing.T, ledgerURL, token, run string, facts ...events.Fact) {
	t.Helper()
	ledgertest.Post(t, ledgerURL, token, run, "scheduler", facts...)
}

func ptr[T any](v T) *T { return &v }

// TestProxyTurnsTrain is the whole path: a scheduler registers a group of
// two attempts through the ledger's HTTP ingest, each attempt talks to a
// real engine through the proxy for two turns, the verifier scores them,
// and the sealed batch's samples hold every token of each attempt's
// sequence from its first prompt token, loss-masked on the prompt and
// observation tokens, with the engine's log-probs on the completions.
func TestProxyTurnsTrain(t *testing.T) {
	eng := testenv.StartSmolLM2(t)
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{eng.URL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url})
	const run = "proxy-train"
	schedule(t, led.url, run,
		&events.RunStarted{Config: events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1), EnforceAdmission: ptr(false)}, Model: "tiny", Harness: "proxy-test"},
		&events.TaskRegistered{Task: "t-1", Source: "test", Kind: "agentic", Tier: 1, Gates: []events.Gate{}},
		&events.GroupStarted{Group: "g-1", Task: "t-1", Size: 2, Purpose: "train"},
		&events.AttemptStarted{Attempt: "a-1", Group: "g-1", Task: "t-1", Engine: "llama", VM: "vm-1"},
		&events.AttemptStarted{Attempt: "a-2", Group: "g-1", Task: "t-1", Engine: "llama", VM: "vm-2"},
	)
	first := map[string][]int32{}
	for _, att := range []string{"a-1", "a-2"} {
		base := fmt.Sprintf("%s/r/%s/a/%s/v1/completions", rec.url, run, att)
		// Token-in completions: the prompt's ids are the client's, and the
		// second prompt extends the first turn's whole sequence.
		var tok struct{ Tokens []int32 }
		engineCall(t, eng.URL, "/tokenize", map[string]any{"content": "<|im_start|>user\nCount to five.<|im_end|>\n<|im_start|>assistant\n", "add_special": true, "parse_special": true}, &tok)
		prompt := tok.Tokens
		first[att] = slices.Clone(prompt)
		for turn := range 2 {
			code, raw := postJSON(t, base, map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0.7, "seed": 1})
			if code != http.StatusOK {
				t.Fatalf("%s turn %d: %d %s", att, turn, code, raw)
			}
			var ans struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			_ = json.Unmarshal(raw, &ans)
			_ = ans
			// The harness appends a tool's output as tokens.
			turns, _ := runFactsAfter(t, rec, led, run, att, turn)
			prompt = append(append(slices.Clone(prompt), turns.TokenIDs...), 198, 198)
		}
	}
	schedule(t, led.url, run,
		&events.AttemptFinished{Attempt: "a-1", Outcome: "submitted"},
		&events.RewardComputed{Attempt: "a-1", Passed: true, TestsPassed: 3, TestsTotal: 3, Verifier: "v"},
		&events.AttemptFinished{Attempt: "a-2", Outcome: "submitted"},
		&events.RewardComputed{Attempt: "a-2", Passed: false, TestsPassed: 0, TestsTotal: 3, Verifier: "v"},
	)
	// The batch is sealed once the projector has folded those facts.
	var samples []struct {
		Attempt        string    `json:"attempt"`
		TokenIDs       []int32   `json:"token_ids"`
		LossMask       []int     `json:"loss_mask"`
		RolloutLogp    []float32 `json:"rollout_logprobs"`
		PolicyVersions []int64   `json:"policy_versions"`
	}
	testenv.CheckFor(t, 3*time.Minute, "batch 1 is sealed", func() bool {
		resp, err := http.Get(led.url + "/v1/runs/" + run + "/batches/1/samples")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			samples = append(samples, struct {
				Attempt        string    `json:"attempt"`
				TokenIDs       []int32   `json:"token_ids"`
				LossMask       []int     `json:"loss_mask"`
				RolloutLogp    []float32 `json:"rollout_logprobs"`
				PolicyVersions []int64   `json:"policy_versions"`
			}{})
			if err := json.Unmarshal(sc.Bytes(), &samples[len(samples)-1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return true
	})
	// The explorer shows the proxy's turns, with their tokens.
	for _, att := range []string{"a-1", "a-2"} {
		resp, err := http.Get(led.url + "/v1/runs/" + run + "/explore/attempts/" + att)
		if err != nil {
			t.Fatal(err)
		}
		var view struct {
			Turns []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"turn_list"`
		}
		err = json.NewDecoder(resp.Body).Decode(&view)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || len(view.Turns) != 2 || len(view.Turns[1].TokenIDs) == 0 {
			t.Errorf("explorer, attempt %s: %s, %v, %d turns; want its 2 turns", att, resp.Status, err, len(view.Turns))
		}
	}
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	if len(samples) != 2 {
		t.Fatalf("%d samples, want one per attempt", len(samples))
	}
	for _, s := range samples {
		var want []int32
		var mask []int
		for _, tg := range turns {
			if tg.Attempt != s.Attempt {
				continue
			}
			want = append(want, tg.ObservationTokenIDs...)
			want = append(want, tg.TokenIDs...)
			mask = append(mask, make([]int, len(tg.ObservationTokenIDs))...)
			for range tg.TokenIDs {
				mask = append(mask, 1)
			}
		}
		if !slices.Equal(want[:len(first[s.Attempt])], first[s.Attempt]) {
			t.Fatalf("%s: the ledger's turns do not start at the first prompt token: %v", s.Attempt, want[:4])
		}
		if !slices.Equal(s.TokenIDs, want) {
			t.Errorf("%s: sample ids %v, want the whole sequence %v", s.Attempt, s.TokenIDs, want)
		}
		if !slices.Equal(s.LossMask, mask) {
			t.Errorf("%s: loss mask %v, want %v", s.Attempt, s.LossMask, mask)
		}
	}
}

// runFactsAfter waits until the proxy delivered an attempt's turn and
// returns it.
func runFactsAfter(t *testing.T, rec *recorder, led *ledger, run, att string, turn int) (*events.TurnGenerated, error) {
	t.Helper()
	rec.waitDelivered(t)
	turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
	for _, tg := range turns {
		if tg.Attempt == att && tg.Turn == turn {
			if len(tg.Tags) > 0 {
				t.Fatalf("%s turn %d: tags %v", att, turn, tg.Tags)
			}
			return tg, nil
		}
	}
	t.Fatalf("%s turn %d is not in the ledger", att, turn)
	return nil, nil
}
