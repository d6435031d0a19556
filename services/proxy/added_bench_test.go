package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/services/proxy"
)

// BenchmarkAddedTokenIn is the proxy's own added latency for a whole
// token-in /v1/completions turn, with no engine time in it: a stand-in
// answers the recorded llama.cpp answer at once, so what the proxy adds
// (reading and rewriting the request, the upstream hop, reading and
// stripping the answer, building the turn's facts, the synced spool commit)
// is all there is to measure. The spool is in the test's temporary
// directory, on its disk; the ledger is the in-process stack on real
// Kafka, delivering in the background as in production. `rolloutledger
// bench --only proxy` measures the same against a real llama-server.
//
//	go test -run '^$' -bench AddedTokenIn -benchtime 2000x ./services/proxy/
func BenchmarkAddedTokenIn(b *testing.B) {
	// The recorded 12-token answer, and one of a real agent turn's median
	// length (380 tokens), where the proxy's per-token work shows.
	b.Run("tokens=12", func(b *testing.B) { benchAdded(b, nil) })
	b.Run("tokens=380", func(b *testing.B) { benchAdded(b, proxy.LlamaAnswer(380)) })
}

func benchAdded(b *testing.B, answer []byte) {
	fe, engURL := startFixtureEngine(b, "llamacpp", "completions")
	fe.answer = answer
	led := startLedger(b)
	rec := startProxy(b, proxy.Options{Upstreams: []string{engURL}, Engine: proxy.EngineLlamaCPP, Ledger: led.url})
	// The fixture's prompt as the five ids its answer counts.
	body := []byte(`{"model":"smollm2","prompt":[504,3575,282,4649,314],"max_tokens":12,"temperature":0,"seed":42}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %s", url, resp.Status)
		}
		return time.Since(t0)
	}
	// Warm both connections.
	post(engURL + "/v1/completions")
	post(rec.url + "/r/bench-added/a/warm/v1/completions")
	var straight, through []time.Duration
	b.ResetTimer()
	for i := range b.N {
		// Alternate the order; a new attempt every 16 turns.
		via := fmt.Sprintf("%s/r/bench-added/a/att-%d/v1/completions", rec.url, i/16)
		if i%2 == 0 {
			straight = append(straight, post(engURL+"/v1/completions"))
			through = append(through, post(via))
		} else {
			through = append(through, post(via))
			straight = append(straight, post(engURL+"/v1/completions"))
		}
	}
	b.StopTimer()
	p := func(xs []time.Duration, q float64) float64 {
		slices.Sort(xs)
		return float64(xs[int(q*float64(len(xs)-1))].Microseconds())
	}
	b.ReportMetric(p(through, 0.5)-p(straight, 0.5), "added-µs-p50")
	b.ReportMetric(p(through, 0.99)-p(straight, 0.99), "added-µs-p99")
	b.ReportMetric(p(straight, 0.5), "straight-µs-p50")
	rec.waitDelivered(b)
}
