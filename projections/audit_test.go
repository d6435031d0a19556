package projections

import (
	"errors"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func TestDuplicates(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.solved("a", "g1", true, 4, 0)
	b.attempt("b", "g1", "").turns("b", 0).finished("b")
	reward := b.event("verifier", &events.RewardComputed{Attempt: "b", Passed: false, TestsPassed: 1, TestsTotal: 4, Verifier: "pytest"})
	conflicting := reward
	conflicting.Data = &events.RewardComputed{Attempt: "b", Passed: true, TestsPassed: 4, TestsTotal: 4, Verifier: "pytest"}
	recs := b.records()
	first := records(t, []events.Event{conflicting, reward})
	// The conflicting version comes first and wins; the identical redelivery
	// of it is dropped silently, the other version is a finding.
	recs = append(recs, first[0], first[0], first[1])
	for i := range recs {
		recs[i].Offset = int64(i)
	}
	// a and b both pass with the same length: zero signal, dropped; a
	// second group seals batch 1, naming the drop.
	b2 := newRun(t)
	b2.n = 1000
	b2.groups["g2"] = "t1"
	filler(b2, "g2")
	recs = append(recs, records(t, b2.evs)...)
	for i := range recs {
		recs[i].Offset = 500 + int64(i)
	}
	ds, err := FoldAll(testRun, recs)
	if err != nil {
		t.Fatal(err)
	}
	fs := findingsOf(t, ds)
	if len(fs) != 1 || fs[0].Kind != FindingConflictingDuplicate || fs[0].Event != reward.ID || fs[0].Type != events.TypeRewardComputed {
		t.Fatalf("got findings %+v, want one conflicting_duplicate of %s", fs, reward.ID)
	}
	// The finding is caused by the third of the three deliveries.
	conflictSeq := uint64(len(recs) - len(b2.evs))
	if env := envelopeOf(t, ds[0]); env.Fact.Seq != conflictSeq {
		t.Errorf("finding at fact seq %d, want %d (duplicates count)", env.Fact.Seq, conflictSeq)
	}
	ms := manifestsOf(t, ds)
	if len(ms) != 1 {
		t.Fatalf("got %d batches, want 1", len(ms))
	}
	if want := []DroppedGroup{{"g1", "t1", DropZeroSignal}}; !slices.Equal(ms[0].Dropped, want) {
		t.Errorf("got dropped %v, want %v: the first version of the reward should stand", ms[0].Dropped, want)
	}
	if ms[0].Tree.Size != uint64(len(recs)) {
		t.Errorf("got tree size %d, want %d", ms[0].Tree.Size, len(recs))
	}
}

func TestGradientDigest(t *testing.T) {
	build := func() *runBuilder {
		b := newRun(t).start(openConfig()).task("t1")
		return filler(b, "g1")
	}
	ms := manifestsOf(t, build().fold())
	if len(ms) != 1 {
		t.Fatalf("got %d batches, want 1", len(ms))
	}
	sealed := ms[0].Digest
	other := "sha256:" + "00000000000000000000000000000000000000000000000000000000000000ff"
	for _, tc := range []struct {
		name   string
		batch  int64
		digest string
		want   []Finding
	}{
		{"the sealed digest", 1, sealed, nil},
		{"another digest", 1, other, []Finding{{Kind: FindingBatchDigestMismatch, Batch: 1, Want: sealed, Got: other}}},
		{"a batch never sealed", 2, sealed, []Finding{{Kind: FindingUnknownBatch, Batch: 2, Got: sealed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := build().gradient(tc.batch, tc.digest)
			var got []Finding
			for _, f := range findingsOf(t, b.fold()) {
				f.Detail, f.Event, f.Type = "", "", ""
				got = append(got, f)
			}
			if !slices.EqualFunc(got, tc.want, findingEqual) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func findingEqual(a, b Finding) bool {
	return a.Kind == b.Kind && a.Detail == b.Detail && a.Event == b.Event && a.Type == b.Type && a.Task == b.Task &&
		a.Group == b.Group && a.Attempt == b.Attempt && slices.Equal(a.Turns, b.Turns) && a.Batch == b.Batch && a.Want == b.Want && a.Got == b.Got
}

func TestFindings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *runBuilder)
		want  []Finding // without detail, event and type
	}{
		{
			name: "turn gap",
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeTrain)
				b.attempt("a", "g1", "").turnAt("a", 1, 0, 10).turnAt("a", 3, 0, 10).finished("a").reward("a", true, 4, 4)
				b.solved("b", "g1", false, 0, 0)
			},
			want: []Finding{{Kind: FindingTurnGap, Group: "g1", Attempt: "a", Turns: []int64{0, 2}}},
		},
		{
			name: "version jump",
			// An eval group: checked at completion like any other, and
			// never judged for staleness.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeEval)
				b.solved("a", "g1", true, 4, 0, 2, 1, 2, 0)
				b.solved("b", "g1", false, 0, 0)
			},
			want: []Finding{{Kind: FindingVersionJump, Group: "g1", Attempt: "a", Turns: []int64{2, 4}}},
		},
		{
			name: "unknown entities at completion",
			build: func(b *runBuilder) {
				b.group("g1", "t-nowhere", 2, events.PurposeTrain)
				b.solved("a", "g1", true, 4, 0)
				b.attempt("b", "g1", "ghost").turns("b", 0).finished("b").reward("b", false, 0, 4)
			},
			want: []Finding{
				{Kind: FindingUnknownEntity, Task: "t-nowhere", Group: "g1"},
				{Kind: FindingUnknownEntity, Group: "g1", Attempt: "b"},
			},
		},
		{
			name: "facts after completion",
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeTrain)
				b.solved("a", "g1", true, 4, 0)
				b.solved("b", "g1", false, 0, 0)
				b.turnAt("a", 1, 0, 10)
				b.turnAt("a", 2, 0, 10) // one finding per attempt
				b.compact("b", 0)
				b.attempt("c", "g1", "")
				b.turns("c", 0)
			},
			want: []Finding{
				{Kind: FindingLateFact, Group: "g1", Attempt: "a"},
				{Kind: FindingLateFact, Group: "g1", Attempt: "b"},
				{Kind: FindingLateFact, Group: "g1", Attempt: "c"},
			},
		},
		{
			name: "second declarations",
			build: func(b *runBuilder) {
				b.start(events.RunConfig{GroupSize: ptr(3)})
				b.task("t1")
				b.group("g1", "t1", 2, events.PurposeTrain).group("g1", "t1", 2, events.PurposeTrain)
				b.attempt("a", "g1", "").attempt("a", "g1", "")
				b.turns("a", 0).turnAt("a", 0, 0, 10)
				b.finished("a").reward("a", true, 4, 4).reward("a", false, 0, 4)
				b.solved("b", "g1", false, 0, 0)
				b.closed("g1").closed("g1")
			},
			want: []Finding{
				{Kind: FindingDuplicateRunStarted},
				{Kind: FindingDuplicateEntity, Task: "t1"},
				{Kind: FindingDuplicateEntity, Task: "t1", Group: "g1"},
				{Kind: FindingDuplicateEntity, Group: "g1", Attempt: "a"},
				{Kind: FindingDuplicateEntity, Attempt: "a", Turns: []int64{0}},
				{Kind: FindingDuplicateEntity, Group: "g1", Attempt: "a"},
				// g1 completed with both slots before it was closed; the
				// first close is harmless, the second is a repeat of nothing.
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newRun(t).start(openConfig()).task("t1")
			tc.build(b)
			var got []Finding
			for _, f := range findingsOf(t, b.fold()) {
				if f.Detail == "" {
					t.Errorf("finding %s has no detail", f.Kind)
				}
				f.Detail, f.Event, f.Type = "", "", ""
				got = append(got, f)
			}
			if !slices.EqualFunc(got, tc.want, findingEqual) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Until run.started arrives the defaults apply (enforce_admission true, 64
// groups per batch); the config of run.started applies from its position.
func TestConfigFromRunStarted(t *testing.T) {
	b := newRun(t).task("t1")
	filler(b, "g1") // defaults: t1 not admitted, so g1 is unadmitted
	b.start(openConfig())
	filler(b, "g2") // enforce_admission false, one group per batch
	ms := manifestsOf(t, b.fold())
	if len(ms) != 1 {
		t.Fatalf("got %d batches, want 1", len(ms))
	}
	if got := groupIDs(ms[0]); !slices.Equal(got, []string{"g2"}) {
		t.Errorf("got groups %v, want [g2]", got)
	}
	if want := []DroppedGroup{{"g1", "t1", DropUnadmitted}}; !slices.Equal(ms[0].Dropped, want) {
		t.Errorf("got dropped %v, want %v", ms[0].Dropped, want)
	}
}

func TestApplyRecords(t *testing.T) {
	b := newRun(t).start(openConfig())
	recs := b.records()
	f, s := NewFold(testRun), NewMemStore()

	other := recs[0]
	other.Event.Run = "run-2"
	if _, err := f.Apply(s, other); !errors.Is(err, ErrWrongRun) {
		t.Errorf("a record of another run: got %v, want ErrWrongRun", err)
	}
	if s.Len() != 0 {
		t.Errorf("a refused record wrote %d keys", s.Len())
	}

	// Value only: decoded by Apply. Event only: encoded by Apply. Both
	// take the same dedup key and bytes, so the second is a duplicate.
	if ds, err := f.Apply(s, Record{Value: recs[0].Value}); err != nil || len(ds) != 0 {
		t.Fatalf("value only: got %v, %v", ds, err)
	}
	if ds, err := f.Apply(s, Record{Event: recs[0].Event}); err != nil || len(ds) != 0 {
		t.Fatalf("event only: got %v, %v (want a silent duplicate)", ds, err)
	}
	ds, err := f.Apply(s, Record{Value: []byte(`{"id":"nope"}`), Partition: 3, Offset: 77})
	if err != nil {
		t.Fatal(err)
	}
	fs := findingsOf(t, ds)
	if len(fs) != 1 || fs[0].Kind != FindingUndecodable {
		t.Fatalf("got %+v, want one undecodable_fact", fs)
	}
	if got := envelopeOf(t, ds[0]).Fact; got != (FactPosition{Seq: 3, Partition: 3, Offset: 77}) {
		t.Errorf("got fact %+v, want seq 3 at 3/77", got)
	}
}
