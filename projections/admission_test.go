package projections

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// probes adds a probe group of n attempts of which the first passes pass.
func probes(b *runBuilder, group, task string, n, passes int) {
	b.group(group, task, n, events.PurposeProbe)
	for i := range n {
		b.solved(fmt.Sprintf("%s/p%02d", group, i), group, i < passes, 0)
	}
}

func TestAdmissionBand(t *testing.T) {
	// min_probes 20, pass_band [0.15, 0.85] inclusive. 3/20 and 17/20 are
	// correctly rounded to the same doubles as the literals 0.15 and 0.85,
	// so the ends of the band are hit exactly.
	for _, tc := range []struct {
		passes int
		kind   events.Type
		rate   float64
	}{
		{2, KindTaskRejected, 0.1},   // 2/20, just below the band
		{3, KindTaskAdmitted, 0.15},  // 3/20 = 0.15, the lower end
		{10, KindTaskAdmitted, 0.5},  // 10/20
		{17, KindTaskAdmitted, 0.85}, // 17/20 = 0.85, the upper end
		{18, KindTaskRejected, 0.9},  // 18/20, just above the band
	} {
		t.Run(fmt.Sprintf("%d of 20", tc.passes), func(t *testing.T) {
			b := newRun(t).start(events.RunConfig{MinProbes: ptr(20)}).task("t1")
			probes(b, "p1", "t1", 20, tc.passes)
			got := admissionsOf(t, b.fold())
			want := []admissionOf{{tc.kind, Admission{Task: "t1", Probes: 20, Passes: int64(tc.passes), PassRate: tc.rate}}}
			if !slices.Equal(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestAdmissionOnce(t *testing.T) {
	// Two probe groups of 10 count together: the task is decided when the
	// second completes (3 + 1 passes of 20 = 0.2), once; a third probe
	// group changes nothing.
	b := newRun(t).start(events.RunConfig{MinProbes: ptr(20)}).task("t1")
	probes(b, "p1", "t1", 10, 3)
	probes(b, "p2", "t1", 10, 1)
	probes(b, "p3", "t1", 10, 10)
	ds := b.fold()
	got := admissionsOf(t, ds)
	want := []admissionOf{{KindTaskAdmitted, Admission{Task: "t1", Probes: 20, Passes: 4, PassRate: 0.2}}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if d := ds[0]; d.Seq != 1 || d.ID != events.DecisionID(testRun, KindTaskAdmitted, 1) {
		t.Errorf("got decision %s seq %d, want the first task.admitted", d.ID, d.Seq)
	}
}

func TestUnadmitted(t *testing.T) {
	// Defaults: enforce_admission, min_probes 4, band [0.15, 0.85].
	b := newRun(t).start(events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1)})
	b.task("t-in").task("t-out").task("t-pending").task("t-late")
	probes(b, "p-in", "t-in", 4, 2)   // 2/4 = 0.5: admitted
	probes(b, "p-out", "t-out", 4, 0) // 0/4: rejected
	b.group("e1", "t-in", 2, events.PurposeEval)
	b.solved("e1/a", "e1", true, 4, 0)
	b.solved("e1/b", "e1", false, 0, 0)
	train := func(g, task string) {
		b.group(g, task, 2, events.PurposeTrain)
		b.solved(g+"/a", g, true, 4, 0)
		b.solved(g+"/b", g, false, 1, 0)
	}
	train("g-out", "t-out")
	train("g-pending", "t-pending")
	// t-late is admitted only after its train group completed: too late.
	train("g-late", "t-late")
	probes(b, "p-late", "t-late", 4, 1)
	train("g-in", "t-in")
	ds := b.fold()
	ms := manifestsOf(t, ds)
	if len(ms) != 1 {
		t.Fatalf("got %d batches, want 1", len(ms))
	}
	if got := groupIDs(ms[0]); !slices.Equal(got, []string{"g-in"}) {
		t.Errorf("got groups %v, want [g-in]", got)
	}
	want := []DroppedGroup{{"g-out", "t-out", DropUnadmitted}, {"g-pending", "t-pending", DropUnadmitted}, {"g-late", "t-late", DropUnadmitted}}
	if !slices.Equal(ms[0].Dropped, want) {
		t.Errorf("got dropped %v, want %v", ms[0].Dropped, want)
	}
	var decided []string
	for _, a := range admissionsOf(t, ds) {
		decided = append(decided, string(a.Kind)+" "+a.Task)
	}
	if want := []string{"task.admitted t-in", "task.rejected t-out", "task.admitted t-late"}; !slices.Equal(decided, want) {
		t.Errorf("got admissions %v, want %v", decided, want)
	}
	if fs := findingsOf(t, ds); len(fs) != 0 {
		t.Errorf("got findings %+v, want none", fs)
	}
}
