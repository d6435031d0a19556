package replay

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

func headOf(t *testing.T, src Source, ref string) RecordedHead {
	t.Helper()
	heads, err := recordedHeads(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseHeadRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	h, err := findHead(heads, r)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// proofSuite runs against any source of one simulated run.
func proofSuite(t *testing.T, src Source, facts []Fact) {
	ctx := context.Background()
	b2 := headOf(t, src, "batch:2")
	// A turn the second batch committed to.
	var target Fact
	for _, f := range facts {
		if f.Seq > b2.Size/2 && strings.Contains(string(f.Value), `"turn.generated"`) {
			target = f
			break
		}
	}
	ev, err := events.Decode(target.Value)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ParseFactRef(ev.ID)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("inclusion", func(t *testing.T) {
		p, err := ProveInclusion(ctx, src, ref, HeadRef{Kind: "batch", N: 2})
		if err != nil {
			t.Fatal(err)
		}
		if p.Fact.Seq != target.Seq || p.Fact.ID != ev.ID || p.Head.Size != b2.Size || p.Head.Root != b2.Root {
			t.Fatalf("proved fact %d (%s) against %+v", p.Fact.Seq, p.Fact.ID, p.Head)
		}
		// Through a file: only the head is needed to check it.
		b, _ := json.Marshal(p)
		var back Proof
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := CheckProof(&back, b2.TreeHead); err != nil {
			t.Fatalf("the proof does not check: %v", err)
		}
		if n := len(p.Hashes); n > 20 {
			t.Errorf("%d hashes for a tree of %d leaves", n, b2.Size)
		}

		wrongRoot := b2.TreeHead
		wrongRoot.Root = headOf(t, src, "batch:1").Root
		other := back
		otherFact := *back.Fact
		otherFact.Value = []byte(strings.Replace(string(otherFact.Value), `"turn":`, `"turn": `, 1))
		otherFact.LeafHash = hex.EncodeToString(projections.LeafHash(otherFact.Value))
		other.Fact = &otherFact
		for name, c := range map[string]struct {
			p    *Proof
			head projections.TreeHead
		}{
			"against another head":            {&back, headOf(t, src, "batch:3").TreeHead},
			"against the wrong root":          {&back, wrongRoot},
			"for a fact not in the history":   {&other, b2.TreeHead},
			"with the value and leaf at odds": {func() *Proof { q := back; f := *q.Fact; f.Value = otherFact.Value; q.Fact = &f; return &q }(), b2.TreeHead},
		} {
			if err := CheckProof(c.p, c.head); !errors.Is(err, ErrProof) {
				t.Errorf("%s: got %v, want ErrProof", name, err)
			}
		}
	})

	t.Run("default head", func(t *testing.T) {
		p, err := ProveInclusion(ctx, src, FactRef{Seq: 1}, HeadRef{})
		if err != nil {
			t.Fatal(err)
		}
		if first := headOf(t, src, "fact:1"); p.Head.Size != first.Size {
			t.Errorf("proved against size %d, want the first head, %d", p.Head.Size, first.Size)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		if _, err := ProveInclusion(ctx, src, FactRef{ID: "00000000-0000-7000-8000-000000000000"}, HeadRef{}); !errors.Is(err, ErrNoSuchFact) {
			t.Errorf("unknown fact: got %v", err)
		}
		late := FactRef{Seq: headOf(t, src, "batch:1").Size + 1}
		if _, err := ProveInclusion(ctx, src, late, HeadRef{Kind: "batch", N: 1}); !errors.Is(err, ErrNoSuchFact) {
			t.Errorf("a fact after the head: got %v", err)
		}
		if _, err := ProveInclusion(ctx, src, FactRef{Seq: 1}, HeadRef{Kind: "batch", N: 99}); !errors.Is(err, ErrNoSuchHead) {
			t.Errorf("an unrecorded head: got %v", err)
		}
	})

	t.Run("consistency", func(t *testing.T) {
		for _, pair := range [][2]string{{"batch:1", "batch:3"}, {"batch:1", "checkpoint:1"}, {"batch:2", "batch:2"}} {
			a, _ := ParseHeadRef(pair[0])
			b, _ := ParseHeadRef(pair[1])
			p, err := ProveConsistency(ctx, src, a, b)
			if err != nil {
				t.Fatalf("%v: %v", pair, err)
			}
			old, cur := headOf(t, src, pair[0]).TreeHead, headOf(t, src, pair[1]).TreeHead
			if err := CheckProof(p, old, cur); err != nil {
				t.Errorf("%v: %v", pair, err)
			}
			if old != cur {
				if err := CheckProof(p, cur, old); !errors.Is(err, ErrProof) {
					t.Errorf("%v reversed: got %v, want ErrProof", pair, err)
				}
				forged := *p
				forged.Hashes = append([]string{strings.Repeat("0", 64)}, p.Hashes[1:]...)
				if err := CheckProof(&forged, old, cur); !errors.Is(err, ErrProof) {
					t.Errorf("%v with a forged hash: got %v, want ErrProof", pair, err)
				}
			}
		}
	})
}

func TestProofs(t *testing.T) {
	src := planSource(t, smallRun, "proofs")
	t.Run("memory", func(t *testing.T) { proofSuite(t, src, src.facts) })
	t.Run("archive", func(t *testing.T) { proofSuite(t, export(t, src), src.facts) })
}

func TestParseRefs(t *testing.T) {
	for in, want := range map[string]HeadRef{"3": {"batch", 3}, "batch:3": {"batch", 3}, "checkpoint:2": {"checkpoint", 2}, "fact:10": {"fact", 10}} {
		if got, err := ParseHeadRef(in); err != nil || got != want {
			t.Errorf("ParseHeadRef(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "batch:", "size:3", "batch:-1"} {
		if _, err := ParseHeadRef(in); err == nil {
			t.Errorf("ParseHeadRef(%q) accepted", in)
		}
	}
	if _, err := ParseHead("12:" + strings.Repeat("ab", 32)); err != nil {
		t.Error(err)
	}
	for _, in := range []string{"12", "x:" + strings.Repeat("ab", 32), "12:abc"} {
		if _, err := ParseHead(in); err == nil {
			t.Errorf("ParseHead(%q) accepted", in)
		}
	}
}
