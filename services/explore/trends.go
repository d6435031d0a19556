package explore

import (
	"cmp"
	"slices"

	"github.com/rolloutledger/rolloutledger/projections"
)

// Spread is a five-number summary of a step's rewards.
type Spread struct {
	Min    float64 `json:"min"`
	Q1     float64 `json:"q1"`
	Median float64 `json:"median"`
	Q3     float64 `json:"q3"`
	Max    float64 `json:"max"`
}

// trendOf is what a batch adds to the run's charts beyond the audit's
// figures: the mean and spread of its attempts' rewards and the staleness
// of the tokens it trains, given each turn's completion tokens. It is
// worked out once, when the batch is sealed: the batch's turns are folded
// by then (a decision comes after its facts).
func trendOf(m *projections.Manifest, tokens func(attempt string, turn int64) int64) (*float64, *Spread, []projections.Count) {
	var rewards []float64
	trained := map[int64]int64{}
	for _, bg := range m.Groups {
		for _, ba := range bg.Attempts {
			rewards = append(rewards, ba.Reward)
			for _, bt := range ba.Turns {
				n := tokens(ba.Attempt, bt.Turn)
				segs := bt.Segments
				if len(segs) == 0 {
					segs = []projections.TurnSegment{{Start: 0, Staleness: bt.Staleness, Trained: bt.Trained}}
				}
				for i, s := range segs {
					end := n
					if i+1 < len(segs) {
						end = segs[i+1].Start
					}
					if s.Trained && end > s.Start {
						trained[s.Staleness] += end - s.Start
					}
				}
			}
		}
	}
	var mean *float64
	var spread *Spread
	if len(rewards) > 0 {
		slices.Sort(rewards)
		sum := 0.0
		for _, r := range rewards {
			sum += r
		}
		mu := sum / float64(len(rewards))
		q := func(p float64) float64 { return rewards[int(p*float64(len(rewards)-1)+0.5)] }
		mean = &mu
		spread = &Spread{Min: rewards[0], Q1: q(0.25), Median: q(0.5), Q3: q(0.75), Max: rewards[len(rewards)-1]}
	}
	counts := []projections.Count{}
	for s, n := range trained {
		counts = append(counts, projections.Count{Value: s, N: int(n)})
	}
	slices.SortFunc(counts, func(x, y projections.Count) int { return cmp.Compare(x.Value, y.Value) })
	return mean, spread, counts
}
