package replay

import (
	"context"
	"fmt"

	"github.com/rolloutledger/rolloutledger/projections"
)

// Fold folds every fact of src, decoded ahead on the other cores, in a
// fresh store, and calls fn with each fact and the decisions it concluded:
// the pass every replay makes, for consumers that derive something else
// from a run's history (exports of datasets). It returns the store after
// the last fact, from which the final tree head and state are read.
func Fold(ctx context.Context, src Source, fn func(Fact, []projections.Decision) error) (*projections.MemStore, error) {
	fold, store := projections.NewFold(src.Run()), projections.NewMemStore()
	err := factsOf(ctx, src, func(f Fact) error {
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			return fmt.Errorf("replay: fold fact %d: %w", f.Seq, err)
		}
		return fn(f, ds)
	})
	if err != nil {
		return nil, err
	}
	return store, nil
}
