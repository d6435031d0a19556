package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// TestClientCutMidStream: a harness that goes away mid-stream stops the
// engine's generation, and what was generated is recorded as a turn
// marked client_cut, finish abort.
func TestClientCutMidStream(t *testing.T) {
	eng := testenv.StartTinyLlama(t)
	led := startLedger(t)
	rec := startProxy(t, proxy.Options{Upstreams: []string{eng.URL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url})
	const run = "proxy-cut"
	body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": "hello"}},
		"max_tokens": 3000, "ignore_eos": true, "stream": true, "temperature": 0})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rec.url+"/r/"+run+"/a/a1/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks := 0
	for sc.Scan() && chunks < 3 {
		if strings.HasPrefix(sc.Text(), "data: {") {
			chunks++
		}
	}
	cancel() // the harness goes away after three chunks
	resp.Body.Close()
	// The proxy notices the cut when its next write fails or the engine's
	// stream ends, then commits: wait for the turn.
	var turns []*events.TurnGenerated
	testenv.CheckFor(t, 2*time.Minute, "the cut turn in the ledger", func() bool {
		rec.waitDelivered(t)
		turns, _ = runFacts[*events.TurnGenerated](t, led.kc, run)
		return len(turns) > 0
	})
	if len(turns) != 1 {
		t.Fatalf("%d turns, want the cut one", len(turns))
	}
	tg := turns[0]
	if tg.Finish != "abort" || !slices.Contains(tg.Tags, "client_cut") || tg.CompletionTokens >= 3000 {
		t.Errorf("cut turn: finish %s tags %v, %d completion tokens; want abort, client_cut, fewer than asked", tg.Finish, tg.Tags, tg.CompletionTokens)
	}
}
