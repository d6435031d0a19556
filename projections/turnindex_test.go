package projections

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// turnIndex finds a turn, or where it goes, as a binary search over the
// turns' numbers does, whether the turn comes after the last (the usual
// case it looks at first), before it, or again.
func TestTurnIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(93, 101))
	for range 2000 {
		var turns []turnMeta
		for n := range int64(r.IntN(12)) {
			if r.IntN(3) > 0 {
				turns = append(turns, turnMeta{turn: n})
			}
		}
		n := int64(r.IntN(14)) - 1
		wantI, wantFound := slices.BinarySearchFunc(turns, n, func(t turnMeta, n int64) int { return int(t.turn - n) })
		i, found := turnIndex(turns, n)
		if i != wantI || found != wantFound {
			t.Fatalf("turn %d among %v: got %d %v, want %d %v", n, turns, i, found, wantI, wantFound)
		}
	}
}
