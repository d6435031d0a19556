package projections

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// Batches and staleness (DESIGN.md §5 rule 7).
//
// A train group that survives rules 1–6 is placed, at its completion, in
// batch k = (batches sealed so far) + 1, whose gradient step starts from
// policy version k−1. Its turns are judged against k at once — staleness
// (k−1) − policy_version, trained when 0 <= staleness <= max_staleness — so
// a placed group never changes again. The manifest entry is kept in the
// Store under open\x00<i> and the turns' tokens under turn\x00…; batch k is
// sealed by the record that places its batch_groups-th group, and the
// entries and tokens are then deleted.

// Reasons a completed train group is not used.
const (
	DropInfraLost  = "infra_lost"  // closed with fewer than min_group rewarded slots
	DropUnadmitted = "unadmitted"  // enforce_admission and the task not admitted at completion
	DropZeroSignal = "zero_signal" // scores with population std <= 1e-6
	DropFullyStale = "fully_stale" // no turn would train in the batch it would enter
)

// Manifest is the data of a batch.sealed decision (DESIGN.md §5).
type Manifest struct {
	Run            string `json:"run"`
	Seq            uint64 `json:"seq"`
	TrainerVersion uint64 `json:"trainer_version"`
	RuleVersion    int    `json:"rule_version"`
	// Watermark is the position of the fact that completed the batch's
	// last group: the fact that sealed it.
	Watermark LogPosition `json:"watermark"`
	// Tree is the head of the run's fact tree at the watermark.
	Tree    TreeHead       `json:"tree"`
	Groups  []BatchGroup   `json:"groups"`
	Dropped []DroppedGroup `json:"dropped"`
	Stats   BatchStats     `json:"stats"`
	// Digest is "sha256:<hex>" of the manifest encoded without it,
	// followed by the batch's samples.
	Digest string `json:"digest,omitempty"`
}

// TreeHead is {size, root} of the run's Merkle tree of facts (DESIGN.md
// §6). Size is the fact sequence number of the watermark.
type TreeHead struct {
	Size uint64 `json:"size"`
	// Root is the hex RFC 6962 root of the tree of the run's first Size
	// facts (tree.go).
	Root string `json:"root"`
}

// BatchGroup is a group used in a batch.
type BatchGroup struct {
	Group string `json:"group"`
	Task  string `json:"task"`
	// Completed is the position of the fact that completed the group.
	Completed LogPosition    `json:"completed"`
	Attempts  []BatchAttempt `json:"attempts"`
}

// BatchAttempt is an included attempt, with its reward arithmetic.
type BatchAttempt struct {
	Attempt          string      `json:"attempt"`
	Score            float64     `json:"score"`
	Bonus            float64     `json:"bonus"`
	Reward           float64     `json:"reward"`
	Advantage        float64     `json:"advantage"`
	CompletionTokens int64       `json:"completion_tokens"`
	Turns            []BatchTurn `json:"turns"`
}

