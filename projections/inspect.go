package projections

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
