package simulate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

var update = flag.Bool("update", false, "rewrite the golden manifests")

// The batch manifests and admissions of a seeded simulated run, folded in
// the plan's virtual-time order, are pinned byte for byte: a change to the
// simulator's content or to a projection rule shows up here as a diff to
// review (refresh with -update).
func TestGoldenManifests(t *testing.T) {
	// max_staleness 0, so later batches mask turns and drop fully stale groups.
	// With text, so the facts' bytes (the tree roots) pin it as well.
	o := Options{Seed: 2026, Tasks: 24, Steps: 3, BatchGroups: 4, MaxTurns: 40, MaxStaleness: -1, Text: true}
	plan, err := Generate(o, "golden-run")
	if err != nil {
		t.Fatal(err)
	}
	var recs []projections.Record
	for i, ev := range plan.All() {
		// Ids are random UUIDv7s, and fact bytes are the Merkle leaves the
		// manifests' tree roots commit to: give each fact an id derived
		// from its position so the pinned roots and digests are stable.
		ev.ID = events.DecisionID("golden-run", "fact", uint64(i))
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, projections.Record{Value: v, Event: ev, Partition: 0, Offset: int64(i)})
	}
	ds, err := projections.FoldAll("golden-run", recs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "facts-sample.ndjson", sampleFacts(t, recs))
	var admissions bytes.Buffer
	batches := 0
	for _, d := range ds {
		switch d.Kind {
		case projections.KindBatchSealed:
			batches++
			var env struct{ Data json.RawMessage }
			if err := json.Unmarshal(d.Value, &env); err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, env.Data, "", "  "); err != nil {
				t.Fatal(err)
			}
			golden(t, fmt.Sprintf("batch-%d.json", d.Seq), append(pretty.Bytes(), '\n'))
			lines, err := projections.SamplesNDJSON(d.Samples)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, fmt.Sprintf("batch-%d.samples.ndjson", d.Seq), lines)
		case projections.KindTaskAdmitted, projections.KindTaskRejected:
			admissions.Write(d.Value)
			admissions.WriteByte('\n')
		}
	}
	golden(t, "admissions.ndjson", admissions.Bytes())
	// Fully stale groups use up the plan's groups: fewer batches than steps.
	if batches < 2 {
		t.Errorf("got %d batches, want at least 2", batches)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update and review the diff)", path)
	}
}

// sampleFacts picks records to read in review: the first task, the first
// turn that spans a weight update, the tool calls of its turn, and the
// first tool call whose output was cut.
func sampleFacts(t *testing.T, recs []projections.Record) []byte {
	t.Helper()
	var out bytes.Buffer
	var spanning *events.TurnGenerated
	task, cut := false, false
	for _, r := range recs {
		keep := false
		switch d := r.Event.Data.(type) {
		case *events.TaskRegistered:
			keep, task = !task, true
		case *events.TurnGenerated:
			if spanning == nil && len(d.VersionSegments) > 1 {
				spanning, keep = d, true
			}
		case *events.ToolCalled:
			if spanning != nil && d.Attempt == spanning.Attempt && d.Turn == spanning.Turn {
				keep = true
			} else if !cut && d.OutputCut > 0 {
				keep, cut = true, true
			}
		}
		if keep {
			out.Write(r.Value)
			out.WriteByte('\n')
		}
	}
	if spanning == nil || !cut {
		t.Errorf("no turn spanning a weight update (%v) or no cut tool output (%v)", spanning != nil, cut)
	}
	return out.Bytes()
}
