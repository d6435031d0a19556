package projections

import (
	"fmt"
	"math"
	"strconv"
)

// Sample is one line of a batch's materialized samples (NDJSON, one line
// per attempt and training segment, attempts in manifest order, segments
// ascending). Each turn of the segment, by turn index, contributes its
// observation tokens (loss mask 0, log-prob 0) and then its completion
// tokens (loss mask 1 when the turn trains, else 0, with their rollout
// log-probs); every token carries its turn's policy version. A turn without
// inline tokens contributes nothing, and a segment without tokens is still
// a line.
type Sample struct {
	Group           string    `json:"group"`
	Attempt         string    `json:"attempt"`
	Segment         int64     `json:"segment"`
	TokenIDs        []int32   `json:"token_ids"`
	LossMask        []int8    `json:"loss_mask"`
	RolloutLogprobs []float32 `json:"rollout_logprobs"`
	PolicyVersions  []int64   `json:"policy_versions"`
	Advantage       float64   `json:"advantage"`
}

// materialize builds the samples of a batch from the tokens in the Store.
// Segments of an attempt run from 0 to the segment of its last turn, so a
// compaction after a missing turn still numbers the segments after it; an
// attempt without turns is one empty segment.
func (c *applyCtx) materialize(entries []openGroup) ([]byte, error) {
	var out []byte
	var s Sample
	for _, e := range entries {
		for ai, a := range e.Group.Attempts {
			segs, pay := e.Segments[ai], e.Payload[ai]
			last := int64(0)
			if len(segs) > 0 {
				last = segs[len(segs)-1]
			}
			t := 0
			for seg := int64(0); seg <= last; seg++ {
				s = Sample{Group: e.Group.Group, Attempt: a.Attempt, Segment: seg, Advantage: a.Advantage,
					TokenIDs: s.TokenIDs[:0], LossMask: s.LossMask[:0], RolloutLogprobs: s.RolloutLogprobs[:0], PolicyVersions: s.PolicyVersions[:0]}
				for ; t < len(a.Turns) && segs[t] == seg; t++ {
					if !pay[t] {
						continue
					}
					if err := c.appendTurn(&s, a.Attempt, &a.Turns[t]); err != nil {
						return nil, err
					}
				}
				var err error
				if out, err = s.appendJSON(out); err != nil {
					return nil, err
				}
				out = append(out, '\n')
			}
		}
	}
	return out, nil
}

func (c *applyCtx) appendTurn(s *Sample, attempt string, t *BatchTurn) error {
	b, ok, err := c.s.Get(turnKey(attempt, t.Turn))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: tokens of turn %d of attempt %s missing", ErrCorruptState, t.Turn, attempt)
	}
	p, err := decodePayload(b)
	if err != nil {
		return err
	}
	for _, id := range p.observation {
		s.TokenIDs = append(s.TokenIDs, id)
		s.LossMask = append(s.LossMask, 0)
		s.RolloutLogprobs = append(s.RolloutLogprobs, 0)
		s.PolicyVersions = append(s.PolicyVersions, t.PolicyVersion)
	}
	mask := int8(0)
	if t.Trained {
		mask = 1
	}
	for i, id := range p.tokens {
		lp := float32(0)
		if i < len(p.logprobs) {
			lp = p.logprobs[i]
		}
		s.TokenIDs = append(s.TokenIDs, id)
		s.LossMask = append(s.LossMask, mask)
		s.RolloutLogprobs = append(s.RolloutLogprobs, lp)
		s.PolicyVersions = append(s.PolicyVersions, t.PolicyVersion)
	}
	return nil
}

// appendJSON appends the canonical JSON of s — byte for byte what
// encoding/json writes for it — without going through reflection, which
// dominates sealing a batch of long attempts.
func (s *Sample) appendJSON(b []byte) ([]byte, error) {
	group, err := canonicalJSON(s.Group)
	if err != nil {
		return nil, err
	}
	attempt, err := canonicalJSON(s.Attempt)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"group":`...)
	b = append(b, group...)
	b = append(b, `,"attempt":`...)
	b = append(b, attempt...)
	b = append(b, `,"segment":`...)
	b = strconv.AppendInt(b, s.Segment, 10)
	b = append(b, `,"token_ids":[`...)
	for i, v := range s.TokenIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, `],"loss_mask":[`...)
	for i, v := range s.LossMask {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, `],"rollout_logprobs":[`...)
	for i, v := range s.RolloutLogprobs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendJSONFloat(b, float64(v), 32); err != nil {
			return nil, err
		}
	}
	b = append(b, `],"policy_versions":[`...)
	for i, v := range s.PolicyVersions {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, `],"advantage":`...)
	if b, err = appendJSONFloat(b, s.Advantage, 64); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendJSONFloat writes f as encoding/json does: the shortest decimal
// that reads back as the same float of the given size, in plain notation
// unless its magnitude is below 1e-6 or at least 1e21, with exponents
// written without a leading zero (1e-7, not 1e-07).
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("projections: %v has no JSON form", f)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 {
		if bits == 64 && (a < 1e-6 || a >= 1e21) || bits == 32 && (float32(a) < 1e-6 || float32(a) >= 1e21) {
			format = 'e'
		}
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b, nil
}
