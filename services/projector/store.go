package projector

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/internal/foldstore"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// Key layout of the projector's Pebble database. Every key starts with a
// one-byte namespace so the spaces can never collide:
//
//	o <topic> 0x00 <partition:4>         next offset to consume (8 bytes, big endian)
//	s <run> 0x00 <fold key>              the fold's own state for a run
//	d <run> 0x00 <kind> 0x00 <seq:8>     a decision's record value
//	c <run> 0x00 <seq:8> <chunk:4>       a sealed batch's samples, canonical binary (projections/samples.go), in chunks of whole samples
//	m <run> 0x00 <seq:8>                 a batch's samples as NDJSON, as rule version 1 stored them (read only)
//	b <run> 0x00 <seq:8>                 a sealed batch's manifest as served: the data of its batch.sealed
//	r <run>                              run index: first-seen order (8 bytes)
//	p <topic>                            the facts topic's partition count the state was built with (4 bytes, big endian)
//	f <run>                              how many misrouted findings of the run were concluded (8 bytes, big endian)
//	x <run> 0x00 <record key>            the run explorer's records of the run (services/explore/store.go)
const (
	nsOffset        = 'o'
	nsState         = 's'
	nsDecision      = 'd'
	nsSamples       = 'c'
	nsLegacySamples = 'm'
	nsManifest      = 'b'
	nsRun           = 'r'
	nsPartitions    = 'p'
	nsMisrouted     = 'f'
	nsExplore       = 'x'
)

// get copies a value out of Pebble, which only lends it until the closer
// is closed.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) { return foldstore.Get(r, key) }

// window is the fold state as one window of records sees it: what the
// window read and wrote, in memory, over what the database holds
// (package foldstore); it goes into the window's batch once, at the end.
type window = foldstore.Overlay

func newWindow(db pebble.Reader) *window { return foldstore.NewOverlay(db) }

// stateStore returns the projections.Store of one run inside the window:
// its keys under the state namespace.
func stateStore(w *window, run string) *foldstore.PrefixStore {
	p := make([]byte, 0, len(run)+2)
	p = append(p, nsState)
	p = append(p, run...)
	p = append(p, 0)
	return w.Store(p)
}

// exploreStore returns the run explorer's records of one run inside the
// window: its keys under the explorer's namespace (docs/design.md §12.4).
func exploreStore(w *window, run string) *foldstore.PrefixStore {
	return w.Store(explorePrefix(run))
}

func explorePrefix(run string) []byte {
	p := make([]byte, 0, len(run)+2)
	p = append(p, nsExplore)
	p = append(p, run...)
	return append(p, 0)
}

// runFolds are a session's folds and run explorer writers, by run: both
// caches of what the database holds, dropped together with the session
// when a window fails.
type runFolds struct {
	folds   map[string]*projections.Fold
	explore map[string]*explore.Writer
	// stored are the chunks of the batches sealed by the fact being
	// folded, written by samplesTo and taken by takeSamples.
	stored map[storedKey]uint32
}

type storedKey struct {
	run string
	seq uint64
}

func newRunFolds() *runFolds {
	return &runFolds{folds: map[string]*projections.Fold{}, explore: map[string]*explore.Writer{}, stored: map[storedKey]uint32{}}
}

// explorer returns the run's explorer writer and its store in the window,
// made when the part first meets the run. A run whose fold state is older
// than its explorer records (folded before they were kept) is marked
// partial: st is the fold's store, read before the part's first fact of
// the run is applied.
func (rf *runFolds) explorer(w *window, stores map[string]*foldstore.PrefixStore, st projections.Store, run string) (*explore.Writer, *foldstore.PrefixStore, error) {
	xw := rf.explore[run]
	if xw == nil {
		_, folded, err := st.Get([]byte(projections.HeaderKey))
		if err != nil {
			return nil, nil, err
		}
		xw = explore.NewWriter(run)
		xw.PartialIfNew, xw.TokensInLog = folded, true
		rf.explore[run] = xw
	}
	xs := stores[run]
	if xs == nil {
		xs = exploreStore(w, run)
		stores[run] = xs
	}
	return xw, xs, nil
}
