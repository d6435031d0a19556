package projections

import (
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// filler adds a train group of two attempts (a pass and a 1-of-4 fail) that
// is always used; it seals a batch under openConfig.
func filler(b *runBuilder, group string) *runBuilder {
	b.group(group, "t1", 2, events.PurposeTrain)
	b.solved(group+"/a", group, true, 4, 0)
	return b.solved(group+"/b", group, false, 1, 0)
}

func TestGroupCompletion(t *testing.T) {
	type batch struct {
		groups   []string
		attempts [][]string
		dropped  []DroppedGroup
	}
	for _, tc := range []struct {
		name     string
		build    func(b *runBuilder)
		batches  []batch
		findings []string
	}{
		{
			name: "a retry takes the slot of the attempt it retries",
			// Slots: {a1}, {a2, a2r}. a2 failed; a2r fills its slot, so the
			// group completes at a2r's reward with a1 and a2r.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.attempt("a2", "g1", "").turns("a2", 0).failed("a2")
				b.attempt("a2r", "g1", "a2").turns("a2r", 0).finished("a2r").reward("a2r", false, 1, 4)
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2r"}}, dropped: []DroppedGroup{}}},
		},
		{
			name: "a retry started before its original lands in the same slot",
			// a2r names a2 before a2 started: its slot is "a2" all along,
			// so a2's arrival does not open a third slot.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeTrain)
				b.attempt("a2r", "g1", "a2").turns("a2r", 0)
				b.attempt("a2", "g1", "").failed("a2")
				b.finished("a2r").reward("a2r", false, 1, 4)
				b.solved("a1", "g1", true, 4, 0)
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2r"}}, dropped: []DroppedGroup{}}},
		},
		{
			name: "a chain of retries is one slot, represented by its first rewarded attempt",
			// Size 3. Slots: {a1}, {a2, a2r, a2rr}, {a3}. a2 is rewarded
			// before a2rr; the slot counts once, and a2 represents it.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.solved("a2", "g1", false, 1, 0)
				b.attempt("a2r", "g1", "a2").failed("a2r")
				b.attempt("a2rr", "g1", "a2r").turns("a2rr", 0).finished("a2rr").reward("a2rr", false, 2, 4)
				b.solved("a3", "g1", false, 3, 0)
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2", "a3"}}, dropped: []DroppedGroup{}}},
		},
		{
			name: "group.closed below min_group is infra_lost",
			// Size 3, min_group 2: one rewarded slot of three when closed.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.attempt("a2", "g1", "").failed("a2")
				b.attempt("a3", "g1", "").failed("a3")
				b.closed("g1")
				filler(b, "g2")
			},
			batches: []batch{{groups: []string{"g2"}, attempts: [][]string{{"g2/a", "g2/b"}},
				dropped: []DroppedGroup{{Group: "g1", Task: "t1", Reason: DropInfraLost}}}},
		},
		{
			name: "group.closed at min_group proceeds with the rewarded slots",
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.solved("a2", "g1", false, 2, 0)
				b.attempt("a3", "g1", "").failed("a3")
				b.closed("g1")
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2"}}, dropped: []DroppedGroup{}}},
		},
		{
			name: "group.closed before the last reward waits for the verdict owed",
			// a2 finished before the close, so its reward is owed: the
			// group completes at it, not at group.closed.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.attempt("a2", "g1", "").turns("a2", 0).finished("a2")
				b.attempt("a3", "g1", "").failed("a3")
				b.closed("g1")
				b.reward("a2", false, 2, 4)
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2"}}, dropped: []DroppedGroup{}}},
		},
		{
			name: "group.closed does not wait for an attempt that never finished",
			// At the close a3 is still running: nothing is owed, the group
			// completes with a1 and a2, and a3's reward is late.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.solved("a2", "g1", false, 2, 0)
				b.attempt("a3", "g1", "").turns("a3", 0)
				b.closed("g1")
				b.finished("a3").reward("a3", true, 4, 4)
			},
			batches:  []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2"}}, dropped: []DroppedGroup{}}},
			findings: []string{FindingLateReward},
		},
		{
			name: "group.closed waits only for verdicts that can fill an empty slot",
			// a2 finished without a verdict, but its retry a2r filled the
			// slot: nothing is owed at the close.
			build: func(b *runBuilder) {
				b.group("g1", "t1", 3, events.PurposeTrain)
				b.solved("a1", "g1", true, 4, 0)
				b.attempt("a2", "g1", "").turns("a2", 0).finished("a2")
				b.attempt("a2r", "g1", "a2").turns("a2r", 0).finished("a2r").reward("a2r", false, 3, 4)
				b.attempt("a3", "g1", "").failed("a3")
				b.closed("g1")
				b.reward("a2", false, 0, 4)
			},
			batches:  []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2r"}}, dropped: []DroppedGroup{}}},
			findings: []string{FindingLateReward},
		},
		{
			name: "a reward after completion is late and changes nothing",
			build: func(b *runBuilder) {
				b.group("g1", "t1", 2, events.PurposeTrain)
				b.attempt("a3", "g1", "").turns("a3", 0)
				b.solved("a1", "g1", true, 4, 0)
				b.solved("a2", "g1", false, 1, 0)
				b.finished("a3").reward("a3", true, 4, 4)
			},
			batches:  []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2"}}, dropped: []DroppedGroup{}}},
			findings: []string{FindingLateReward},
		},
		{
			name: "facts out of causal order are held until they can be placed",
			// Rewards before attempt.started, turns before attempt.started,
			// attempts before group.started: group.started completes it.
			build: func(b *runBuilder) {
				b.groups["g1"] = "t1"
				b.reward("a1", true, 4, 4).reward("a2", false, 1, 4)
				b.turns("a1", 0).turns("a2", 0).finished("a1").finished("a2")
				b.attempt("a1", "g1", "").attempt("a2", "g1", "")
				b.group("g1", "t1", 2, events.PurposeTrain)
			},
			batches: []batch{{groups: []string{"g1"}, attempts: [][]string{{"a1", "a2"}}, dropped: []DroppedGroup{}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newRun(t).start(events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1), EnforceAdmission: ptr(false)}).task("t1")
			tc.build(b)
			ds := b.fold()
			ms := manifestsOf(t, ds)
			if len(ms) != len(tc.batches) {
				t.Fatalf("got %d batches, want %d", len(ms), len(tc.batches))
			}
			for i, want := range tc.batches {
				m := ms[i]
				if got := groupIDs(m); !slices.Equal(got, want.groups) {
					t.Errorf("batch %d: got groups %v, want %v", i+1, got, want.groups)
				}
				for j, g := range m.Groups {
					if got := attemptIDs(g); j < len(want.attempts) && !slices.Equal(got, want.attempts[j]) {
						t.Errorf("batch %d group %s: got attempts %v, want %v", i+1, g.Group, got, want.attempts[j])
					}
				}
				if !slices.Equal(m.Dropped, want.dropped) {
					t.Errorf("batch %d: got dropped %v, want %v", i+1, m.Dropped, want.dropped)
				}
			}
			if got := findingKinds(t, ds); !slices.Equal(got, tc.findings) {
				t.Errorf("got findings %v, want %v", got, tc.findings)
			}
		})
	}
}

