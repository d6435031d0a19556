package projections

import (
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// RLOO's mean of the others is an ordered sum over the other attempts, by
// attempt id (docs/design.md §6.5), not the group's total less the attempt's
// own reward: for three rewards of 1.05 the total less one is
// 2.1000000000000005, the others' sum 2.1, and the advantages differ in
// their last bits.
func TestRLOOSumsTheOthersInOrder(t *testing.T) {
	atts := []scored{{reward: 1.05}, {reward: 1.05}, {reward: 1.05}, {reward: 0.125}}
	advantages(atts, events.AdvantageRLOO)
	for i, a := range atts {
		var others float64
		for j, b := range atts {
			if j != i {
				others += b.reward
			}
		}
		want := a.reward - others/3
		if a.advantage != want {
			t.Errorf("attempt %d: got advantage %v, want %v (reward − ordered sum of the others / 3)", i, a.advantage, want)
		}
	}
	// The case that tells the two apart: the total less one reward is not
	// the others' ordered sum.
	total := 1.05 + 1.05 + 1.05 + 0.125
	if others := 1.05 + 1.05 + 0.125; total-1.05 == others {
		t.Fatalf("the example no longer separates the two sums: %v", others)
	}
	one := []scored{{reward: 1}}
	advantages(one, events.AdvantageRLOO)
	if one[0].advantage != 0 {
		t.Errorf("got advantage %v for a group of one, want 0", one[0].advantage)
	}
}
