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
