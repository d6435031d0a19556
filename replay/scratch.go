package replay

import (
	"fmt"

	"github.com/rolloutledger/rolloutledger/internal/foldstore"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A replay folds a whole run, and the fold's state — above all the dedup
// index, one entry per fact — grows with it. So the passes over a whole
// run keep it on disk, in a temporary Pebble database (package foldstore)
// removed at the end: their memory is the database's bounded caches,
// whatever the run's length (docs/design.md §14.2).

// writeBackBytes bounds what a pass's fold keeps decoded in memory between
// records (projections.FoldOptions.WriteBack): the attempts and groups in
// flight, written to the scratch store only when they no longer fit, so
// that an attempt's record is not decoded and encoded again with each of
// its turns.
const writeBackBytes = 64 << 20

// openScratch makes an empty fold state on disk under dir (empty: the
// system's temporary directory) for the facts of src: the dedup index in
// files of its own (dedup.go), sized by the facts src may hold when it
// says, the rest in a Pebble database.
func openScratch(dir string, src Source) (*scratch, error) {
	// The spill's filter now sees only the keys other than the dedup
	// index's, a few per group: a smaller one does. So does its cache:
	// the write-back fold holds the records in flight decoded, and a
	// 64 MiB cache only filled as the run grew (docs/design.md §14.2).
	s, err := foldstore.OpenSpill(foldstore.SpillOptions{Dir: dir, FilterBytes: 8 << 20, CacheBytes: 16 << 20})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var facts uint64
	if b, ok := src.(FactsBounder); ok {
		facts = b.FactsBound()
	}
	return &scratch{Spill: s, dedup: newDedupIndex(s.Dir(), facts), payloads: newPayloadLog(s.Dir())}, nil
}

// scratch is a pass's fold state: the dedup index's keys in a dedupIndex,
// turns' inline tokens in a payloadLog (the spill holding their
// references), every other key in the spill.
type scratch struct {
	*foldstore.Spill
	dedup    *dedupIndex
	payloads *payloadLog
}

// Get implements projections.Store.
func (s *scratch) Get(k []byte) ([]byte, bool, error) {
	if id, ok := projections.ParseEventKey(k); ok {
		return s.dedup.get(id)
	}
	if projections.IsPayloadKey(k) {
		ref, ok, err := s.Spill.Get(k)
		if err != nil || !ok {
			return nil, false, err
		}
		v, err := s.payloads.read(ref)
		return v, err == nil, err
	}
	return s.Spill.Get(k)
}

// releasePayload counts the value k referred to, if any, as deleted from
// the log.
func (s *scratch) releasePayload(k []byte) error {
	ref, ok, err := s.Spill.Get(k)
	if err != nil || !ok {
		return err
	}
	return s.payloads.release(ref)
}

// RecordEvent implements projections.EventIndex.
func (s *scratch) RecordEvent(id [16]byte, sum *[32]byte) ([]byte, bool, error) {
	return s.dedup.record(&id, sum)
}

// Set implements projections.Store.
func (s *scratch) Set(k, v []byte) error {
	if id, ok := projections.ParseEventKey(k); ok {
		if len(v) != len(dedupSum{}) {
			return fmt.Errorf("replay: dedup index: a %d-byte value for %q, want a SHA-256", len(v), k)
		}
		return s.dedup.set(id, dedupSum(v))
	}
	if projections.IsPayloadKey(k) {
		if err := s.releasePayload(k); err != nil {
			return err
		}
		ref, err := s.payloads.append(v)
		if err != nil {
			return err
		}
		return s.Spill.Set(k, ref[:])
	}
	return s.Spill.Set(k, v)
}

// Delete implements projections.Store.
func (s *scratch) Delete(k []byte) error {
	if _, ok := projections.ParseEventKey(k); ok {
		return fmt.Errorf("replay: dedup index: entries are never deleted (%q)", k)
	}
	if projections.IsPayloadKey(k) {
		if err := s.releasePayload(k); err != nil {
			return err
		}
	}
	return s.Spill.Delete(k)
}

// Close removes the state.
func (s *scratch) Close() error {
	err := s.dedup.close()
	s.payloads.close()
	if cerr := s.Spill.Close(); err == nil {
		err = cerr
	}
	return err
}
