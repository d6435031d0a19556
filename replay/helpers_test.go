package replay

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// memSource is a history held in memory: a simulated plan in its
// virtual-time order, with the decisions the fold concludes from it as
// the record. Tests tamper with it, or write it to an archive.
type memSource struct {
	run       string
	facts     []Fact
	decisions []Recorded
	// state is the size of the fold's state after the last fact: the key
	// and value bytes of its MemStore, and the keys.
	stateBytes, stateKeys int
}

func (m *memSource) Run() string      { return m.run }
func (m *memSource) Describe() string { return "memory " + m.run }

func (m *memSource) Facts(ctx context.Context, fn func(Fact) error) error {
	for _, f := range m.facts {
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (m *memSource) Decisions(ctx context.Context, fn func(Recorded) error) error {
	for _, d := range m.decisions {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// smallRun is a simulated run of about 11,000 facts: four batches and one
// checkpoint.
var smallRun = simulate.Options{Seed: 7, Tasks: 24, Steps: 4, BatchGroups: 4, MaxTurns: 80}

// planSource generates a run and folds it; facts sit at partition 5 at
// every other offset, as if another run shared the partition.
func planSource(t testing.TB, o simulate.Options, run string) *memSource {
	t.Helper()
	return planSourceUnder(t, o, run, 0)
}

// planSourceUnder is planSource with its decisions made under rule
// version rules (0: this build's).
func planSourceUnder(t testing.TB, o simulate.Options, run string, rules int) *memSource {
	t.Helper()
	plan, err := simulate.Generate(o, run)
	if err != nil {
		t.Fatal(err)
	}
	m := &memSource{run: run}
	var recs []projections.Record
	for i, ev := range plan.All() {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := Fact{Seq: uint64(i + 1), Partition: 5, Offset: 100 + 2*int64(i), Value: v}
		m.facts = append(m.facts, f)
		recs = append(recs, f.Record())
	}
	fold, store := projections.NewFoldWith(run, projections.FoldOptions{RuleVersion: rules}), projections.NewMemStore()
	var ds []projections.Decision
	for _, r := range recs {
		out, err := fold.Apply(store, r)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, out...)
	}
	m.stateBytes, m.stateKeys = store.Size(), store.Len()
	for i, d := range ds {
		m.decisions = append(m.decisions, Recorded{Partition: 5, Offset: int64(i), Value: d.Value})
	}
	return m
}

// export writes src to an archive in a temporary directory and opens it.
func export(t testing.TB, src Source) *Archive {
	t.Helper()
	path := filepath.Join(t.TempDir(), src.Run()+".rla")
	if _, err := Export(context.Background(), src, path, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := OpenArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func verify(t testing.TB, src Source) *Report {
	t.Helper()
	rep, err := Verify(context.Background(), src, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
