package projector

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
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
const (
	nsOffset        = 'o'
	nsState         = 's'
	nsDecision      = 'd'
	nsSamples       = 'c'
	nsLegacySamples = 'm'
	nsManifest      = 'b'
	nsRun           = 'r'
	nsPartitions    = 'p'
)

// get copies a value out of Pebble, which only lends it until the closer
// is closed.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, c.Close()
}

// window is the fold state as one window of records sees it: what the
// window wrote, in memory, over what the database holds. A fold rewrites
// the same keys (an attempt's state, a group's, the run's counters) many
// times per window; holding them here costs one map lookup per read, where
// an indexed batch searched its growing log and then the database, and the
// batch receives each key once, its last value, when the window commits.
type window struct {
	db   pebble.Reader
	vals map[string]windowVal
}

type windowVal struct {
	v       []byte // nil when deleted or absent
	present bool
	dirty   bool // written by the window: flushed to the batch
}

func newWindow(db pebble.Reader) *window {
	return &window{db: db, vals: map[string]windowVal{}}
}

func (w *window) get(key []byte) ([]byte, bool, error) {
	if e, ok := w.vals[string(key)]; ok {
		return e.v, e.present, nil
	}
	v, ok, err := get(w.db, key)
	if err != nil {
		return nil, false, err
	}
	w.vals[string(key)] = windowVal{v: v, present: ok}
	return v, ok, nil
}

func (w *window) set(key, v []byte) {
	w.vals[string(key)] = windowVal{v: append([]byte(nil), v...), present: true, dirty: true}
}

func (w *window) delete(key []byte) {
	w.vals[string(key)] = windowVal{dirty: true}
}

// flush writes what the window changed into b.
func (w *window) flush(b *pebble.Batch) error {
	for k, e := range w.vals {
		if !e.dirty {
			continue
		}
		var err error
		if e.present {
			err = b.Set([]byte(k), e.v, nil)
		} else {
			err = b.Delete([]byte(k), nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// store returns the projections.Store of one run inside the window.
func (w *window) store(run string) *windowStore {
	p := make([]byte, 0, len(run)+2)
	p = append(p, nsState)
	p = append(p, run...)
	p = append(p, 0)
	return &windowStore{w: w, prefix: p}
}

type windowStore struct {
	w      *window
	prefix []byte
	buf    []byte
}

func (s *windowStore) key(k []byte) []byte {
	s.buf = append(append(s.buf[:0], s.prefix...), k...)
	return s.buf
}

func (s *windowStore) Get(k []byte) ([]byte, bool, error) { return s.w.get(s.key(k)) }

func (s *windowStore) Set(k, v []byte) error {
	s.w.set(s.key(k), v)
	return nil
}

func (s *windowStore) Delete(k []byte) error {
	s.w.delete(s.key(k))
	return nil
}
