package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A simulated run's decisions do not depend on arrival order: every
// reordering the contract allows gives them again, and the reorderings do
// move facts across producers, some before their causes.
func TestReorderSimulatedRunAgrees(t *testing.T) {
	src := planSource(t, simulate.Options{Seed: 11, Tasks: 16, Steps: 3, BatchGroups: 4, MaxTurns: 40}, "reorder-sim")
	rep, err := Reorder(context.Background(), export(t, src), ReorderOptions{Reorderings: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("a reordering changed the decisions: %s", rep.Difference)
	}
	if got, want := rep.Seeds, []uint64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("seeds folded %v, want %v", got, want)
	}
	if rep.Completions == 0 || rep.Decisions < 3 || rep.Producers < 3 {
		t.Fatalf("the run has %d completions, %d decisions, %d producers: too little to check", rep.Completions, rep.Decisions, rep.Producers)
	}
	for i := range rep.Seeds {
		if rep.Moved[i] < rep.Facts/10 {
			t.Errorf("seed %d moved %d of %d facts", rep.Seeds[i], rep.Moved[i], rep.Facts)
		}
	}
	if slices.Max(rep.Inverted) == 0 {
		t.Error("no reordering delivered a fact before its cause")
	}
}

// orderProbe is a fold with a rule that depends on arrival order, as a
// broken rule would: at the first reward it reports how many turns it had
// folded, a count the interleaving of engines and verifier decides.
type orderProbe struct {
	*projections.Fold
	turns    int
	reported bool
}

func (p *orderProbe) Apply(s projections.Store, r projections.Record) ([]projections.Decision, error) {
	ds, err := p.Fold.Apply(s, r)
	if err != nil {
		return ds, err
	}
	switch r.Event.Type {
	case events.TypeTurnGenerated:
		p.turns++
	case events.TypeRewardComputed:
		if p.reported {
			break
		}
		p.reported = true
		data, _ := json.Marshal(projections.Finding{Kind: "order_probe", Detail: fmt.Sprintf("%d turns before the first reward", p.turns)})
		v, _ := json.Marshal(projections.Envelope{ID: "probe", Run: p.Run(), Type: projections.KindAuditFinding, V: 1, Data: data})
		ds = append(ds, projections.Decision{ID: "probe", Run: p.Run(), Kind: projections.KindAuditFinding, Seq: 1 << 40, Value: v})
	}
	return ds, nil
}

// A rule whose conclusion depends on the interleaving of producers is
// caught, naming the decision, the field and the seed.
func TestReorderCatchesOrderDependentRule(t *testing.T) {
	src := planSource(t, simulate.Options{Seed: 11, Tasks: 16, Steps: 2, BatchGroups: 4, MaxTurns: 40}, "reorder-probe")
	rep, err := Reorder(context.Background(), src, ReorderOptions{Reorderings: 10, Seed: 40,
		newFold: func(run string) applier { return &orderProbe{Fold: projections.NewFold(run)} }})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Difference
	if d == nil {
		t.Fatalf("an order-dependent rule passed %d reorderings", len(rep.Seeds))
	}
	if d.Decision != "audit.finding order_probe" || d.Field != "data.detail" || !strings.Contains(d.InLog, "turns before the first reward") {
		t.Fatalf("difference %+v; want the probe finding's detail", d)
	}
	if d.Seed != rep.Seeds[len(rep.Seeds)-1] || d.Seed < 40 || d.Seed >= 50 {
		t.Fatalf("difference under seed %d, seeds folded %v", d.Seed, rep.Seeds)
	}
	if !strings.Contains(d.String(), fmt.Sprintf("seed %d", d.Seed)) {
		t.Errorf("the difference does not name its seed: %s", d)
	}
}

