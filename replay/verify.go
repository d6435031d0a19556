package replay

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// ErrRuleVersion is returned when a run's decisions were made under rules
// this build does not implement.
var ErrRuleVersion = errors.New("replay: rule version not implemented by this build")

// RuleVersionError says that a run's decisions were made under rules other
// than this build's: not tampering, but a run to verify with a build of
// its rule version. It matches [ErrRuleVersion] with errors.Is.
type RuleVersionError struct {
	Run      string
	Decision string // the first recorded decision of another version
	Recorded int    // the rule version it names
}

func (e *RuleVersionError) Error() string {
	if projections.SupportsRuleVersion(e.Recorded) {
		return fmt.Sprintf("run folded under rules v%d and others; a run is folded again under one", e.Recorded)
	}
	return fmt.Sprintf("run folded under rules v%d; this build implements v%d to v%d", e.Recorded, projections.MinRuleVersion, projections.RuleVersion)
}

// Is makes errors.Is(err, ErrRuleVersion) hold.
func (e *RuleVersionError) Is(target error) bool { return target == ErrRuleVersion }

// VerifyOptions tune [Verify].
type VerifyOptions struct {
	// OnFact, when set, is called after each fact is folded: progress.
	OnFact func(Fact)
	// Audit, when set, observes every fact and every recomputed decision:
	// the audit report comes out of the same pass.
	Audit *projections.Audit
	// ScratchDir is where the fold's state is spilled, in a temporary
	// database removed when Verify returns; empty means the system's
	// temporary directory.
	ScratchDir string
}

// Report is the outcome of [Verify].
type Report struct {
	Run         string `json:"run"`
	Source      string `json:"source"`
	RuleVersion int    `json:"rule_version"`
	// Facts folded, and the final head recomputed from them.
	Facts uint64               `json:"facts"`
	Head  projections.TreeHead `json:"head"`
	// Skipped are records the source left out, as the projector does.
	Skipped []Skipped `json:"skipped,omitempty"`

	// Recorded counts the distinct decisions recorded (RecordedRecords
	// with identical re-emissions), Recomputed those the replay reached,
	// Matched those byte-identical in both.
	Recorded        int `json:"recorded"`
	RecordedRecords int `json:"recorded_records"`
	Recomputed      int `json:"recomputed"`
	Matched         int `json:"matched"`
	// HeadsChecked counts the recorded tree heads compared with the
	// recomputed tree; Uncommitted the facts after the last of them,
	// which no head covers yet.
	HeadsChecked int    `json:"heads_checked"`
	Uncommitted  uint64 `json:"uncommitted"`
	// Misrouted counts the recorded misrouted findings (distinct ids: a
	// finding recorded again counts once): records naming
	// the run that the projector read from a partition the run does not
	// map to and did not fold (docs/design.md §8.1). Replay reads only the
	// run's partition, so it folds none of them either; the findings are
	// named by the records' positions and take no part in the run's
	// numbered decisions.
	Misrouted int `json:"misrouted,omitempty"`

	// Divergences counts the decisions that differ, are missing from the
	// record, or were recorded but not reproduced; First is the earliest,
	// by the fact that caused it.
	Divergences int         `json:"divergences"`
	First       *Divergence `json:"first_divergence,omitempty"`
	// History, when set, is the first place the facts differ from the
	// history the recorded heads committed to.
	History *HistoryProblem `json:"history,omitempty"`
}

// OK reports whether every decision and every head was reproduced.
func (r *Report) OK() bool { return r.First == nil && r.History == nil }

// Divergence is a decision that was not reproduced byte for byte.
type Divergence struct {
	Kind events.Type `json:"kind"`
	// Seq is the decision's number within its kind (0 when unknown: a
	// recorded decision no replayed one shares an id with).
	Seq uint64 `json:"seq"`
	ID  string `json:"id"`
	// Problem is DivergenceDiffers, DivergenceNotRecorded,
	// DivergenceNotReproduced or DivergenceConflict.
	Problem string `json:"problem"`
	// Fact is the position of the fact that caused the decision.
	Fact projections.FactPosition `json:"fact"`
	// Field is the first member that differs (dotted path), with the
	// recorded and the recomputed value there, as JSON.
	Field      string `json:"field,omitempty"`
	Recorded   string `json:"recorded,omitempty"`
	Recomputed string `json:"recomputed,omitempty"`
}

// Divergence problems.
const (
	DivergenceDiffers       = "differs"
	DivergenceNotRecorded   = "not_recorded"   // the replay concludes it; the record lacks it
	DivergenceNotReproduced = "not_reproduced" // recorded, but the replay does not conclude it
	DivergenceConflict      = "conflict"       // recorded twice under one id with different bytes
)

