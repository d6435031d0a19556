package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// StepState is a run's state at the moment batch Step was sealed: what the
// fold held (queue, groups in flight, admissions), the sealed batch, and
// the policy versions and gradient steps reported by then.
type StepState struct {
	Run  string `json:"run"`
	Step uint64 `json:"step"`
	// Sealed is the position of the fact that sealed the batch.
	Sealed projections.FactPosition `json:"sealed"`
	Digest string                   `json:"digest"`
	Groups int                      `json:"groups"`
	State  projections.StateView    `json:"state"`
	// Published lists the policy versions published by then, in log
	// order; Gradients the trainer's steps.
	Published []PublishedVersion `json:"published"`
	Gradients []GradientStep     `json:"gradients"`
	// TurnVersions counts the turns seen by then by their policy version.
	TurnVersions []projections.Count `json:"turn_versions"`
}

// PublishedVersion is a policy.published fact.
type PublishedVersion struct {
	Version    int64  `json:"version"`
	Checkpoint string `json:"checkpoint"`
	Fact       uint64 `json:"fact"`
}

// GradientStep is a gradient.applied fact.
type GradientStep struct {
	Step        int64  `json:"step"`
	Batch       int64  `json:"batch"`
	FromVersion int64  `json:"from_version"`
	ToVersion   int64  `json:"to_version"`
	BatchDigest string `json:"batch_digest"`
	Fact        uint64 `json:"fact"`
}

// AsOfStep folds src up to the fact that sealed batch k and reports the
// state there.
func AsOfStep(ctx context.Context, src Source, k uint64) (*StepState, error) {
	if k == 0 {
		return nil, errors.New("replay: steps start at 1")
	}
	st := &StepState{Run: src.Run(), Step: k}
	// Under the configuration the run's decisions recorded, as Verify, and
	// as Verify without the batches' samples: the state lists none.
	decided, rules, err := decidedConfig(ctx, src, nil)
	if err != nil {
		return nil, err
	}
	fold, store := projections.NewFoldWith(src.Run(), projections.FoldOptions{Recorded: decided, RuleVersion: rules, NoSamples: true}), projections.NewMemStore()
	versions := map[int64]int{}
	sealed := uint64(0)
	err = factsOf(ctx, src, func(f Fact) error {
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			return fmt.Errorf("replay: fold fact %d: %w", f.Seq, err)
		}
		if ev, ok := decodeIf(f, events.TypeTurnGenerated, events.TypePolicyPublished, events.TypeGradientApplied); ok {
			switch d := ev.Data.(type) {
			case *events.TurnGenerated:
				versions[d.PolicyVersion()]++
			case *events.PolicyPublished:
				st.Published = append(st.Published, PublishedVersion{Version: d.Version, Checkpoint: d.Checkpoint, Fact: f.Seq})
			case *events.GradientApplied:
				st.Gradients = append(st.Gradients, GradientStep{Step: d.Step, Batch: d.Batch, FromVersion: d.FromVersion,
					ToVersion: d.ToVersion, BatchDigest: d.BatchDigest, Fact: f.Seq})
			}
		}
		for _, d := range ds {
			if d.Kind != projections.KindBatchSealed {
				continue
			}
			sealed = d.Seq
			if d.Seq == k {
				m, err := projections.ManifestOf(d.Value)
				if err != nil {
					return err
				}
				st.Sealed, st.Digest, st.Groups = factOf(f), m.Digest, len(m.Groups)
				return errFound
			}
		}
		return nil
	})
	if err == nil {
		return nil, fmt.Errorf("replay: run %s sealed %d batches, not %d", src.Run(), sealed, k)
	}
	if !errors.Is(err, errFound) {
		return nil, err
	}
	view, err := projections.ViewState(store)
	if err != nil {
		return nil, err
	}
	st.State = view
	st.TurnVersions = countsOf(versions)
	return st, nil
}

// decodeIf returns f's event when it is of one of the types, decoding it
// only then (a canonical record names its type up front).
func decodeIf(f Fact, types ...events.Type) (events.Event, bool) {
	t := f.Event.Type
	if t == "" {
		t = quickType(f.Value)
	}
	for _, want := range types {
		if t == want {
			if f.Event.Type != "" {
				return f.Event, true
			}
			ev, err := events.Decode(f.Value)
			return ev, err == nil
		}
	}
	return events.Event{}, false
}

func countsOf(m map[int64]int) []projections.Count {
	out := []projections.Count{}
	for v := range m {
		out = append(out, projections.Count{Value: v, N: m[v]})
	}
	sortCounts(out)
	return out
}
