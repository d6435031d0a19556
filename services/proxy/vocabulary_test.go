package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// vocabularyCount reads the proxy's rolloutledger_proxy_vocabulary_total
// for an outcome (0 when absent).
func vocabularyCount(t *testing.T, proxyURL, outcome string) int {
	t.Helper()
	return metricCount(t, proxyURL, "rolloutledger_proxy_vocabulary_total", outcome)
}

// waitVocabulary waits until the proxy counts n runs of an outcome.
func waitVocabulary(t *testing.T, proxyURL, outcome string, n int) {
	t.Helper()
	testenv.CheckFor(t, 3*time.Minute, fmt.Sprintf("%d vocabulary %s", n, outcome), func() bool {
		if got := vocabularyCount(t, proxyURL, "failed"); got > 0 {
			t.Fatalf("the proxy could not fetch the engine's vocabulary (%d failures)", got)
		}
		return vocabularyCount(t, proxyURL, outcome) >= n
	})
}

// chatTurn sends one short chat turn of an attempt through the proxy.
func chatTurn(t *testing.T, proxyURL, run, attempt, content string) {
	t.Helper()
	code, raw := postJSON(t, proxyURL+"/r/"+run+"/a/"+attempt+"/v1/chat/completions",
		map[string]any{"messages": []map[string]any{{"role": "user", "content": content}}, "max_tokens": 12, "temperature": 0})
	if code != http.StatusOK {
		t.Fatalf("%s/%s: %d %s", run, attempt, code, raw)
	}
}

// assemble joins a run's vocabulary chunks into one piece per token,
// checking that they are whole: chunks 0..n-1 of one vocabulary, each
// starting where the previous ended.
func assemble(t *testing.T, chunks []*events.VocabularyRegistered) [][]byte {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatal("no vocabulary.registered in the ledger")
	}
	slices.SortFunc(chunks, func(a, b *events.VocabularyRegistered) int { return a.Chunk - b.Chunk })
	var pieces [][]byte
	for i, c := range chunks {
		if c.Chunk != i || c.Chunks != len(chunks) || int(c.First) != len(pieces) || c.Size != chunks[0].Size || c.Model != chunks[0].Model {
			t.Fatalf("chunk %d: chunk %d of %d, first %d, size %d, model %q: not the next chunk of one vocabulary", i, c.Chunk, c.Chunks, c.First, c.Size, c.Model)
		}
		start := int32(0)
		for _, end := range c.Offsets {
			pieces = append(pieces, c.Pieces[start:end])
			start = end
		}
	}
	if int64(len(pieces)) != chunks[0].Size {
		t.Fatalf("the chunks hold %d tokens of a vocabulary of %d", len(pieces), chunks[0].Size)
	}
	return pieces
}

