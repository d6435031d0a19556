package replay

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// The reorder check (docs/design.md §14.9): an auditor's test that arrival
// luck did not matter. The contract (§5.3) promises that two logs of the
// same facts give the same decisions, apart from the positions they quote,
// when they keep each producer's order and the order of the facts that
// completed groups, with the few further constraints §5.3 lists. Reorder
// derives those constraints from the recorded run — folding it once in log
// order to see which fact completed each group and which sealed each
// batch — then folds the run again under seeded random orders that keep
// them, and compares the decisions with their positions stripped.
//
// The run's facts are held in memory for the duration of the check.

// ReorderOptions tune [Reorder].
type ReorderOptions struct {
	// Reorderings is how many reordered folds are compared with the
	// log-order fold; at least 1.
	Reorderings int
	// Seed seeds the first reordering; the i-th (from 0) uses Seed+i, so
	// a difference found under seed S is reproduced by --seed S
	// --reorder 1.
	Seed uint64
	// OnReordering, when set, is called after each reordering is compared.
	OnReordering func(seed uint64)

	// newFold makes the fold of each pass (projections.NewFold when nil):
	// tests give it rules that depend on arrival order.
	newFold func(run string) applier
}

// applier is what Reorder folds with: a [projections.Fold].
type applier interface {
	Apply(projections.Store, projections.Record) ([]projections.Decision, error)
}

// ReorderReport is the outcome of [Reorder].
type ReorderReport struct {
	Run    string `json:"run"`
	Source string `json:"source"`
	// Facts folded per pass, from Producers distinct sources.
	Facts     int `json:"facts"`
	Producers int `json:"producers"`
	// Groups started in the run, and Completions: those that completed in
	// log order, whose completing facts every reordering keeps in order.
	Groups      int `json:"groups"`
	Completions int `json:"completions"`
	// Decisions is how many position-free decisions each pass is compared
	// on (audit.checkpoint is left out: it is a statement about a
	// position).
	Decisions int `json:"decisions"`
	// Seeds are the reorderings folded, in order; Moved, for each, how
	// many facts it placed elsewhere than the log did, and Inverted how
	// many it delivered before their cause (a reward before its
	// attempt.started, an attempt.started before its group.started).
	Seeds    []uint64 `json:"seeds"`
	Moved    []int    `json:"moved"`
	Inverted []int    `json:"inverted"`
	// Difference is the first difference found; nil when every
	// reordering gave the log order's decisions.
	Difference *ReorderDifference `json:"difference,omitempty"`
}

// OK reports whether every reordering gave the same decisions.
func (r *ReorderReport) OK() bool { return r.Difference == nil }

// ReorderDifference is the first decision a reordering concluded
// otherwise than the log order.
type ReorderDifference struct {
	// Seed is the reordering's seed.
	Seed uint64 `json:"seed"`
	// Decision names the decision of the log-order fold (or, when that
	// fold has none there, of the reordered one): kind and sequence
	// number, or a finding's kind.
	Decision string `json:"decision"`
	// Field is the first member of the decision's position-free data
	// that differs (dotted path), with its value in log order and in the
	// reordering, as JSON; empty when one side has no decision there.
	Field     string `json:"field,omitempty"`
	InLog     string `json:"in_log"`
	Reordered string `json:"reordered"`
}

func (d *ReorderDifference) String() string {
	if d.Field == "" {
		return fmt.Sprintf("under reordering seed %d, %s: in log order %s, reordered %s", d.Seed, d.Decision, d.InLog, d.Reordered)
	}
	return fmt.Sprintf("under reordering seed %d, %s differs at %s: in log order %s, reordered %s", d.Seed, d.Decision, d.Field, d.InLog, d.Reordered)
}

