// Package foldstore keeps fold state ([projections.Store]) in Pebble, for
// the projector's database and for replay's scratch database alike.
//
// An [Overlay] is what one window of folding sees: the keys it read or
// wrote, in memory, over what the database holds. A fold rewrites the same
// keys (an attempt's state, a group's, the run's counters) many times per
// window; holding them here costs one map lookup per read, and the batch
// receives each key once, its last value, when the window is flushed. The
// overlay grows with the window, never with the run: the caller flushes it
// and starts a new one.
//
// A [Spill] is a run's fold state in a temporary Pebble database, for a
// replay whose state must not grow in memory with the length of the run
// (docs/design.md §14.2).
package foldstore

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Get copies a value out of Pebble, which only lends it until the closer
// is closed.
func Get(r pebble.Reader, key []byte) ([]byte, bool, error) {
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

// Overlay is the fold state as one window sees it: what the window read
// and wrote, in memory, over what a Pebble reader holds.
type Overlay struct {
	db   pebble.Reader
	vals map[string]overlayVal
	// absent, when set, says a key is surely not in db, so Get does not
	// read it there.
	absent func(key []byte) bool
	// bytes counts the keys and values held (Bytes).
	bytes int
}

type overlayVal struct {
	v       []byte // nil when deleted or absent
	present bool
	dirty   bool // written by the window: flushed to the batch
}

// NewOverlay starts an empty overlay over db.
func NewOverlay(db pebble.Reader) *Overlay {
	return &Overlay{db: db, vals: map[string]overlayVal{}}
}

// Get returns the value of key as the window sees it. The value is
// read-only.
func (w *Overlay) Get(key []byte) ([]byte, bool, error) {
	if e, ok := w.vals[string(key)]; ok {
		return e.v, e.present, nil
	}
	if w.absent != nil && w.absent(key) {
		return nil, false, nil
	}
	v, ok, err := Get(w.db, key)
	if err != nil {
		return nil, false, err
	}
	w.vals[string(key)] = overlayVal{v: v, present: ok}
	w.bytes += len(key) + len(v)
	return v, ok, nil
}

// Set writes a copy of v under key.
func (w *Overlay) Set(key, v []byte) {
	w.vals[string(key)] = overlayVal{v: append([]byte(nil), v...), present: true, dirty: true}
	w.bytes += len(key) + len(v)
}

// Delete removes key.
func (w *Overlay) Delete(key []byte) {
	w.vals[string(key)] = overlayVal{dirty: true}
	w.bytes += len(key)
}

// Len is the number of keys the overlay holds, read or written.
func (w *Overlay) Len() int { return len(w.vals) }

// Bytes bounds the bytes of the keys and values the overlay holds: each
// key and value it read or was given, counted again when given again
// (a value replaced is not subtracted, which would cost a second lookup
// of its key).
func (w *Overlay) Bytes() int { return w.bytes }

// Flush writes what the window changed into b.
func (w *Overlay) Flush(b *pebble.Batch) error {
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

// Store returns the [projections.Store] whose keys are the overlay's
// under prefix: one run's fold state in a database of many.
func (w *Overlay) Store(prefix []byte) *PrefixStore {
	return &PrefixStore{w: w, prefix: prefix}
}

// PrefixStore is a [projections.Store] of the keys of an [Overlay] under
// a prefix.
type PrefixStore struct {
	w      *Overlay
	prefix []byte
	buf    []byte
}

func (s *PrefixStore) key(k []byte) []byte {
	s.buf = append(append(s.buf[:0], s.prefix...), k...)
	return s.buf
}

// Get implements [projections.Store].
func (s *PrefixStore) Get(k []byte) ([]byte, bool, error) { return s.w.Get(s.key(k)) }

// Set implements [projections.Store].
func (s *PrefixStore) Set(k, v []byte) error {
	s.w.Set(s.key(k), v)
	return nil
}

// Delete implements [projections.Store].
func (s *PrefixStore) Delete(k []byte) error {
	s.w.Delete(s.key(k))
	return nil
}