// BatchTurn is a turn judged against its batch.
type BatchTurn struct {
	Turn          int64 `json:"turn"`
	PolicyVersion int64 `json:"policy_version"`
	Staleness     int64 `json:"staleness"`
	Trained       bool  `json:"trained"`
	// Partition and Offset place the turn's turn.generated.
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// DroppedGroup is a completed train group that was not used.
type DroppedGroup struct {
	Group  string `json:"group"`
	Task   string `json:"task"`
	Reason string `json:"reason"`
}

// BatchStats summarizes a batch. Histogram keys are decimal integers;
// encoding/json writes them in sorted (string) order.
type BatchStats struct {
	Groups       int `json:"groups"`
	Attempts     int `json:"attempts"`
	Turns        int `json:"turns"`
	TrainedTurns int `json:"trained_turns"`
	// StalenessHistogram counts turns by staleness.
	StalenessHistogram map[string]int `json:"staleness_histogram"`
	// InFlight counts attempts by their last minus first turn's policy
	// version: the weights changed while they ran.
	InFlight map[string]int `json:"in_flight"`
	// InQueue counts attempts by (k−1) minus their last turn's version:
	// how long they waited for a batch.
	InQueue map[string]int `json:"in_queue"`
}

// openGroup is a placed group as kept in the Store until its batch seals:
// the manifest entry, and per attempt the training segment of each turn and
// whether the turn has stored tokens (parallel to the entry's turns).
type openGroup struct {
	Group    BatchGroup `json:"group"`
	Segments [][]int64  `json:"segments"`
	Payload  [][]bool   `json:"payload"`
}

// placeTrainGroup applies rules 1–7 to a completed train group: it is
// dropped (infra_lost, unadmitted, zero_signal, fully_stale, checked in
// that order) or placed in the open batch.
func (c *applyCtx) placeTrainGroup(id string, g *groupState, kept []member, closedEarly bool) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	reason := ""
	if closedEarly && len(kept) < cfg.MinGroup {
		reason = DropInfraLost
	}
	if reason == "" && cfg.EnforceAdmission {
		t, err := c.task(g.task)
		if err != nil {
			return err
		}
		if t.decision != admissionAdmitted {
			reason = DropUnadmitted
		}
	}
	atts := make([]scored, len(kept))
	for i := range kept {
		a := &kept[i].a
		atts[i].passed = a.passed
		atts[i].score = score(a.passed, a.testsPassed, a.testsTotal, cfg)
		for _, t := range a.turns {
			atts[i].tokens += t.completion
		}
	}
	if reason == "" && zeroSignal(atts) {
		reason = DropZeroSignal
	}

	var entry openGroup
	if reason == "" {
		shape(atts, cfg)
		advantages(atts, cfg.Advantage)
		k := c.h.sealed + 1
		entry = openGroup{Group: BatchGroup{Group: id, Task: g.task,
			Completed: LogPosition{Partition: c.pos.Partition, Offset: c.pos.Offset}}}
		trained := 0
		for i := range kept {
			ba, segs, pay, negative, nNegative := judge(&kept[i], &atts[i], k, cfg.MaxStaleness)
			for _, t := range ba.Turns {
				if t.Trained {
					trained++
				}
			}
			entry.Group.Attempts = append(entry.Group.Attempts, ba)
			entry.Segments = append(entry.Segments, segs)
			entry.Payload = append(entry.Payload, pay)
			if len(negative) > 0 {
				if err := c.finding(Finding{Kind: FindingNegativeStaleness, Group: id, Attempt: kept[i].id, Turns: negative, Batch: k,
					Detail: fmt.Sprintf("%d turn(s) of attempt %s were generated by a policy version above %d, the version batch %d trains from; they are masked",
						nNegative, kept[i].id, k-1, k)}); err != nil {
					return err
				}
			}
		}
		if trained == 0 {
			reason = DropFullyStale
		}
	}

	if reason != "" {
		b, err := canonicalJSON(DroppedGroup{Group: id, Task: g.task, Reason: reason})
		if err != nil {
			return err
		}
		if err := c.s.Set(dropKey(c.h.drops), b); err != nil {
			return err
		}
		c.h.drops++
		for i := range kept {
			if err := c.dropPayloads(kept[i].id, &kept[i].a); err != nil {
				return err
			}
		}
		return nil
	}

	b, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	if err := c.s.Set(openKey(c.h.open), b); err != nil {
		return err
	}
	c.h.open++
	if c.h.open >= uint64(cfg.BatchGroups) {
		return c.seal()
	}
	return nil
}

// judge builds an attempt's manifest entry for batch k: its turns in index
// order with staleness and training flag, the segment of each turn (rule 8:
// a compaction after turn t starts a new segment with the next turn), which
// turns have stored tokens, and the turns with negative staleness (the first
// maxListedTurns of them, and their number).
func judge(m *member, s *scored, k uint64, maxStaleness int) (BatchAttempt, []int64, []bool, []int64, int) {
	ba := BatchAttempt{Attempt: m.id, Score: s.score, Bonus: s.bonus, Reward: s.reward, Advantage: s.advantage,
		CompletionTokens: s.tokens, Turns: make([]BatchTurn, 0, len(m.a.turns))}
	segs := make([]int64, 0, len(m.a.turns))
	pay := make([]bool, 0, len(m.a.turns))
	var negative []int64
	nNegative := 0
	for _, t := range m.a.turns {
		st := int64(k-1) - t.version
		ba.Turns = append(ba.Turns, BatchTurn{Turn: t.turn, PolicyVersion: t.version, Staleness: st,
			Trained: st >= 0 && st <= int64(maxStaleness), Partition: t.partition, Offset: t.offset})
		if st < 0 {
			nNegative++
			if len(negative) < maxListedTurns {
				negative = append(negative, t.turn)
			}
		}
		// Compactions strictly before this turn's index.
		segs = append(segs, int64(sort.Search(len(m.a.compactions), func(i int) bool { return m.a.compactions[i] >= t.turn })))
		pay = append(pay, t.payload)
	}
	return ba, segs, pay, negative, nNegative
}

