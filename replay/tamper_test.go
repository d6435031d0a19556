package replay

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// forge writes an archive of a tampered history the way a forger who knows
// the format would: every frame, checksum, count and the final head are
// consistent, so the file opens. keepIndex leaves the exporter's leaf index
// of the original history in place; otherwise it is recomputed from the
// forged facts too.
func forge(t *testing.T, orig *memSource, facts []Fact, decisions []Recorded, keepIndex bool) *Archive {
	t.Helper()
	path := filepath.Join(t.TempDir(), "forged.rla")
	w, err := CreateArchive(path, orig.run, "forged")
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range facts {
		f.Seq = uint64(i + 1)
		if err := w.AddFact(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range decisions {
		if err := w.AddDecision(d); err != nil {
			t.Fatal(err)
		}
	}
	if keepIndex {
		w.spool.Close()
		os.Remove(w.spool.Name())
		if w.spool, err = os.CreateTemp(t.TempDir(), "leaves"); err != nil {
			t.Fatal(err)
		}
		w.spoolW = bufio.NewWriter(w.spool)
		for _, f := range orig.facts {
			w.spoolW.Write(projections.LeafHash(f.Value))
		}
		w.leaves = uint64(len(orig.facts))
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := OpenArchive(path)
	if err != nil {
		t.Fatalf("the forged archive does not open: %v", err)
	}
	return a
}

// changeByte changes one digit of a fact's latency_ms: still a valid
// event, a different fact.
func changeByte(t *testing.T, v []byte) []byte {
	i := bytes.Index(v, []byte(`"latency_ms":`))
	if i < 0 {
		t.Fatal("no latency_ms in the fact")
	}
	out := bytes.Clone(v)
	d := &out[i+len(`"latency_ms":`)]
	if *d == '9' {
		*d = '8'
	} else {
		*d++
	}
	return out
}

func TestTamper(t *testing.T) {
	src := planSource(t, smallRun, "tamper-run")
	// k is a turn in the middle of the run, not committed by a head of
	// its own size, and distinct from its neighbour.
	k := len(src.facts) / 2
	for !strings.Contains(string(src.facts[k-1].Value), `"turn.generated"`) {
		k++
	}
	facts := func() []Fact { return append([]Fact(nil), src.facts...) }
	decisions := func() []Recorded { return append([]Recorded(nil), src.decisions...) }

	inserted := func() []Fact {
		fs := facts()
		ev := events.New(src.run, "engine-99", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC),
			&events.ToolCalled{Attempt: "ghost", Turn: 0, Call: 0, Tool: "bash", DurationMS: 5})
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return append(fs[:k-1:k-1], append([]Fact{{Partition: 5, Offset: fs[k-1].Offset - 1, Value: v}}, fs[k-1:]...)...)
	}

	type want struct {
		what      string
		seq       uint64
		decisions bool // decisions diverge too
	}
	for _, tc := range []struct {
		name      string
		facts     []Fact
		decisions []Recorded
		keepIndex bool
		want      *want
	}{
		{name: "clean", facts: facts(), decisions: decisions(), keepIndex: true},
		{name: "one byte of a fact changed", keepIndex: true, decisions: decisions(),
			facts: func() []Fact { fs := facts(); fs[k-1].Value = changeByte(t, fs[k-1].Value); return fs }(),
			want:  &want{HistoryChanged, uint64(k), true}},
		{name: "a fact dropped", keepIndex: true, decisions: decisions(),
			facts: func() []Fact { fs := facts(); return append(fs[:k-1:k-1], fs[k:]...) }(),
			want:  &want{HistoryDropped, uint64(k), true}},
		{name: "a fact inserted", keepIndex: true, decisions: decisions(), facts: inserted(),
			want: &want{HistoryInserted, uint64(k), true}},
		{name: "two adjacent facts swapped", keepIndex: true, decisions: decisions(),
			facts: func() []Fact { fs := facts(); fs[k-1], fs[k] = fs[k], fs[k-1]; return fs }(),
			want:  &want{HistoryMoved, uint64(k), true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := verify(t, forge(t, src, tc.facts, tc.decisions, tc.keepIndex))
			if tc.want == nil {
				if !rep.OK() || rep.Matched != rep.Recorded || rep.HeadsChecked == 0 {
					t.Fatalf("a clean archive fails: %+v %v %v", rep, rep.First, rep.History)
				}
				return
			}
			if rep.OK() || rep.History == nil {
				t.Fatalf("not detected: first divergence %v, history %v", rep.First, rep.History)
			}
			if h := rep.History; h.What != tc.want.what || h.Seq != tc.want.seq || !h.Committed || h.From >= h.Seq || h.To < h.Seq {
				t.Errorf("got %s at fact %d (bounds %d..%d), want %s at fact %d: %s", h.What, h.Seq, h.From, h.To, tc.want.what, tc.want.seq, h.Detail)
			}
			if tc.want.decisions && (rep.First == nil || rep.First.Fact.Seq < tc.want.seq) {
				t.Errorf("got first divergence %v, want one caused at or after fact %d", rep.First, tc.want.seq)
			}
			t.Logf("history: %s", rep.History.Detail)
			t.Logf("first divergent decision: %v", rep.First)
		})
	}

	t.Run("a decision changed", func(t *testing.T) {
		ds := decisions()
		i, n := -1, 0
		for j, d := range ds {
			if strings.Contains(string(d.Value), `"type":"batch.sealed"`) {
				if n++; n == 2 {
					i = j
					break
				}
			}
		}
		v := string(ds[i].Value)
		at := strings.Index(v, `"trained":true`)
		ds[i].Value = []byte(v[:at] + `"trained":false` + v[at+len(`"trained":true`):])
		rep := verify(t, forge(t, src, facts(), ds, true))
		if rep.OK() || rep.History != nil {
			t.Fatalf("got history %v, first %v; want the decision alone named", rep.History, rep.First)
		}
		f := rep.First
		if f.Kind != projections.KindBatchSealed || f.Seq != 2 || f.Problem != DivergenceDiffers ||
			!strings.HasSuffix(f.Field, ".trained") || f.Recorded != "false" || f.Recomputed != "true" || rep.Divergences != 1 {
			t.Errorf("got %d divergences, first %v", rep.Divergences, f)
		}
		t.Log(f)
	})

	t.Run("index rewritten too", func(t *testing.T) {
		fs := facts()
		fs[k-1].Value = changeByte(t, fs[k-1].Value)
		rep := verify(t, forge(t, src, fs, decisions(), false))
		h := rep.History
		if h == nil || h.What != HistoryUnlocated || h.From >= uint64(k) || h.To < uint64(k) {
			t.Fatalf("got %+v, want the change bounded around fact %d", h, k)
		}
		t.Log(h.Detail)
	})

	t.Run("a decision dropped", func(t *testing.T) {
		ds := decisions()
		ds = append(ds[:3:3], ds[4:]...)
		rep := verify(t, forge(t, src, facts(), ds, true))
		if rep.OK() || rep.First.Problem != DivergenceNotRecorded {
			t.Fatalf("got %v", rep.First)
		}
	})
}

func TestVerifyTwiceIsIdentical(t *testing.T) {
	src := planSource(t, smallRun, "twice")
	a, b := verify(t, src), verify(t, src)
	if !a.OK() || a.Recomputed != len(src.decisions) || a.Matched != a.Recomputed {
		t.Fatalf("got %+v", a)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two verifications differ: %+v, %+v", a, b)
	}
}
