package events_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
)

var (
	benchOnce    sync.Once
	benchRecords map[string][][]byte
)

// benchFacts is a simulated run's canonical records: one without inline
// tokens (the common case) and one whose turns carry token ids and
// logprobs.
func benchFacts(b *testing.B) map[string][][]byte {
	benchOnce.Do(func() {
		benchRecords = map[string][][]byte{}
		for name, o := range map[string]simulate.Options{
			"no-tokens": {Seed: 42, Tasks: 24, Steps: 4, BatchGroups: 4, MaxTurns: 80},
			"tokens":    {Seed: 43, Tasks: 8, Steps: 2, BatchGroups: 2, MaxTurns: 20, Tokens: true},
		} {
			plan, err := simulate.Generate(o, "bench-"+name)
			if err != nil {
				b.Fatal(err)
			}
			values, err := events.EncodeBatch(plan.All())
			if err != nil {
				b.Fatal(err)
			}
			benchRecords[name] = values
		}
	})
	return benchRecords
}

// BenchmarkDecode is the decoder over a simulated run's records, the
// ledger's hottest function: ingest, the projector, the sink and replay
// decode every fact.
//
//	go test -run='^$' -bench=Decode -benchmem ./events/
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"no-tokens", "tokens"} {
		b.Run(name, func(b *testing.B) {
			recs := benchFacts(b)[name]
			var bytes int64
			for _, r := range recs {
				bytes += int64(len(r))
			}
			b.SetBytes(bytes / int64(len(recs)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := events.Decode(recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "facts/s")
		})
	}
}

// BenchmarkEncode is the canonical encoding of the same records' events.
func BenchmarkEncode(b *testing.B) {
	recs := benchFacts(b)["no-tokens"]
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		ev, err := events.Decode(r)
		if err != nil {
			b.Fatal(err)
		}
		evs[i] = ev
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := events.Encode(evs[i%len(evs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "facts/s")
}

// benchBodies puts records 64 at a time in JSON arrays, request bodies as
// ingest takes them, and counts their bytes.
func benchBodies(recs [][]byte) (bodies [][]byte, bytes int64) {
	for lo := 0; lo+64 <= len(recs); lo += 64 {
		body := []byte("[")
		for i, r := range recs[lo : lo+64] {
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, r...)
		}
		body = append(body, ']')
		bodies = append(bodies, body)
		bytes += int64(len(body))
	}
	return bodies, bytes
}

// BenchmarkDecodeBatch is what ingest does with a request body: 64 events
// in one JSON array.
func BenchmarkDecodeBatch(b *testing.B) {
	bodies, _ := benchBodies(benchFacts(b)["no-tokens"])
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := events.DecodeBatch(bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i*64)/b.Elapsed().Seconds(), "facts/s")
}

// BenchmarkCanonicalBatch is ingest's reading of a request body: 64
// events in an array, decoded, checked and encoded canonically, with the
// memory kept from one body to the next as ingest keeps it.
//
//	go test -run='^$' -bench=CanonicalBatch -benchmem ./events/
func BenchmarkCanonicalBatch(b *testing.B) {
	for _, name := range []string{"no-tokens", "tokens"} {
		b.Run(name, func(b *testing.B) {
			bodies, bytes := benchBodies(benchFacts(b)[name])
			b.SetBytes(bytes / int64(len(bodies)))
			b.ReportAllocs()
			var c events.Canonicalizer
			i := 0
			for b.Loop() {
				if _, _, err := c.Batch(bodies[i%len(bodies)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(i*64)/b.Elapsed().Seconds(), "facts/s")
		})
	}
}

// tokenTurn is the record, at version v, of a turn with 2,048 completion
// tokens and 512 observation tokens: ids drawn from a 151,936-token
// vocabulary, log-probs from an exponential tail, as a model samples them.
func tokenTurn(b *testing.B, v int) []byte {
	r := rand.New(rand.NewPCG(2048, 512))
	ids, lps, obs := make([]int32, 2048), make([]float32, 2048), make([]int32, 512)
	for i := range ids {
		ids[i], lps[i] = r.Int32N(151936), -float32(r.ExpFloat64()*0.7)
	}
	for i := range obs {
		obs[i] = r.Int32N(151936)
	}
	ev := events.New("bench", "engine-1", time.Date(2026, 11, 29, 19, 10, 0, 0, time.UTC), &events.TurnGenerated{
		Attempt: "g-17/a-3", Turn: 12, PromptTokens: 30000, CompletionTokens: 2048, CachedTokens: 28000,
		VersionSegments: events.SingleVersion(41), ObservationTokenIDs: obs, TokenIDs: ids, Logprobs: lps,
		Finish: events.FinishToolCall, LatencyMS: 9100,
	})
	ev.V = v
	rec, err := events.Encode(ev)
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// BenchmarkTurn2K compares the two versions of a token-carrying turn:
// JSON number arrays (v1) and base64 of little-endian values (v2). Decode
// is what the projector, the sink and replay do with every record; Encode
// writes a record from values (a producer); Canonical is ingest's
// DecodeBatch and EncodeBatch of the record, in one pass.
//
//	go test -run='^$' -bench=Turn2K -benchmem ./events/
func BenchmarkTurn2K(b *testing.B) {
	for _, v := range []int{1, 2} {
		rec := tokenTurn(b, v)
		ev, err := events.Decode(rec)
		if err != nil {
			b.Fatal(err)
		}
		perToken := func(b *testing.B) {
			b.ReportMetric(float64(len(rec)), "record-B")
			b.ReportMetric(float64(len(rec))/(2048+512), "B/token")
		}
		b.Run(fmt.Sprintf("v%d/decode", v), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := events.Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
			perToken(b)
		})
		b.Run(fmt.Sprintf("v%d/encode", v), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := events.Encode(ev); err != nil {
					b.Fatal(err)
				}
			}
			perToken(b)
		})
		b.Run(fmt.Sprintf("v%d/canonical", v), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := events.CanonicalBatch(rec); err != nil {
					b.Fatal(err)
				}
			}
			perToken(b)
		})
	}
}
