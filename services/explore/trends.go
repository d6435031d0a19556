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

// trend is what a batch adds to the run's charts beyond the audit's
// figures: its attempts' rewards and the staleness of the tokens it
// trains. It is worked out once, when the batch is sealed: the batch's
// turns are in the model by then (a decision is read after its facts).
type trend struct {
	meanReward       *float64
	reward           *Spread
	trainedStaleness []projections.Count
}

func (m *Model) trendOf(b *batch) trend {
	var tr trend
	var rewards []float64
	tokens := map[int64]int64{}
	for _, bg := range b.Groups {
		for _, ba := range bg.Attempts {
			rewards = append(rewards, ba.Reward)
			a := m.attempts[ba.Attempt]
			for _, bt := range ba.Turns {
				n := int64(0)
				if a != nil {
					if t := a.find(int(bt.Turn)); t != nil {
						n = t.CompletionTokens
					}
				}
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
						tokens[s.Staleness] += end - s.Start
					}
				}
			}
		}
	}
	if len(rewards) > 0 {
		slices.Sort(rewards)
		sum := 0.0
		for _, r := range rewards {
			sum += r
		}
		mean := sum / float64(len(rewards))
		q := func(p float64) float64 { return rewards[int(p*float64(len(rewards)-1)+0.5)] }
		tr.meanReward = &mean
		tr.reward = &Spread{Min: rewards[0], Q1: q(0.25), Median: q(0.5), Q3: q(0.75), Max: rewards[len(rewards)-1]}
	}
	tr.trainedStaleness = []projections.Count{}
	for s, n := range tokens {
		tr.trainedStaleness = append(tr.trainedStaleness, projections.Count{Value: s, N: int(n)})
	}
	slices.SortFunc(tr.trainedStaleness, func(x, y projections.Count) int { return cmp.Compare(x.Value, y.Value) })
	return tr
}

// step is the run view's step st: the audit's figures, the funnel at its
// watermark, and the batch's trend.
func (m *Model) step(st projections.StepAudit) Step {
	s := Step{StepAudit: st, Funnel: m.funnelAt(st.Fact), TrainedStaleness: []projections.Count{}}
	if st.Step >= 1 && st.Step <= uint64(len(m.batches)) {
		if b := m.batches[st.Step-1]; b != nil {
			s.MeanReward, s.Reward, s.TrainedStaleness = b.trend.meanReward, b.trend.reward, b.trend.trainedStaleness
		}
	}
	if g, ok := m.gradients[int64(st.Step)]; ok {
		gn := g.GradNorm
		s.GradNorm = &gn
	}
	return s
}

// find is the attempt's turn n, nil when no fact named it.
func (a *attempt) find(n int) *turn {
	i, ok := slices.BinarySearchFunc(a.turns, n, func(t *turn, n int) int { return cmp.Compare(t.Turn, n) })
	if !ok {
		return nil
	}
	return a.turns[i]
}