// The completion position is the fact at which the group first completes;
// the manifest quotes it, and the batch's watermark and tree size follow.
func TestCompletionPosition(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	filler(b, "g1")
	recs := b.records()
	ds, err := FoldAll(testRun, recs)
	if err != nil {
		t.Fatal(err)
	}
	ms := manifestsOf(t, ds)
	if len(ms) != 1 {
		t.Fatalf("got %d batches, want 1", len(ms))
	}
	last := recs[len(recs)-1] // g1/b's reward
	want := LogPosition{Partition: last.Partition, Offset: last.Offset}
	if got := ms[0].Groups[0].Completed; got != want {
		t.Errorf("completed: got %+v, want %+v", got, want)
	}
	if got := ms[0].Watermark; got != want {
		t.Errorf("watermark: got %+v, want %+v", got, want)
	}
	if got, want := ms[0].Tree, (TreeHead{Size: uint64(len(recs)), Root: referenceRoot(values(recs))}); got != want {
		t.Errorf("tree: got %+v, want %+v", got, want)
	}
	env := envelopeOf(t, ds[0])
	if got, want := env.Fact, (FactPosition{Seq: uint64(len(recs)), Partition: 3, Offset: last.Offset}); got != want {
		t.Errorf("fact: got %+v, want %+v", got, want)
	}
}

func TestSlotRoots(t *testing.T) {
	// a ← a-r1 ← a-r2 (a chain); x-r names x, not (yet) an attempt of the
	// group; c and d retry each other, e retries d: one slot named c.
	ms := []member{
		{id: "a-r2", a: attemptState{retryOf: "a-r1"}},
		{id: "a"},
		{id: "a-r1", a: attemptState{retryOf: "a"}},
		{id: "x-r", a: attemptState{retryOf: "x"}},
		{id: "e", a: attemptState{retryOf: "d"}},
		{id: "d", a: attemptState{retryOf: "c"}},
		{id: "c", a: attemptState{retryOf: "d"}},
	}
	index := map[string]int{}
	for i, m := range ms {
		index[m.id] = i
	}
	got := slotRoots(ms, index)
	want := []string{"a", "a", "a", "x", "c", "c", "c"}
	if !slices.Equal(got, want) {
		t.Errorf("got roots %v, want %v", got, want)
	}
}

// The verifier's reward can reach the log before the engine's last turns:
// they are different producers. The group waits for attempt.finished, so the
// batch is the same as when the reward comes last, turns included.
func TestRewardBeforeLastTurnsChangesNothing(t *testing.T) {
	build := func(rewardFirst bool) []Manifest {
		b := newRun(t).start(events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1), EnforceAdmission: ptr(false)}).task("t1")
		b.group("g1", "t1", 2, events.PurposeTrain)
		b.solved("a2", "g1", false, 1, 0, 0)
		b.attempt("a1", "g1", "").turns("a1", 0)
		if rewardFirst {
			b.reward("a1", true, 4, 4)
		}
		b.turnAt("a1", 1, 0, 50).turnAt("a1", 2, 0, 70).finished("a1")
		if !rewardFirst {
			b.reward("a1", true, 4, 4)
		}
		return manifestsOf(t, b.fold())
	}
	early, late := build(true), build(false)
	if len(early) != 1 || len(late) != 1 {
		t.Fatalf("got %d and %d batches, want 1 each", len(early), len(late))
	}
	turns := func(m Manifest) []int64 {
		var out []int64
		for _, a := range m.Groups[0].Attempts {
			if a.Attempt == "a1" {
				for _, tn := range a.Turns {
					out = append(out, tn.Turn)
				}
			}
		}
		return out
	}
	if got, want := turns(early[0]), []int64{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("reward first: a1 trains turns %v, want %v", got, want)
	}
	if early[0].Groups[0].Attempts[0].Advantage != late[0].Groups[0].Attempts[0].Advantage {
		t.Errorf("advantages differ with the reward's position")
	}
}
