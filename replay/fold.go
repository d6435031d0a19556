package replay

import (
	"context"
	"fmt"
	"io"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// FoldOptions tune Fold.
type FoldOptions struct {
	// ScratchDir is where the fold's state is kept while it runs; empty
	// means the system's temporary directory.
	ScratchDir string
	// NoSamples leaves the samples out of the batch.sealed decisions fn
	// receives (projections.FoldOptions.NoSamples), for consumers that do
	// not read them: the fold then never holds a batch's tokens at once.
	NoSamples bool
	// SamplesTo hands each sealed batch's samples to a writer as they are
	// built (projections.FoldOptions.SamplesTo); the decisions fn
	// receives then carry none.
	SamplesTo func(seq uint64, write func(io.Writer) error) error
}

// Fold folds every fact of src, decoded ahead on the other cores, and
// calls fn with each fact and the decisions it concluded: the pass every
// replay makes, for consumers that derive something else from a run's
// history (exports of datasets). Fact.Repeat is set on facts the fold
// ignored as repeats of an event id. At the end it calls end, when given,
// with the fold's state after the last fact (read the tree head and the
// header there), before that state is removed.
//
// As Verify does, it folds under the configuration the run's decisions
// recorded, not this build's defaults, and refuses a run whose decisions
// were made under other rules (a RuleVersionError); and it keeps the
// fold's state on disk (docs/design.md §14.2), so its memory does not grow
// with the run.
func Fold(ctx context.Context, src Source, o FoldOptions, fn func(Fact, []projections.Decision) error, end func(projections.Store) error) error {
	config, rules, err := decidedConfig(ctx, src, nil)
	if err != nil {
		return err
	}
	store, err := openScratch(o.ScratchDir, src)
	if err != nil {
		return err
	}
	defer store.Close()
	fold := projections.NewFoldWith(src.Run(), projections.FoldOptions{Recorded: config, RuleVersion: rules, WriteBack: writeBackBytes, NoSamples: o.NoSamples, SamplesTo: o.SamplesTo})
	err = factsOf(ctx, src, func(f Fact) error {
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			return fmt.Errorf("replay: fold fact %d: %w", f.Seq, err)
		}
		f.Repeat = fold.Repeat()
		return fn(f, ds)
	})
	if err != nil {
		return err
	}
	if end != nil {
		if err := fold.Flush(store); err != nil {
			return err
		}
		return end(store)
	}
	return nil
}

// decidedConfig is the configuration the run's first recorded batch was
// made under (nil when no decision records one) and the rule version its
// decisions name (projections.RuleVersion when none does), read from
// src's decisions in one pass: a run is folded again under the rules it
// was sealed under. A decision of rules this build does not implement, or
// of other rules than the run's other decisions, is a RuleVersionError.
// each, when set, sees every recorded decision in that pass, for callers
// that read the decisions for more than the config.
func decidedConfig(ctx context.Context, src Source, each func(Recorded, decisionInfo) error) (*events.Config, int, error) {
	var config *events.Config
	var configSeq uint64
	rules := 0
	err := parsedDecisions(ctx, src, func(r Recorded, d decisionInfo, err error) error {
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		// A misrouted finding (fact seq 0) is made outside the run's fold,
		// by whichever build read the record.
		if !projections.SupportsRuleVersion(d.RuleVersion) || d.Fact.Seq != 0 && rules != 0 && d.RuleVersion != rules {
			return &RuleVersionError{Run: src.Run(), Decision: d.ID, Recorded: d.RuleVersion}
		}
		if d.Fact.Seq != 0 && rules == 0 {
			rules = d.RuleVersion
		}
		if d.Config != nil && (config == nil || d.Seq < configSeq) {
			config, configSeq = d.Config, d.Seq
		}
		if each != nil {
			return each(r, d)
		}
		return nil
	})
	if rules == 0 {
		rules = projections.RuleVersion
	}
	return config, rules, err
}
