package explore_test

import (
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// BenchmarkModelFold measures how fast the explorer's records take facts
// in memory: the writer's own work per fact, which the projector adds to
// its fold, and what a bundle of an archive (or the first view of a run
// the projector has no records of) costs beside reading the facts. The
// facts are a generated run's, stream after stream (no decisions: the
// fold of facts is the cost).
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
