package replay

import (
	"fmt"

	"github.com/rolloutledger/rolloutledger/internal/foldstore"
)

// A replay folds a whole run, and the fold's state — above all the dedup
// index, one entry per fact — grows with it. So the passes over a whole
// run keep it on disk, in a temporary Pebble database (package foldstore)
// removed at the end: their memory is the database's bounded caches,
// whatever the run's length (docs/design.md §14.2).

// openScratch makes an empty fold state on disk under dir (empty: the
// system's temporary directory).
func openScratch(dir string) (*foldstore.Spill, error) {
	s, err := foldstore.OpenSpill(foldstore.SpillOptions{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return s, nil
}