// TestLlamaCPPVocabulary: the proxy registers the engine's vocabulary
// once per run, in the background, as vocabulary.registered chunks that
// reach the ledger (real Kafka) and decode every id the run's turns carry
// to what the engine itself decodes them to (/detokenize), byte tokens
// included; a proxy restarted on its spool does not register it again;
// --no-vocabulary registers none.
func TestLlamaCPPVocabulary(t *testing.T) {
	eng := testenv.StartSmolLM2(t)
	led := startLedger(t)
	spool := t.TempDir()
	o := proxy.Options{Upstreams: []string{eng.URL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url, SpoolDir: spool}

	// A proxy stopped by the test, then another on the same spool.
	first, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first.Start(ctx)
	hs := httptest.NewServer(first.Handler())
	chatTurn(t, hs.URL, "vocab-a", "attempt-1", "Name a colour.")
	chatTurn(t, hs.URL, "vocab-a", "attempt-2", "Name a fruit.")
	waitVocabulary(t, hs.URL, "registered", 1)
	if got := vocabularyCount(t, hs.URL, "registered") + vocabularyCount(t, hs.URL, "known"); got != 1 {
		t.Errorf("two attempts of one run: the vocabulary was looked at %d times, want once", got)
	}
	hs.Close()
	cancel()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	rec := startProxy(t, o)
	chatTurn(t, rec.url, "vocab-a", "attempt-3", "Name a tree.")
	waitVocabulary(t, rec.url, "known", 1)
	chatTurn(t, rec.url, "vocab-b", "attempt-1", "Count to three: 1, 2,")
	waitVocabulary(t, rec.url, "registered", 1)
	if got := vocabularyCount(t, rec.url, "registered"); got != 1 {
		t.Errorf("after the restart %d runs registered, want 1 (vocab-b only)", got)
	}
	off := startProxy(t, proxy.Options{Upstreams: []string{eng.URL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url, NoVocabulary: true})
	chatTurn(t, off.url, "vocab-off", "attempt-1", "Name a river.")
	rec.waitDelivered(t)
	off.waitDelivered(t)

	var models struct {
		Data []struct {
			ID   string
			Meta struct {
				NVocab int64 `json:"n_vocab"`
			}
		}
	}
	resp, err := http.Get(eng.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"vocab-a", "vocab-b"} {
		chunks, _ := runFacts[*events.VocabularyRegistered](t, led.kc, run)
		pieces := assemble(t, chunks)
		if c := chunks[0]; c.Engine != "llamacpp" || c.Model != models.Data[0].ID || c.Size != models.Data[0].Meta.NVocab || c.Chunks < 2 {
			t.Fatalf("%s: engine %q, model %q, size %d in %d chunks; want llamacpp, %q, %d in several chunks", run, c.Engine, c.Model, c.Size, c.Chunks, models.Data[0].ID, models.Data[0].Meta.NVocab)
		}
		turns, _ := runFacts[*events.TurnGenerated](t, led.kc, run)
		if len(turns) == 0 {
			t.Fatalf("%s: no turns", run)
		}
		for _, tg := range turns {
			ids := append(slices.Clone(tg.ObservationTokenIDs), tg.TokenIDs...)
			if len(tg.TokenIDs) == 0 || len(tg.ObservationTokenIDs) == 0 {
				t.Fatalf("%s %s turn %d: %d prompt and %d completion ids, want both", run, tg.Attempt, tg.Turn, len(tg.ObservationTokenIDs), len(tg.TokenIDs))
			}
			var whole []byte
			for _, id := range ids {
				p := pieces[id]
				whole = append(whole, p...)
				if utf8.Valid(p) {
					if want := detokenize(t, eng.URL, []int32{id}); string(p) != want {
						t.Errorf("%s: token %d decodes to %q with the ledger's vocabulary, %q by the engine", run, id, p, want)
					}
				}
			}
			if want := detokenize(t, eng.URL, ids); utf8.Valid(whole) && string(whole) != want {
				t.Errorf("%s %s turn %d: the ledger's vocabulary decodes its ids to %q, the engine to %q", run, tg.Attempt, tg.Turn, whole, want)
			}
		}
		// A byte token's piece is its byte: "µ" is C2 B5, two byte tokens
		// the engine decodes together.
		c2, b5 := slices.IndexFunc(pieces, func(p []byte) bool { return bytes.Equal(p, []byte{0xc2}) }), slices.IndexFunc(pieces, func(p []byte) bool { return bytes.Equal(p, []byte{0xb5}) })
		if c2 < 0 || b5 < 0 {
			t.Fatalf("%s: no byte tokens C2 and B5 in the ledger's vocabulary", run)
		}
		if got := detokenize(t, eng.URL, []int32{int32(c2), int32(b5)}); got != "µ" {
			t.Errorf("%s: the engine decodes the ledger's byte tokens %d %d as %q, want µ", run, c2, b5, got)
		}
	}
	if chunks, _ := runFacts[*events.VocabularyRegistered](t, led.kc, "vocab-off"); len(chunks) != 0 {
		t.Errorf("--no-vocabulary: %d chunks in the ledger, want none", len(chunks))
	}
}
