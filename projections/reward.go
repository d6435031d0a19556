package projections

import (
	"math"

	"github.com/rolloutledger/rolloutledger/events"
)

// Rewards (docs/design.md §6.2–§6.5, rules 2–5). Every function here takes the group's
// included attempts ordered by attempt id and sums in that order, so the
// arrival order of facts cannot change a bit of any value.

// zeroSignalStd is the population standard deviation of scores at or below
// which a group carries no signal (rule 3).
const zeroSignalStd = 1e-6

// advantageEpsilon keeps grpo_std finite for a group of equal rewards.
const advantageEpsilon = 1e-6

// scored is an included attempt's reward arithmetic.
type scored struct {
	score, bonus, reward, advantage float64
	// tokens is L: the attempt's total completion tokens.
	tokens int64
	passed bool
}

// score is rule 2: 1 for a pass, else capped partial credit, computed as
// (cap × passed) / total.
func score(passed bool, testsPassed, testsTotal int64, cfg events.Config) float64 {
	if passed {
		return 1
	}
	if testsTotal <= 0 {
		return 0
	}
	return cfg.PartialCreditCap * float64(testsPassed) / float64(testsTotal)
}

// meanStd is the mean and population standard deviation of xs, summed in
// order.
func meanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean = sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(xs)))
}

// zeroSignal is rule 3 over the groups' scores.
func zeroSignal(atts []scored) bool {
	scores := make([]float64, len(atts))
	for i := range atts {
		scores[i] = atts[i].score
	}
	_, std := meanStd(scores)
	return std <= zeroSignalStd
}

// shape is rule 4: the efficiency bonus among passed attempts, and the
// reward r = s + bonus of every attempt.
func shape(atts []scored, cfg events.Config) {
	var lmin, lmax int64
	passed := 0
	for i := range atts {
		if !atts[i].passed {
			continue
		}
		l := atts[i].tokens
		if passed == 0 || l < lmin {
			lmin = l
		}
		if passed == 0 || l > lmax {
			lmax = l
		}
		passed++
	}
	for i := range atts {
		a := &atts[i]
		a.bonus = 0
		if a.passed && passed >= 2 && lmax > lmin {
			a.bonus = cfg.EfficiencyWeight * (0.5 - float64(a.tokens-lmin)/float64(lmax-lmin))
		}
		a.reward = a.score + a.bonus
	}
}

// advantages is rule 5 by the configured estimator.
func advantages(atts []scored, estimator string) {
	rewards := make([]float64, len(atts))
	for i := range atts {
		rewards[i] = atts[i].reward
	}
	mean, std := meanStd(rewards)
	n := float64(len(atts))
	for i := range atts {
		r := rewards[i]
		switch estimator {
		case events.AdvantageGRPOStd:
			atts[i].advantage = (r - mean) / (std + advantageEpsilon)
		case events.AdvantageRLOO:
			if len(atts) < 2 {
				atts[i].advantage = 0
				continue
			}
			atts[i].advantage = r - othersSum(rewards, i)/(n-1)
		default: // events.AdvantageGRPO
			atts[i].advantage = r - mean
		}
	}
}

// othersSum is the sum of xs without xs[skip], in order: the mean of the
// others is an ordered sum like every other sum, not the group's total less
// one reward, whose rounding would depend on the reward subtracted.
func othersSum(xs []float64, skip int) float64 {
	var sum float64
	for j, x := range xs {
		if j != skip {
			sum += x
		}
	}
	return sum
}
