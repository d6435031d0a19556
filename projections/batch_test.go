package projections

import (
	"maps"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func turnStaleness(a BatchAttempt) (st []int64, trained []bool) {
	for _, t := range a.Turns {
		st = append(st, t.Staleness)
		trained = append(trained, t.Trained)
	}
	return st, trained
}

func TestStaleness(t *testing.T) {
	// One group per batch, max_staleness 2. Batch k trains from version
	// k−1, and a turn of version v has staleness (k−1) − v.
	b := newRun(t).start(events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1), MaxStaleness: ptr(2), EnforceAdmission: ptr(false)}).task("t1")
	pair := func(g string, versions ...int64) {
		b.group(g, "t1", 2, events.PurposeTrain)
		b.solved(g+"/a", g, true, 4, versions...)
		b.solved(g+"/b", g, false, 1, versions...)
	}
	pair("g1", 0)    // batch 1: staleness 0
	pair("g2", 0)    // batch 2: staleness 1
	pair("g3", 0)    // batch 3: staleness 2 = max_staleness: trains
	pair("g4", 0, 1) // batch 4: turn 0 staleness 3 (masked), turn 1 staleness 2 (trains)
	pair("g5", 0, 0) // would be batch 5: staleness 4 and 4, nothing trains: fully_stale
	pair("g6", 3)    // batch 5 after all: staleness 4 − 3 = 1
	pair("g7", 4, 7) // batch 6: turn 0 staleness 5 − 4 = 1, turn 1 staleness 5 − 7 = −2: masked and flagged
	ds := b.fold()
	ms := manifestsOf(t, ds)
	if len(ms) != 6 {
		t.Fatalf("got %d batches, want 6", len(ms))
	}
	for _, tc := range []struct {
		batch   int
		group   string
		st      []int64
		trained []bool
		dropped []DroppedGroup
	}{
		{1, "g1", []int64{0}, []bool{true}, []DroppedGroup{}},
		{2, "g2", []int64{1}, []bool{true}, []DroppedGroup{}},
		{3, "g3", []int64{2}, []bool{true}, []DroppedGroup{}},
		{4, "g4", []int64{3, 2}, []bool{false, true}, []DroppedGroup{}},
		{5, "g6", []int64{1}, []bool{true}, []DroppedGroup{{Group: "g5", Task: "t1", Reason: DropFullyStale}}},
		{6, "g7", []int64{1, -2}, []bool{true, false}, []DroppedGroup{}},
	} {
		m := ms[tc.batch-1]
		if m.Seq != uint64(tc.batch) || m.TrainerVersion != uint64(tc.batch-1) {
			t.Errorf("batch %d: got seq %d trainer_version %d", tc.batch, m.Seq, m.TrainerVersion)
		}
		if got := groupIDs(m); !slices.Equal(got, []string{tc.group}) {
			t.Errorf("batch %d: got groups %v, want [%s]", tc.batch, got, tc.group)
			continue
		}
		for _, a := range m.Groups[0].Attempts {
			st, trained := turnStaleness(a)
			if !slices.Equal(st, tc.st) || !slices.Equal(trained, tc.trained) {
				t.Errorf("batch %d %s: got staleness %v trained %v, want %v %v", tc.batch, a.Attempt, st, trained, tc.st, tc.trained)
			}
		}
		if !slices.Equal(m.Dropped, tc.dropped) {
			t.Errorf("batch %d: got dropped %v, want %v", tc.batch, m.Dropped, tc.dropped)
		}
	}

	// Batch 4: two attempts with turns at versions 0 and 1, k−1 = 3.
	//   staleness 3, 2 for each: {"2":2, "3":2}; trained turns 2 of 4
	//   in flight: last − first = 1 − 0 = 1 for both
	//   in queue: (k−1) − last = 3 − 1 = 2 for both
	want := BatchStats{Groups: 1, Attempts: 2, Turns: 4, TrainedTurns: 2,
		StalenessHistogram: map[string]int{"2": 2, "3": 2}, InFlight: map[string]int{"1": 2}, InQueue: map[string]int{"2": 2}}
	got := ms[3].Stats
	if got.Groups != want.Groups || got.Attempts != want.Attempts || got.Turns != want.Turns || got.TrainedTurns != want.TrainedTurns ||
		!maps.Equal(got.StalenessHistogram, want.StalenessHistogram) || !maps.Equal(got.InFlight, want.InFlight) || !maps.Equal(got.InQueue, want.InQueue) {
		t.Errorf("batch 4 stats: got %+v, want %+v", got, want)
	}

	fs := findingsOf(t, ds)
	if len(fs) != 2 {
		t.Fatalf("got findings %v, want two negative_staleness", fs)
	}
	for _, f := range fs {
		if f.Kind != FindingNegativeStaleness || f.Group != "g7" || f.Batch != 6 || !slices.Equal(f.Turns, []int64{1}) {
			t.Errorf("got finding %+v, want negative_staleness of g7 turn 1 in batch 6", f)
		}
	}
}

// A batch holds batch_groups groups in completion order, and its dropped
// list names the groups dropped since the previous batch's watermark.
func TestBatchFilling(t *testing.T) {
	b := newRun(t).start(events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(2), EnforceAdmission: ptr(false)}).task("t1")
	zero := func(g string) {
		b.group(g, "t1", 2, events.PurposeTrain)
		b.solved(g+"/a", g, true, 4, 0)
		b.solved(g+"/b", g, true, 4, 0)
	}
	// g2 is declared first but completes after g1.
	b.group("g2", "t1", 2, events.PurposeTrain)
	b.solved("g2/a", "g2", true, 4, 0)
	filler(b, "g1")
	b.solved("g2/b", "g2", false, 0, 0)
	zero("z1")
	filler(b, "g3")
	zero("z2")
	filler(b, "g4")
	zero("z3") // after batch 2: pending
	ms := manifestsOf(t, b.fold())
	if len(ms) != 2 {
		t.Fatalf("got %d batches, want 2", len(ms))
	}
	for i, want := range []struct {
		groups  []string
		dropped []DroppedGroup
	}{
		{[]string{"g1", "g2"}, []DroppedGroup{}},
		{[]string{"g3", "g4"}, []DroppedGroup{{"z1", "t1", DropZeroSignal}, {"z2", "t1", DropZeroSignal}}},
	} {
		if got := groupIDs(ms[i]); !slices.Equal(got, want.groups) {
			t.Errorf("batch %d: got groups %v, want %v", i+1, got, want.groups)
		}
		if !slices.Equal(ms[i].Dropped, want.dropped) {
			t.Errorf("batch %d: got dropped %v, want %v", i+1, ms[i].Dropped, want.dropped)
		}
	}
}
