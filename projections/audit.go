package projections

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rolloutledger/rolloutledger/events"
)

// Audit findings about the trainer and about turn sequences (docs/design.md §8.1).

// gradientApplied checks the digest the trainer says it trained on against
// the batch the fold sealed.
func (c *applyCtx) gradientApplied(d *events.GradientApplied) error {
	if d.Batch < 1 {
		return c.finding(Finding{Kind: FindingUnknownBatch, Event: c.ev.ID, Type: c.ev.Type, Got: d.BatchDigest,
			Detail: fmt.Sprintf("gradient step %d names batch %d, which does not exist", d.Step, d.Batch)})
	}
	k := uint64(d.Batch)
	want, ok, err := c.s.Get(sealedKey(k))
	if err != nil {
		return err
	}
	if !ok {
		return c.finding(Finding{Kind: FindingUnknownBatch, Event: c.ev.ID, Type: c.ev.Type, Batch: k, Got: d.BatchDigest,
			Detail: fmt.Sprintf("gradient step %d trained batch %d, which was not sealed", d.Step, k)})
	}
	if string(want) != d.BatchDigest {
		return c.finding(Finding{Kind: FindingBatchDigestMismatch, Event: c.ev.ID, Type: c.ev.Type, Batch: k, Want: string(want), Got: d.BatchDigest,
			Detail: fmt.Sprintf("gradient step %d reports a digest for batch %d other than the sealed one", d.Step, k)})
	}
	return nil
}

// maxListedTurns bounds the turn indices a finding lists.
const maxListedTurns = 64

// checkTurns reports, for an included attempt of a completed group, gaps in
// its turn indices (which start at 0) and turns whose first policy version
// is below a version of an earlier turn.
func (c *applyCtx) checkTurns(group string, m *member) error {
	turns := m.a.turns
	if len(turns) == 0 {
		return nil
	}
	// Turn indices come from producers: count the missing ones, list only
	// the first few.
	var missing []int64
	lacking := int64(0)
	next := int64(0)
	for _, t := range turns {
		if t.turn > next {
			lacking += t.turn - next
			for ; next < t.turn && len(missing) < maxListedTurns; next++ {
				missing = append(missing, next)
			}
		}
		next = t.turn + 1
	}
	if lacking > 0 {
		if err := c.finding(Finding{Kind: FindingTurnGap, Group: group, Attempt: m.id, Turns: missing,
			Detail: fmt.Sprintf("attempt %s has turns up to %d but lacks %d of them: %s", m.id, turns[len(turns)-1].turn, lacking, listTurns(missing))}); err != nil {
			return err
		}
	}
	// A turn's segments ascend (the catalogue refuses others), so a jump
	// back is a turn starting below the highest version before it: the
	// last segment's of an earlier turn.
	var jumps []int64
	high := turns[0].lastVersion()
	for _, t := range turns[1:] {
		if t.version < high && len(jumps) < maxListedTurns {
			jumps = append(jumps, t.turn)
		}
		high = max(high, t.lastVersion())
	}
	if len(jumps) > 0 {
		return c.finding(Finding{Kind: FindingVersionJump, Group: group, Attempt: m.id, Turns: jumps,
			Detail: fmt.Sprintf("attempt %s went back to an older policy version at %s", m.id, listTurns(jumps))})
	}
	return nil
}

func listTurns(ts []int64) string {
	var b strings.Builder
	if len(ts) == 1 {
		b.WriteString("turn ")
	} else {
		b.WriteString("turns ")
	}
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 && len(ts) > 9 {
			fmt.Fprintf(&b, "and %d more", len(ts)-8)
			break
		}
		b.WriteString(strconv.FormatInt(t, 10))
	}
	return b.String()
}
