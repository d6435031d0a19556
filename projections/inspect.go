package projections

import "github.com/rolloutledger/rolloutledger/events"

// GroupCompleted reports whether the fold whose state s holds has
// completed group (used it, dropped it, or counted it as probes). Checks
// that watch a fold from outside read it after each record to find the
// facts that completed groups (docs/design.md §5.3, §14.9).
func GroupCompleted(s Store, group string) (bool, error) {
	b, ok, err := s.Get(groupKey(group))
	if err != nil || !ok {
		return false, err
	}
	g, err := decodeGroup(b)
	if err != nil {
		return false, err
	}
	return g.done, nil
}

// CausalInversions counts the facts of an order that come before their
// cause: a reward before its attempt.started, an attempt.started before its
// group.started. Checks that reorder a run say with it how far an order
// strayed from the causal one (docs/design.md §5.3, §14.9).
func CausalInversions(evs []events.Event) int {
	seen := map[string]bool{}
	n := 0
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case *events.GroupStarted:
			seen["g\x00"+d.Group] = true
		case *events.AttemptStarted:
			seen["a\x00"+d.Attempt] = true
			if !seen["g\x00"+d.Group] {
				n++
			}
		case *events.RewardComputed:
			if !seen["a\x00"+d.Attempt] {
				n++
			}
		}
	}
	return n
}
