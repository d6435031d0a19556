package projections

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func sameDecisions(t *testing.T, what string, got, want []Decision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d decisions, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Run != w.Run || g.Kind != w.Kind || g.Seq != w.Seq || !bytes.Equal(g.Value, w.Value) || !bytes.Equal(g.Samples, w.Samples) {
			t.Fatalf("%s: decision %d differs\ngot  %s %s\nwant %s %s", what, i, g.Kind, clip(string(g.Value)), w.Kind, clip(string(w.Value)))
		}
	}
}

func sameStore(t *testing.T, what string, got, want *MemStore) {
	t.Helper()
	gk, wk := got.Keys(), want.Keys()
	if !slices.EqualFunc(gk, wk, bytes.Equal) {
		t.Fatalf("%s: stores hold different keys (%d and %d)", what, len(gk), len(wk))
	}
	for _, k := range gk {
		gv, _, _ := got.Get(k)
		wv, _, _ := want.Get(k)
		if !bytes.Equal(gv, wv) {
			t.Fatalf("%s: stores differ at key %q", what, k)
		}
	}
}

func TestDeterminism(t *testing.T) {
	recs := records(t, buildProducerRun(t).canonical)
	fold := func(recs []Record) ([]Decision, *MemStore) {
		f, s := NewFold(testRun), NewMemStore()
		var out []Decision
		for _, r := range recs {
			ds, err := f.Apply(s, r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ds...)
		}
		return out, s
	}
	want, wantStore := fold(recs)
	if len(want) == 0 {
		t.Fatal("no decisions")
	}

	t.Run("twice", func(t *testing.T) {
		got, gotStore := fold(recs)
		sameDecisions(t, "second fold", got, want)
		sameStore(t, "second fold", gotStore, wantStore)
	})

	t.Run("restart", func(t *testing.T) {
		// Stop after every prefix, copy the state as a restarted projector
		// would reopen it, and go on with a new Fold.
		for cut := range len(recs) + 1 {
			got, s := fold(recs[:cut])
			restored := s.Clone()
			f := NewFold(testRun)
			for _, r := range recs[cut:] {
				ds, err := f.Apply(restored, r)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ds...)
			}
			sameDecisions(t, fmt.Sprintf("restart after %d records", cut), got, want)
			sameStore(t, fmt.Sprintf("restart after %d records", cut), restored, wantStore)
		}
	})

	t.Run("re-emission", func(t *testing.T) {
		// A projector that applied a record, emitted its decisions and
		// crashed before committing state and offset applies the record
		// again to the state before it: the decisions are byte-identical.
		f, s := NewFold(testRun), NewMemStore()
		for i, r := range recs {
			lost, err := f.Apply(s.Clone(), r)
			if err != nil {
				t.Fatal(err)
			}
			again, err := f.Apply(s, r)
			if err != nil {
				t.Fatal(err)
			}
			sameDecisions(t, fmt.Sprintf("record %d", i), again, lost)
		}
	})
}

// Turn tokens leave the Store once their batch is sealed or their group is
// not trained, and nothing of an open batch lingers after the last seal.
func TestStateIsReleased(t *testing.T) {
	r := buildProducerRun(t)
	f, s := NewFold(testRun), NewMemStore()
	maxTurns := 0
	for _, rec := range records(t, r.canonical) {
		if _, err := f.Apply(s, rec); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range s.Keys() {
			if bytes.HasPrefix(k, []byte(pfxTurn)) {
				n++
			}
		}
		maxTurns = max(maxTurns, n)
	}
	if maxTurns == 0 {
		t.Fatal("the run stored no turn tokens")
	}
	for _, k := range s.Keys() {
		for _, p := range []string{pfxTurn, pfxOpen, pfxDrop} {
			if bytes.HasPrefix(k, []byte(p)) {
				t.Errorf("key %q is still held after every batch was sealed", k)
			}
		}
	}
}

// Tokens no sample can use leave the Store by a rule of the fold, so replay
// drops exactly what the projector dropped (docs/design.md §6.1): a closed
// group whose verifier never answered releases its attempts' tokens at the
// close, and tokens sent for an attempt that never starts are never kept.
func TestOrphanedTokensAreReleased(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.attempt("g1/a", "g1", "").tokenTurn("g1/a", 0, 0, []int32{1}, []int32{2, 3}).finished("g1/a")
	b.attempt("g1/b", "g1", "").tokenTurn("g1/b", 0, 0, nil, []int32{4}).finished("g1/b")
	b.closed("g1")
	b.tokenTurn("lost/a", 0, 0, []int32{5}, []int32{6, 7}) // its attempt.started never comes
	ds, s := b.foldWith(FoldOptions{})
	for _, k := range s.Keys() {
		if bytes.HasPrefix(k, []byte(pfxTurn)) {
			t.Errorf("key %q is still held: no sample can use it", k)
		}
	}
	fs := findingsOf(t, ds)
	if len(fs) != 1 || fs[0].Kind != FindingUnstartedTokens || fs[0].Attempt != "lost/a" {
		t.Errorf("got findings %+v, want one unstarted_tokens about lost/a", fs)
	}
}