// seal closes batch k = sealed+1 at the current record.
func (c *applyCtx) seal() error {
	k := c.h.sealed + 1
	entries := make([]openGroup, c.h.open)
	for i := range entries {
		b, ok, err := c.s.Get(openKey(uint64(i)))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: open batch entry %d missing", ErrCorruptState, i)
		}
		if err := json.Unmarshal(b, &entries[i]); err != nil {
			return fmt.Errorf("%w: open batch entry %d: %v", ErrCorruptState, i, err)
		}
	}
	dropped := make([]DroppedGroup, c.h.drops)
	for i := range dropped {
		b, ok, err := c.s.Get(dropKey(uint64(i)))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: dropped group %d missing", ErrCorruptState, i)
		}
		if err := json.Unmarshal(b, &dropped[i]); err != nil {
			return fmt.Errorf("%w: dropped group %d: %v", ErrCorruptState, i, err)
		}
	}

	m := Manifest{
		Run: c.run, Seq: k, TrainerVersion: k - 1, RuleVersion: RuleVersion,
		Watermark: LogPosition{Partition: c.pos.Partition, Offset: c.pos.Offset},
		Tree:      c.tree.Head(),
		Groups:    make([]BatchGroup, len(entries)),
		Dropped:   dropped,
		Stats:     batchStats(entries, k),
	}
	for i := range entries {
		m.Groups[i] = entries[i].Group
	}
	samples, err := c.materialize(entries)
	if err != nil {
		return err
	}
	body, err := canonicalJSON(m)
	if err != nil {
		return err
	}
	h := sha256.New()
	h.Write(body)
	h.Write(samples)
	m.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))

	if err := c.s.Set(sealedKey(k), []byte(m.Digest)); err != nil {
		return err
	}
	for i := range entries {
		if err := c.s.Delete(openKey(uint64(i))); err != nil {
			return err
		}
		for a, ba := range entries[i].Group.Attempts {
			for t, bt := range ba.Turns {
				if entries[i].Payload[a][t] {
					if err := c.s.Delete(turnKey(ba.Attempt, bt.Turn)); err != nil {
						return err
					}
				}
			}
		}
	}
	for i := range dropped {
		if err := c.s.Delete(dropKey(uint64(i))); err != nil {
			return err
		}
	}
	c.h.sealed, c.h.open, c.h.drops = k, 0, 0
	return c.emit(KindBatchSealed, k, m, samples)
}

func batchStats(entries []openGroup, k uint64) BatchStats {
	st := BatchStats{
		Groups:             len(entries),
		StalenessHistogram: map[string]int{},
		InFlight:           map[string]int{},
		InQueue:            map[string]int{},
	}
	for _, e := range entries {
		for _, a := range e.Group.Attempts {
			st.Attempts++
			for _, t := range a.Turns {
				st.Turns++
				if t.Trained {
					st.TrainedTurns++
				}
				st.StalenessHistogram[strconv.FormatInt(t.Staleness, 10)]++
			}
			if n := len(a.Turns); n > 0 {
				first, last := a.Turns[0].PolicyVersion, a.Turns[n-1].PolicyVersion
				st.InFlight[strconv.FormatInt(last-first, 10)]++
				st.InQueue[strconv.FormatInt(int64(k-1)-last, 10)]++
			}
		}
	}
	return st
}

// ManifestOf decodes the manifest of a batch.sealed decision value.
func ManifestOf(value []byte) (Manifest, error) {
	env, err := envelopeOfKind(value, KindBatchSealed)
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	err = unmarshalData(env, &m)
	return m, err
}