func (d *Divergence) String() string {
	what := fmt.Sprintf("%s %d (id %s, caused by fact %d at %d/%d)", d.Kind, d.Seq, d.ID, d.Fact.Seq, d.Fact.Partition, d.Fact.Offset)
	switch d.Problem {
	case DivergenceDiffers:
		return fmt.Sprintf("%s differs at %s: recorded %s, recomputed %s", what, d.Field, d.Recorded, d.Recomputed)
	case DivergenceNotRecorded:
		return what + " is concluded by the replay but missing from the record (has the projector folded this far?)"
	case DivergenceNotReproduced:
		return what + " is recorded but the replay does not conclude it"
	case DivergenceConflict:
		return what + " is recorded twice with different bytes"
	}
	return what + ": " + d.Problem
}

// recordedEntry is what Verify keeps of a recorded decision: a digest, not
// the value, so a long run's manifests need not sit in memory.
type recordedEntry struct {
	info     decisionInfo // its Sum is the recorded value's digest
	conflict bool
	matched  bool
}

// Verify re-folds every fact of src with the rules of the run's recorded
// rule version, recomputes every decision and tree head, and compares
// them byte for byte with what src recorded.
func Verify(ctx context.Context, src Source, o VerifyOptions) (*Report, error) {
	rep := &Report{Run: src.Run(), Source: src.Describe(), RuleVersion: projections.RuleVersion}
	recorded := map[string]*recordedEntry{}
	var order []string // recorded ids, in the order recorded
	var heads []RecordedHead
	// Misrouted findings, by id: counted once however often recorded, and
	// kept for the audit, which lists them beside the fold's findings.
	misrouted := map[string]struct{}{}
	var misroutedAudit []projections.Decision
	// The configuration the run's first recorded batch was made under,
	// read in the same pass as the recorded decisions.
	config, rules, err := decidedConfig(ctx, src, func(r Recorded, d decisionInfo) error {
		rep.RecordedRecords++
		if d.Type == projections.KindAuditFinding && d.Fact.Seq == 0 && d.ID == events.MisroutedID(rep.Run, d.Fact.Partition, d.Fact.Offset) {
			if _, ok := misrouted[d.ID]; !ok {
				misrouted[d.ID] = struct{}{}
				if o.Audit != nil {
					misroutedAudit = append(misroutedAudit, projections.Decision{ID: d.ID, Run: rep.Run, Kind: d.Type, Value: bytes.Clone(r.Value)})
				}
			}
			return nil
		}
		if e, ok := recorded[d.ID]; ok {
			e.conflict = e.conflict || e.info.Sum != d.Sum
			return nil
		}
		recorded[d.ID] = &recordedEntry{info: d}
		order = append(order, d.ID)
		if d.Head != nil {
			heads = append(heads, RecordedHead{Kind: string(d.Type), Seq: d.Seq, TreeHead: *d.Head})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Recorded = len(recorded)
	rep.Misrouted = len(misrouted)
	rep.RuleVersion = rules
	slices.SortStableFunc(heads, func(a, b RecordedHead) int { return cmp.Compare(a.Size, b.Size) })

	h := newHistoryCheck(ctx, src, heads)
	defer h.close()
	var divs []*Divergence
	// The earliest decision that differs, and its recomputed value.
	var firstDiffers *Divergence
	var firstRecomputed []byte
	maxSeq := map[events.Type]uint64{}
	store, err := openScratch(o.ScratchDir, src)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	// Fold with the configuration the run recorded, not this build's
	// defaults (docs/design.md §4.3). Decisions are compared by their
	// bytes, whose digests cover the samples: the samples themselves are
	// not kept.
	fold := projections.NewFoldWith(rep.Run, projections.FoldOptions{Recorded: config, RuleVersion: rules, WriteBack: writeBackBytes, NoSamples: true})
	err = factsOf(ctx, src, func(f Fact) error {
		if err := h.leaf(&f, fold, store); err != nil {
			return err
		}
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			return fmt.Errorf("replay: fold fact %d: %w", f.Seq, err)
		}
		rep.Facts = f.Seq
		if err := h.fact(f, fold, store); err != nil {
			return err
		}
		if o.Audit != nil {
			// The fold's dedup index is on disk; the audit's own would be
			// in memory, one entry a fact.
			o.Audit.FactFolded(f.Record(), fold.Repeat())
		}
		for _, d := range ds {
			rep.Recomputed++
			maxSeq[d.Kind] = max(maxSeq[d.Kind], d.Seq)
			if o.Audit != nil {
				if err := o.Audit.Decision(d); err != nil {
					return err
				}
			}
			e := recorded[d.ID]
			switch {
			case e == nil:
				divs = append(divs, &Divergence{Kind: d.Kind, Seq: d.Seq, ID: d.ID, Problem: DivergenceNotRecorded, Fact: factOf(f)})
			case e.info.Sum != sha256.Sum256(d.Value):
				e.matched = true
				div := &Divergence{Kind: d.Kind, Seq: d.Seq, ID: d.ID, Problem: DivergenceDiffers, Fact: factOf(f)}
				if firstDiffers == nil {
					firstDiffers, firstRecomputed = div, bytes.Clone(d.Value)
				}
				divs = append(divs, div)
			default:
				e.matched = true
				if e.conflict {
					divs = append(divs, &Divergence{Kind: d.Kind, Seq: d.Seq, ID: d.ID, Problem: DivergenceConflict, Fact: factOf(f)})
				} else {
					rep.Matched++
				}
			}
		}
		if o.OnFact != nil {
			o.OnFact(f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range misroutedAudit {
		if err := o.Audit.Decision(d); err != nil {
			return nil, err
		}
	}
	if s, ok := src.(skipper); ok {
		rep.Skipped = s.Skipped()
	}
	head, err := fold.Head(store)
	if err != nil {
		return nil, err
	}
	rep.Head = head

	// Recorded decisions the replay never reached, in the order recorded.
	for _, id := range order {
		e := recorded[id]
		if e.matched {
			continue
		}
		d := &Divergence{Kind: e.info.Type, Seq: e.info.Seq, ID: id, Problem: DivergenceNotReproduced, Fact: e.info.Fact}
		if d.Seq == 0 {
			d.Seq = seqOfID(rep.Run, e.info.Type, id, uint64(len(recorded))+maxSeq[e.info.Type])
		}
		divs = append(divs, d)
	}
	slices.SortStableFunc(divs, func(a, b *Divergence) int { return cmp.Compare(a.Fact.Seq, b.Fact.Seq) })
	rep.Divergences = len(divs)
	if len(divs) > 0 {
		rep.First = divs[0]
		if rep.First == firstDiffers {
			if err := fillDifference(ctx, src, rep.First, firstRecomputed); err != nil {
				return nil, err
			}
		}
	}

	hist, err := h.finish(rep.Facts, fold, store)
	if err != nil {
		return nil, err
	}
	if hist == nil {
		if a, ok := src.(interface{ Manifest() ArchiveManifest }); ok {
			hist = manifestHeads(a.Manifest().Heads, heads)
		}
	}
	rep.History, rep.HeadsChecked, rep.Uncommitted = hist, h.checked, h.uncommitted(rep.Facts)
	return rep, nil
}

// manifestHeads compares the heads an archive's manifest lists with those
// its recorded decisions carry, which Verify checked against the facts:
// a manifest is what a reader looks at first, and must not say otherwise.
func manifestHeads(listed, recorded []RecordedHead) *HistoryProblem {
	type key struct {
		kind string
		seq  uint64
	}
	want := map[key]projections.TreeHead{}
	for _, h := range recorded {
		want[key{h.Kind, h.Seq}] = h.TreeHead
	}
	seen := map[key]bool{}
	for _, h := range listed {
		k := key{h.Kind, h.Seq}
		w, ok := want[k]
		switch {
		case !ok:
			return &HistoryProblem{What: HistoryManifest, Seq: h.Size, Detail: fmt.Sprintf("the archive's manifest lists a head of %s %d that no recorded decision carries", h.Kind, h.Seq)}
		case w != h.TreeHead:
			return &HistoryProblem{What: HistoryManifest, Seq: h.Size, Detail: fmt.Sprintf("the archive's manifest lists head %d:%s for %s %d, the recorded decision carries %d:%s", h.Size, h.Root, h.Kind, h.Seq, w.Size, w.Root)}
		}
		seen[k] = true
	}
	for _, h := range recorded {
		if !seen[key{h.Kind, h.Seq}] {
			return &HistoryProblem{What: HistoryManifest, Seq: h.Size, Detail: fmt.Sprintf("the archive's manifest leaves out the head of %s %d", h.Kind, h.Seq)}
		}
	}
	return nil
}

func factOf(f Fact) projections.FactPosition {
	return projections.FactPosition{Seq: f.Seq, Partition: f.Partition, Offset: f.Offset}
}

// seqOfID finds which seq of a kind an id is the id of, trying up to limit.
func seqOfID(run string, kind events.Type, id string, limit uint64) uint64 {
	for s := uint64(1); s <= limit+1; s++ {
		if events.DecisionID(run, kind, s) == id {
			return s
		}
	}
	return 0
}

// fillDifference names the first field where a differing decision's
// record and its recomputation part, reading the recorded value again.
func fillDifference(ctx context.Context, src Source, d *Divergence, recomputed []byte) error {
	var rec []byte
	err := src.Decisions(ctx, func(r Recorded) error {
		if info, err := parseRecorded(r); err == nil && info.ID == d.ID {
			rec = r.Value
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return err
	}
	d.Field, d.Recorded, d.Recomputed, _ = firstDifference(rec, recomputed)
	return nil
}

// errFound ends an iteration that found what it looked for.
var errFound = errors.New("replay: found")