// Reorder re-folds src's run under o.Reorderings seeded reorderings that
// the contract allows and compares each one's position-free decisions
// with the log order's, stopping at the first difference.
func Reorder(ctx context.Context, src Source, o ReorderOptions) (*ReorderReport, error) {
	if o.Reorderings < 1 {
		return nil, errors.New("replay: --reorder needs at least 1 reordering")
	}
	newFold := o.newFold
	if newFold == nil {
		// Every pass folds under the configuration the run's decisions
		// recorded, as Verify does.
		decided, rules, err := decidedConfig(ctx, src, nil)
		if err != nil {
			return nil, err
		}
		newFold = func(run string) applier {
			return projections.NewFoldWith(run, projections.FoldOptions{Recorded: decided, RuleVersion: rules})
		}
	}
	rep := &ReorderReport{Run: src.Run(), Source: src.Describe()}
	var facts []Fact
	err := factsOf(ctx, src, func(f Fact) error {
		facts = append(facts, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Facts = len(facts)
	r := newRunShape(facts)
	rep.Groups, rep.Producers = len(r.groups), r.producers

	// The log order: which fact completed each group, which sealed each
	// batch, and the decisions to compare with.
	completedAt := make([]int, len(r.groups))
	for i := range completedAt {
		completedAt[i] = -1
	}
	var completions []int
	sealedAt := map[uint64]int{}
	logOrder := make([]int, len(facts))
	for i := range logOrder {
		logOrder[i] = i
	}
	want, logDigests, err := foldFree(ctx, rep.Run, newFold, facts, logOrder, nil, func(i int, s projections.Store, ds []projections.Decision) error {
		for _, d := range ds {
			if d.Kind == projections.KindBatchSealed {
				sealedAt[d.Seq] = i
			}
		}
		check := r.about(i)
		if facts[i].Event.Type == events.TypeRunStarted {
			check = r.allGroups()
		}
		for _, g := range check {
			if completedAt[g] >= 0 {
				continue
			}
			done, err := projections.GroupCompleted(s, r.groups[g])
			if err != nil {
				return err
			}
			if done {
				completedAt[g] = i
				completions = append(completions, i)
			}
		}
		return nil
	}, func(s projections.Store) error {
		// Every group the fold completed must have been seen completing,
		// or the constraints would let its completing fact move.
		for g, name := range r.groups {
			if completedAt[g] >= 0 {
				continue
			}
			if done, err := projections.GroupCompleted(s, name); err != nil || done {
				return errors.Join(err, fmt.Errorf("replay: group %s completed, but not at a fact about it", name))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Completions, rep.Decisions = len(completions), len(want)
	after := r.constraints(completedAt, completions, sealedAt)

	for k := range o.Reorderings {
		seed := o.Seed + uint64(k)
		order := interleave(after, newRand(seed))
		if len(order) != len(facts) {
			return nil, fmt.Errorf("replay: the ordering constraints of run %s have a cycle", rep.Run)
		}
		moved := 0
		for i, j := range order {
			if i != j {
				moved++
			}
		}
		got, _, err := foldFree(ctx, rep.Run, newFold, facts, order, logDigests, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("replay: reordering seed %d: %w", seed, err)
		}
		rep.Seeds = append(rep.Seeds, seed)
		rep.Moved = append(rep.Moved, moved)
		evs := make([]events.Event, len(order))
		for j, i := range order {
			evs[j] = facts[i].Event
		}
		rep.Inverted = append(rep.Inverted, projections.CausalInversions(evs))
		if o.OnReordering != nil {
			o.OnReordering(seed)
		}
		if d := firstFreeDifference(want, got); d != nil {
			d.Seed = seed
			rep.Difference = d
			break
		}
	}
	return rep, nil
}

// runShape is what the constraints need to know of a run's facts: their
// producers and the groups each is about.
type runShape struct {
	facts     []Fact
	producers int
	groups    []string // in order of first mention
	groupIdx  map[string]int32
	attGroup  map[string]int32 // attempt → its group, from attempt.started
	taskGrps  map[string][]int32
}

func newRunShape(facts []Fact) *runShape {
	r := &runShape{facts: facts, groupIdx: map[string]int32{}, attGroup: map[string]int32{}, taskGrps: map[string][]int32{}}
	group := func(name string) int32 {
		g, ok := r.groupIdx[name]
		if !ok {
			g = int32(len(r.groups))
			r.groups = append(r.groups, name)
			r.groupIdx[name] = g
		}
		return g
	}
	sources := map[string]bool{}
	for _, f := range facts {
		sources[f.Event.Source] = true
		switch d := f.Event.Data.(type) {
		case *events.GroupStarted:
			g := group(d.Group)
			if !slices.Contains(r.taskGrps[d.Task], g) {
				r.taskGrps[d.Task] = append(r.taskGrps[d.Task], g)
			}
		case *events.GroupClosed:
			group(d.Group)
		case *events.AttemptStarted:
			g := group(d.Group)
			if _, ok := r.attGroup[d.Attempt]; !ok {
				r.attGroup[d.Attempt] = g
			}
		}
	}
	r.producers = len(sources)
	return r
}

// about lists the groups fact i is about: a group's own facts, its
// attempts' facts, and the registration of its task (admission reads it).
func (r *runShape) about(i int) []int32 {
	att := func(a string) []int32 {
		if g, ok := r.attGroup[a]; ok {
			return []int32{g}
		}
		return nil
	}
	switch d := r.facts[i].Event.Data.(type) {
	case *events.TaskRegistered:
		return r.taskGrps[d.Task]
	case *events.GroupStarted:
		return []int32{r.groupIdx[d.Group]}
	case *events.GroupClosed:
		return []int32{r.groupIdx[d.Group]}
	case *events.AttemptStarted:
		return []int32{r.groupIdx[d.Group]}
	case *events.TurnGenerated:
		return att(d.Attempt)
	case *events.ContextCompacted:
		return att(d.Attempt)
	case *events.AttemptFinished:
		return att(d.Attempt)
	case *events.AttemptFailed:
		return att(d.Attempt)
	case *events.RewardComputed:
		return att(d.Attempt)
	}
	return nil
}

func (r *runShape) allGroups() []int32 {
	out := make([]int32, len(r.groups))
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// constraints returns, for every fact, the facts that must stay after it
// (docs/design.md §5.3): each producer's order; each group's completing
// fact after the facts about the group that preceded it and before those
// that followed it; the completing facts in their order; each
// group.closed on the same side of each of its group's other facts;
// run.started before every completion; each gradient.applied on the same
// side of the seal of its batch.
func (r *runShape) constraints(completedAt []int, completions []int, sealedAt map[uint64]int) [][]int32 {
	after := make([][]int32, len(r.facts))
	edge := func(a, b int) {
		switch {
		case a < b:
			after[a] = append(after[a], int32(b))
		case a > b:
			after[b] = append(after[b], int32(a))
		}
	}
	last := map[string]int{}
	closes := map[int32][]int{}
	for i, f := range r.facts {
		if p, ok := last[f.Event.Source]; ok {
			edge(p, i)
		}
		last[f.Event.Source] = i
		if d, ok := f.Event.Data.(*events.GroupClosed); ok {
			g := r.groupIdx[d.Group]
			closes[g] = append(closes[g], i)
		}
	}
	for i := 1; i < len(completions); i++ {
		edge(completions[i-1], completions[i])
	}
	for i, f := range r.facts {
		for _, g := range r.about(i) {
			if c := completedAt[g]; c >= 0 {
				edge(i, c)
			}
			for _, z := range closes[g] {
				edge(i, z)
			}
		}
		switch d := f.Event.Data.(type) {
		case *events.RunStarted:
			for _, c := range completions {
				edge(i, c)
			}
		case *events.GradientApplied:
			if s, ok := sealedAt[uint64(d.Batch)]; ok {
				edge(i, s)
			}
		}
	}
	return after
}

// interleave returns a random order of the facts that keeps the
// constraints: at each step it takes a fact uniformly among those whose
// predecessors are all placed. A shorter result means a cycle.
func interleave(after [][]int32, rng *rand.Rand) []int {
	indeg := make([]int32, len(after))
	for _, next := range after {
		for _, j := range next {
			indeg[j]++
		}
	}
	var ready []int32
	for i, d := range indeg {
		if d == 0 {
			ready = append(ready, int32(i))
		}
	}
	order := make([]int, 0, len(after))
	for len(ready) > 0 {
		k := rng.IntN(len(ready))
		i := ready[k]
		ready[k] = ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		order = append(order, int(i))
		for _, j := range after[i] {
			if indeg[j]--; indeg[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	return order
}

// freeDecision is a decision with the positions it quotes stripped.
type freeDecision struct {
	name    string // "batch.sealed 3", or "audit.finding late_reward"
	data    []byte // canonical position-free data
	samples [sha256.Size]byte
	// digest is a batch's sealed digest; mismatch a digest-mismatch
	// finding as concluded.
	digest   string
	mismatch *projections.Finding
}

// foldFree folds facts in the given order into a fresh state and returns
// the position-free decisions: batches and admissions in the order
// reached, then findings sorted (their order, and so their numbers, may
// follow the interleaving of unrelated facts). watch, when set, sees the
// state after each fact; end, when set, the state after the last.
//
// A batch's digest covers positions, so a trainer that reports the digest
// of a batch as the log sealed it disagrees with the same batch sealed
// in another order: under a reordering (logDigests set, the log order's
// sealed digests by batch), a digest mismatch naming the log order's
// digest is a position, not a difference, and is left out.
func foldFree(ctx context.Context, run string, newFold func(string) applier, facts []Fact, order []int, logDigests map[uint64]string,
	watch func(i int, s projections.Store, ds []projections.Decision) error, end func(projections.Store) error) ([]freeDecision, map[uint64]string, error) {
	fold, store := newFold(run), projections.NewMemStore()
	var ordered, findings []freeDecision
	digests := map[uint64]string{}
	for n, i := range order {
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		ds, err := fold.Apply(store, facts[i].Record())
		if err != nil {
			return nil, nil, fmt.Errorf("fold fact %d: %w", facts[i].Seq, err)
		}
		if watch != nil {
			if err := watch(i, store, ds); err != nil {
				return nil, nil, err
			}
		}
		for _, d := range ds {
			fd, keep, err := positionFree(d)
			if err != nil {
				return nil, nil, err
			}
			if fd.digest != "" {
				digests[d.Seq] = fd.digest
			}
			switch {
			case !keep:
			case fd.mismatch != nil && logDigests != nil && fd.mismatch.Got == logDigests[fd.mismatch.Batch]:
			case d.Kind == projections.KindAuditFinding:
				findings = append(findings, fd)
			default:
				ordered = append(ordered, fd)
			}
		}
	}
	if end != nil {
		if err := end(store); err != nil {
			return nil, nil, err
		}
	}
	slices.SortFunc(findings, func(a, b freeDecision) int {
		return cmp.Or(cmp.Compare(a.name, b.name), bytes.Compare(a.data, b.data))
	})
	return append(ordered, findings...), digests, nil
}

// positionFree strips from a decision what names positions in the log
// (docs/design.md §5.3): the fact that caused it; a manifest's watermark,
// tree head, digest (which covers them), completion and turn positions;
// the sealed digest a digest mismatch names; a finding's number. An
// audit.checkpoint is all position and is left out (keep is false).
func positionFree(d projections.Decision) (fd freeDecision, keep bool, err error) {
	var env projections.Envelope
	if err := json.Unmarshal(d.Value, &env); err != nil {
		return fd, false, fmt.Errorf("decision %s %d: %w", d.Kind, d.Seq, err)
	}
	fd.name = fmt.Sprintf("%s %d", d.Kind, d.Seq)
	switch d.Kind {
	case projections.KindAuditCheckpoint:
		return fd, false, nil
	case projections.KindBatchSealed:
		m, err := projections.ManifestOf(d.Value)
		if err != nil {
			return fd, false, err
		}
		fd.digest = m.Digest
		m.Watermark, m.Tree, m.Digest = projections.LogPosition{}, projections.TreeHead{}, ""
		for gi := range m.Groups {
			m.Groups[gi].Completed = projections.LogPosition{}
			for ai := range m.Groups[gi].Attempts {
				for ti := range m.Groups[gi].Attempts[ai].Turns {
					m.Groups[gi].Attempts[ai].Turns[ti].Partition = 0
					m.Groups[gi].Attempts[ai].Turns[ti].Offset = 0
				}
			}
		}
		if fd.data, err = events.CanonicalJSON(m); err != nil {
			return fd, false, err
		}
		fd.samples = sha256.Sum256(d.Samples)
	case projections.KindAuditFinding:
		var f projections.Finding
		if err := json.Unmarshal(env.Data, &f); err != nil {
			return fd, false, fmt.Errorf("finding %d: %w", d.Seq, err)
		}
		if f.Kind == projections.FindingBatchDigestMismatch {
			fd.mismatch = &projections.Finding{Batch: f.Batch, Got: f.Got}
			f.Want = ""
		}
		if fd.data, err = events.CanonicalJSON(f); err != nil {
			return fd, false, err
		}
		fd.name = fmt.Sprintf("%s %s", d.Kind, f.Kind)
	default:
		fd.data = env.Data
	}
	return fd, true, nil
}

// firstFreeDifference compares two passes' position-free decisions.
func firstFreeDifference(want, got []freeDecision) *ReorderDifference {
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(got):
			return &ReorderDifference{Decision: want[i].name, InLog: clip(string(want[i].data)), Reordered: "no such decision"}
		case i >= len(want):
			return &ReorderDifference{Decision: got[i].name, InLog: "no such decision", Reordered: clip(string(got[i].data))}
		}
		w, g := want[i], got[i]
		if w.name == g.name && bytes.Equal(w.data, g.data) && w.samples == g.samples {
			continue
		}
		d := &ReorderDifference{Decision: w.name}
		if w.name != g.name {
			d.Field, d.InLog, d.Reordered = "(decision)", w.name, g.name
			return d
		}
		if path, a, b, ok := firstDifference(w.data, g.data); ok {
			d.Field, d.InLog, d.Reordered = "data."+path, a, b
			if path == "(the whole value)" {
				d.Field = "data"
			}
			return d
		}
		d.Field, d.InLog, d.Reordered = "samples", fmt.Sprintf("sha256:%x", w.samples), fmt.Sprintf("sha256:%x", g.samples)
		return d
	}
	return nil
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5e0de7)) }
