package events_test

import (
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/simulate"
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

// BenchmarkDecodeBatch is what ingest does with a request body: 64 events
// in one JSON array.
func BenchmarkDecodeBatch(b *testing.B) {
	recs := benchFacts(b)["no-tokens"]
	var bodies [][]byte
	for lo := 0; lo+64 <= len(recs); lo += 64 {
		body := []byte("[")
		for i, r := range recs[lo : lo+64] {
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, r...)
		}
		bodies = append(bodies, append(body, ']'))
	}
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
