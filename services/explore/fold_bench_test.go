package explore_test

import (
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// BenchmarkModelFold measures how fast the explorer's model takes facts:
// what bounds the first view of a run the server has not read yet, which
// reads the run's whole history. The facts are a generated run's, stream
// after stream (no decisions: the fold of facts is the cost).
//
//	go test ./services/explore/ -run '^$' -bench BenchmarkModelFold -benchtime 3x
func BenchmarkModelFold(b *testing.B) {
	plan, err := simulate.Generate(simulate.Options{Seed: 1, Steps: 20}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	var evs []events.Event
	for _, s := range plan.Streams {
		evs = append(evs, s.Events...)
	}
	b.ResetTimer()
	for range b.N {
		m := explore.NewModel("bench")
		for i, ev := range evs {
			m.Fact(0, int64(i), nil, ev)
		}
	}
	b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "facts/s")
	b.ReportMetric(float64(len(evs)), "facts")
}
