package simulate

import (
	"context"
	"testing"
)

// BenchmarkGenerate reports generated events per second for the default
// run, without and with inline tokens.
func BenchmarkGenerate(b *testing.B) {
	for _, bc := range []struct {
		name string
		o    Options
	}{
		{"plain", Options{Seed: 1}},
		{"tokens", Options{Seed: 1, Tokens: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				p, err := Generate(bc.o, "bench")
				if err != nil {
					b.Fatal(err)
				}
				n += p.Len()
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(n)/float64(b.N), "events/op")
		})
	}
}

// BenchmarkPush pushes a pre-generated plan to an in-process test ledger:
// the simulator's own cost per event (encoding, requests), decoding on the
// ledger side included.
func BenchmarkPush(b *testing.B) {
	plan := mustGenerate(b, Options{Seed: 1, Tasks: 16, Steps: 2}, "bench")
	led := newTestLedger(b, 1)
	o := Options{URL: led.serve().URL}
	n := 0
	for b.Loop() {
		res, err := Push(context.Background(), o, plan)
		if err != nil {
			b.Fatal(err)
		}
		n += res.Events
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}
