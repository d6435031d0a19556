package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A run recorded by a build whose defaults differ from this one's (here an
// efficiency_weight the run left out, taken as 0.2) verifies: replay folds
// with the configuration the run's batches recorded, not with today's
// defaults (docs/design.md §4.3), and the recorded batches say what it was.
func TestVerifyFoldsWithTheRecordedConfig(t *testing.T) {
	const run = "recorded-config"
	plan, err := simulate.Generate(smallRun, run)
	if err != nil {
		t.Fatal(err)
	}
	evs := plan.All()
	start := *evs[0].Data.(*events.RunStarted)
	start.Config.EfficiencyWeight = nil
	evs[0].Data = &start
	old := start.Config.Resolve()
	old.EfficiencyWeight = 0.2

	m := &memSource{run: run}
	fold, store := projections.NewFoldWith(run, projections.FoldOptions{Recorded: &old}), projections.NewMemStore()
	today, todayStore := projections.NewFold(run), projections.NewMemStore()
	differs := 0
	for i, ev := range evs {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := Fact{Seq: uint64(i + 1), Partition: 5, Offset: 100 + 2*int64(i), Value: v}
		m.facts = append(m.facts, f)
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		now, err := today.Apply(todayStore, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		for j, d := range ds {
			m.decisions = append(m.decisions, Recorded{Partition: 5, Offset: int64(len(m.decisions)), Value: d.Value})
			if j >= len(now) || !bytes.Equal(now[j].Value, d.Value) {
				differs++
			}
		}
	}
	if differs == 0 {
		t.Fatal("the run folds the same under both defaults: the test cannot tell them apart")
	}
	ms := 0
	for _, d := range m.decisions {
		if bytes.Contains(d.Value, []byte(`"type":"batch.sealed"`)) {
			ms++
			if !bytes.Contains(d.Value, []byte(`"efficiency_weight":0.2`)) {
				t.Fatalf("a recorded batch does not record the effective efficiency_weight 0.2: %.300s", d.Value)
			}
		}
	}
	if ms == 0 {
		t.Fatal("the run sealed no batch")
	}
	rep := verify(t, m)
	if !rep.OK() || rep.Matched != rep.Recorded {
		t.Errorf("verify: matched %d of %d, first divergence %+v; want every decision reproduced with the recorded config", rep.Matched, rep.Recorded, rep.First)
	}
}

// A run whose decisions name another rule version is not tampered with: it
// was folded under other rules, and replay says exactly that.
func TestVerifyNamesAnotherRuleVersion(t *testing.T) {
	m := planSource(t, simulate.Options{Seed: 3, Tasks: 8, Steps: 1, BatchGroups: 2, MaxTurns: 10}, "old-rules")
	now, old := projections.RuleVersion, projections.MinRuleVersion-1
	for i, d := range m.decisions {
		m.decisions[i].Value = bytes.Replace(d.Value, fmt.Appendf(nil, `"rule_version":%d,`, now), fmt.Appendf(nil, `"rule_version":%d,`, old), 1)
	}
	_, err := Verify(context.Background(), m, VerifyOptions{})
	if !errors.Is(err, ErrRuleVersion) {
		t.Fatalf("got %v, want ErrRuleVersion", err)
	}
	if want := fmt.Sprintf("run folded under rules v%d; this build implements v%d to v%d", old, projections.MinRuleVersion, now); err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

// A run sealed under an older rule version this build still implements
// is folded again under that version: every decision reproduced, byte for
// byte (rule version 4 changed the samples' form, and so the digests).
func TestVerifyFoldsUnderTheRecordedRuleVersion(t *testing.T) {
	o := simulate.Options{Seed: 3, Tasks: 8, Steps: 1, BatchGroups: 2, MaxTurns: 10}
	m := planSourceUnder(t, o, "rules-v3", projections.MinRuleVersion)
	if !bytes.Contains(m.decisions[len(m.decisions)-1].Value, fmt.Appendf(nil, `"rule_version":%d,`, projections.MinRuleVersion)) {
		t.Fatalf("the run was not folded under rules v%d", projections.MinRuleVersion)
	}
	rep := verify(t, m)
	if !rep.OK() || rep.Matched != rep.Recorded || rep.RuleVersion != projections.MinRuleVersion {
		t.Errorf("verify: ok %v, matched %d of %d under rules v%d, first %+v", rep.OK(), rep.Matched, rep.Recorded, rep.RuleVersion, rep.First)
	}
	// Decisions of two rule versions in one run: refused, naming the first
	// of the other version.
	mixed := planSourceUnder(t, o, "rules-v3", projections.MinRuleVersion)
	last := &mixed.decisions[len(mixed.decisions)-1]
	last.Value = bytes.Replace(last.Value, fmt.Appendf(nil, `"rule_version":%d,`, projections.MinRuleVersion), fmt.Appendf(nil, `"rule_version":%d,`, projections.RuleVersion), 1)
	if _, err := Verify(context.Background(), mixed, VerifyOptions{}); !errors.Is(err, ErrRuleVersion) {
		t.Errorf("mixed rule versions: got %v, want ErrRuleVersion", err)
	}
}

// A misrouted finding the projector recorded about a record of the run in
// another partition is no divergence: replay reads the run's partition and
// folds what the projector folded; it counts the finding.
func TestVerifyCountsMisroutedFindings(t *testing.T) {
	m := planSource(t, simulate.Options{Seed: 3, Tasks: 8, Steps: 1, BatchGroups: 2, MaxTurns: 10}, "misrouted")
	f := m.facts[1]
	ev, err := events.Decode(f.Value)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Record()
	r.Partition, r.Offset = 6, 77
	d, err := projections.Misrouted(ev, r, 5, 12)
	if err != nil {
		t.Fatal(err)
	}
	m.decisions = append(m.decisions, Recorded{Partition: 5, Offset: int64(len(m.decisions)), Value: d.Value})
	rep := verify(t, m)
	if !rep.OK() || rep.Misrouted != 1 || rep.Matched != rep.Recorded {
		t.Errorf("got ok %v, misrouted %d, matched %d of %d, first %+v; want every decision matched and one misrouted finding counted",
			rep.OK(), rep.Misrouted, rep.Matched, rep.Recorded, rep.First)
	}
}

// recordedConfigSource is a run whose run.started sets nothing, decided
// under a recorded configuration other than this build's defaults (a
// build whose defaults have changed since the run).
func recordedConfigSource(t *testing.T) (*memSource, events.Config, []string) {
	t.Helper()
	const run = "recorded-config"
	plan, err := simulate.Generate(simulate.Options{Seed: 5, Tasks: 12, Steps: 3, BatchGroups: 2, MaxTurns: 12}, run)
	if err != nil {
		t.Fatal(err)
	}
	recorded := events.DefaultConfig()
	recorded.BatchGroups, recorded.EfficiencyWeight, recorded.MinProbes = 2, 0.3, 2
	m := &memSource{run: run}
	fold, store := projections.NewFoldWith(run, projections.FoldOptions{Recorded: &recorded}), projections.NewMemStore()
	var digests []string
	for i, ev := range plan.All() {
		if rs, ok := ev.Data.(*events.RunStarted); ok {
			rs.Config = events.RunConfig{}
		}
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := Fact{Seq: uint64(i + 1), Offset: int64(i), Value: v}
		m.facts = append(m.facts, f)
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			m.decisions = append(m.decisions, Recorded{Offset: int64(len(m.decisions)), Value: d.Value})
			if d.Kind == projections.KindBatchSealed {
				mf, err := projections.ManifestOf(d.Value)
				if err != nil {
					t.Fatal(err)
				}
				digests = append(digests, mf.Digest)
			}
		}
	}
	if len(digests) < 2 {
		t.Fatalf("the run sealed %d batches under its recorded config; want at least 2 to compare", len(digests))
	}
	return m, recorded, digests
}

// What-if, as-of-step and reorder fold under the configuration the run's
// decisions recorded, as verify does, not under this build's defaults:
// with no override a what-if reproduces every recorded batch, as-of-step
// finds the recorded batch, and the reorderings compare real batches.
func TestReplayModesFoldUnderRecordedConfig(t *testing.T) {
	src, recorded, digests := recordedConfigSource(t)
	ctx := context.Background()
	if rep := verify(t, src); !rep.OK() {
		t.Fatalf("verify: %v %v", rep.First, rep.History)
	}

	res, err := WhatIf(ctx, src, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Recorded != recorded {
		t.Errorf("what-if's recorded config %+v, want %+v", res.Recorded, recorded)
	}
	if len(res.Manifests) != len(digests) {
		t.Errorf("what-if without overrides sealed %d batches, the run %d", len(res.Manifests), len(digests))
	}
	for _, s := range res.Steps {
		if !s.Same {
			t.Errorf("what-if without overrides: step %d differs from the recorded batch", s.Step)
		}
	}

	st, err := AsOfStep(ctx, src, 2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Digest != digests[1] || st.State.Config != recorded {
		t.Errorf("as of step 2: digest %s and config %+v, recorded %s and %+v", st.Digest, st.State.Config, digests[1], recorded)
	}

	rr, err := Reorder(ctx, src, ReorderOptions{Reorderings: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for _, d := range src.decisions {
		if info, err := parseRecorded(d); err == nil && info.Type == projections.KindBatchSealed {
			batches++
		}
	}
	if !rr.OK() || rr.Decisions < batches {
		t.Errorf("reorder compared %d decisions (the run recorded %d batches), first difference %v", rr.Decisions, batches, rr.Difference)
	}
}
