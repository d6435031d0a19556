package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

func whatIf(t *testing.T, src Source, s string) *WhatIfResult {
	t.Helper()
	o, err := ParseOverrides(s)
	if err != nil {
		t.Fatal(err)
	}
	res, err := WhatIf(context.Background(), src, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// whatIfSuite runs against any source of one simulated run.
func whatIfSuite(t *testing.T, src Source) {
	t.Run("recorded config", func(t *testing.T) {
		decided, _, err := decidedConfig(context.Background(), src, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := effectiveConfig(context.Background(), src, decided)
		if err != nil {
			t.Fatal(err)
		}
		res := whatIf(t, src, fmt.Sprintf("max_staleness=%d,pass_band=%g:%g,efficiency_weight=%g",
			rec.MaxStaleness, rec.PassBand[0], rec.PassBand[1], rec.EfficiencyWeight))
		if len(res.Steps) == 0 || res.WhatIf != res.Recorded {
			t.Fatalf("got %d steps, config %+v vs %+v", len(res.Steps), res.WhatIf, res.Recorded)
		}
		for _, s := range res.Steps {
			if !s.Same || s.Recorded == nil || s.WhatIf == nil || len(s.GroupsGained)+len(s.GroupsLost) != 0 || s.TurnsDelta != 0 {
				t.Errorf("step %d differs under the recorded config: %+v", s.Step, s)
			}
		}
	})
	// A stricter setting can seal fewer batches (groups with no fresh turn
	// drop as fully stale, and the run runs out of groups), so turns are
	// compared as the share of the batched turns that is masked.
	t.Run("stricter staleness masks more", func(t *testing.T) {
		prev := -1.0
		for _, ms := range []int{6, 3, 2, 1, 0} {
			res := whatIf(t, src, fmt.Sprintf("max_staleness=%d", ms))
			tot := res.WhatIfTotal
			if tot.MaskedFraction < prev {
				t.Errorf("max_staleness=%d masks %.1f%% of the batched turns, less than the %.1f%% of a laxer setting", ms, 100*tot.MaskedFraction, 100*prev)
			}
			t.Logf("max_staleness=%d: %d batches, %d of %d turns masked (%.1f%%), dropped %v", ms, tot.Batches,
				tot.Turns-tot.TrainedTurns, tot.Turns, 100*tot.MaskedFraction, tot.Dropped)
			prev = tot.MaskedFraction
		}
		if prev == 0 {
			t.Error("max_staleness=0 masks nothing: the run shows no staleness")
		}
	})
	t.Run("efficiency weight", func(t *testing.T) {
		res := whatIf(t, src, "efficiency_weight=0")
		for _, s := range res.Steps {
			if s.Same {
				t.Errorf("step %d is unchanged without the efficiency bonus", s.Step)
			}
		}
	})
}

func TestWhatIf(t *testing.T) {
	src := planSource(t, smallRun, "what-if")
	t.Run("memory", func(t *testing.T) { whatIfSuite(t, src) })
	t.Run("archive", func(t *testing.T) { whatIfSuite(t, export(t, src)) })
}

func TestParseOverrides(t *testing.T) {
	o, err := ParseOverrides("max_staleness=3, pass_band=0.2:0.8,efficiency_weight=0,advantage=rloo,enforce_admission=false")
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	o.Apply(&cfg)
	if cfg.MaxStaleness != 3 || cfg.PassBand != [2]float64{0.2, 0.8} || cfg.EfficiencyWeight != 0 || cfg.Advantage != "rloo" || cfg.EnforceAdmission {
		t.Errorf("got %+v", cfg)
	}
	_, err = ParseOverrides("max_staleness=x,bogus=1,pass_band=0.2,max_staleness=2,advantage=ppo")
	for _, want := range []string{"max_staleness=x", "bogus", "pass_band=0.2", "advantage=ppo"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to name %s", err, want)
		}
	}
	if _, err := ParseOverrides(""); err == nil {
		t.Error("no settings accepted")
	}
}

func smallConfig() events.Config { return events.DefaultConfig() }

func TestAsOfStep(t *testing.T) {
	src := planSource(t, smallRun, "as-of")
	ctx := context.Background()
	st, err := AsOfStep(ctx, src, 2)
	if err != nil {
		t.Fatal(err)
	}
	b2 := headOf(t, src, "batch:2")
	if st.Sealed.Seq != b2.Size || st.State.Facts != b2.Size || st.State.Tree != b2.TreeHead || st.State.Decisions.BatchSealed != 2 {
		t.Errorf("state at fact %d (%+v), want batch 2's fact %d", st.State.Facts, st.State.Tree, b2.Size)
	}
	if len(st.State.Queue) != 0 || len(st.State.InFlight) == 0 || len(st.State.Tasks) != smallRun.Tasks || st.Groups != smallRun.BatchGroups {
		t.Errorf("queue %d, in flight %d, tasks %d, groups %d", len(st.State.Queue), len(st.State.InFlight), len(st.State.Tasks), st.Groups)
	}
	if len(st.TurnVersions) == 0 || len(st.Published) == 0 {
		t.Errorf("versions %v, published %v", st.TurnVersions, st.Published)
	}
	if _, err := AsOfStep(ctx, src, 99); err == nil {
		t.Error("batch 99 found")
	}
	_ = projections.KindBatchSealed
	_ = simulate.Options{}
}