// The reorderings keep each producer's order and the completing facts'
// order.
func TestReorderKeepsProducerAndCompletionOrder(t *testing.T) {
	src := planSource(t, simulate.Options{Seed: 12, Tasks: 16, Steps: 2, BatchGroups: 4, MaxTurns: 40}, "reorder-keep")
	facts := src.facts
	for i := range facts {
		ev, err := events.Decode(facts[i].Value)
		if err != nil {
			t.Fatal(err)
		}
		facts[i].Event = ev
	}
	r := newRunShape(facts)
	completedAt := make([]int, len(r.groups))
	for i := range completedAt {
		completedAt[i] = -1
	}
	var completions []int
	fold, store := projections.NewFold(src.run), projections.NewMemStore()
	for i, f := range facts {
		if _, err := fold.Apply(store, f.Record()); err != nil {
			t.Fatal(err)
		}
		for _, g := range r.about(i) {
			if done, _ := projections.GroupCompleted(store, r.groups[g]); done && completedAt[g] < 0 {
				completedAt[g] = i
				completions = append(completions, i)
			}
		}
	}
	if len(completions) < 4 {
		t.Fatalf("%d completions", len(completions))
	}
	after := r.constraints(completedAt, completions, map[uint64]int{})
	for seed := range uint64(5) {
		order := interleave(after, newRand(seed))
		if len(order) != len(facts) {
			t.Fatalf("seed %d: %d of %d facts placed", seed, len(order), len(facts))
		}
		pos := make([]int, len(order))
		for p, i := range order {
			pos[i] = p
		}
		last := map[string]int{}
		for i, f := range facts {
			if j, ok := last[f.Event.Source]; ok && pos[j] > pos[i] {
				t.Fatalf("seed %d: %s's facts %d and %d swapped", seed, f.Event.Source, j+1, i+1)
			}
			last[f.Event.Source] = i
		}
		for k := 1; k < len(completions); k++ {
			if pos[completions[k-1]] > pos[completions[k]] {
				t.Fatalf("seed %d: completing facts %d and %d swapped", seed, completions[k-1]+1, completions[k]+1)
			}
		}
	}
}

// A trainer reports the digest of a batch as the log sealed it; that
// digest covers positions, so every reordering seals the batch under
// another one. The check does not take that for a difference, and a
// digest that matched no order still is one, in every order.
func TestReorderTrainerDigest(t *testing.T) {
	src := planSource(t, simulate.Options{Seed: 11, Tasks: 16, Steps: 2, BatchGroups: 4, MaxTurns: 40}, "reorder-digest")
	var digest string
	var sealedAt uint64
	for _, r := range src.decisions {
		info, err := parseRecorded(r)
		if err != nil {
			t.Fatal(err)
		}
		if info.Type == projections.KindBatchSealed && info.Seq == 1 {
			m, err := projections.ManifestOf(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			digest, sealedAt = m.Digest, m.Tree.Size
		}
	}
	if digest == "" {
		t.Fatal("the run sealed no batch")
	}
	gradient := func(step int64, digest string) Fact {
		ev := events.Event{ID: events.NewID(), Run: src.run, Type: events.TypeGradientApplied, V: 1, At: src.facts[0].Event.At, Source: "trainer",
			Data: &events.GradientApplied{Step: step, Batch: 1, BatchDigest: digest, FromVersion: 0, ToVersion: step,
				Loss: 0.4, TrainedTokens: 100, LogprobGap: map[string]float64{"0": 0.05}, GradNorm: 1}}
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		// Between two of the run's offsets (planSource uses every other).
		return Fact{Value: v, Partition: 5, Offset: 100 + 2*int64(sealedAt) - 1 + 2*step}
	}
	// The trainer's report right after the seal, and a second one naming
	// a digest no order seals.
	facts := slices.Clone(src.facts[:sealedAt])
	facts = append(facts, gradient(1, digest), gradient(2, "sha256:"+strings.Repeat("0", 64)))
	facts = append(facts, src.facts[sealedAt:]...)
	for i := range facts {
		facts[i].Seq = uint64(i + 1)
	}
	m := &memSource{run: src.run, facts: facts}
	rep, err := Reorder(context.Background(), m, ReorderOptions{Reorderings: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("a reordering of a run whose trainer reported the sealed digest differs: %s", rep.Difference)
	}
	mismatches := 0
	want, _, err := foldFree(context.Background(), src.run, func(run string) applier { return projections.NewFold(run) }, facts, identity(len(facts)), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range want {
		if d.mismatch != nil {
			mismatches++
		}
	}
	if mismatches != 1 {
		t.Fatalf("%d digest mismatches in log order, want the one of step 2", mismatches)
	}
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
