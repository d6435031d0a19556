package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/rolloutledger/rolloutledger/events"
)

// Write-back state (FoldOptions.WriteBack).
//
// A fold rewrites a few records with nearly every fact: the run's header
// and fact tree with each one, an attempt's record with each of its turns
// (a record that grows with the turns, so an attempt of n turns costs
// O(n²) to decode and encode), a group's with each of its attempts'
// rewards, and the open batch's entries, JSON, with each placed group and
// at the seal. A projector must write them all to its Store at every
// window, since the Store with its offset is its snapshot. A pass over a
// whole recorded run (replay) need not: its Store is a scratch database
// that nobody reads until the pass ends. So a fold made with WriteBack
// keeps those records decoded in memory between records and writes them
// to the Store only when it needs room, or at Flush; every read of them
// goes through the cache first, so the fold concludes exactly what the
// write-through fold concludes, byte for byte.
//
// Memory stays bounded: attempts and groups are held only while their
// group is in flight — a completed group's frozen markers are written
// through and dropped from the cache, since only a late fact ever reads
// them again — and once the held records' estimated size passes the
// limit, every one of them is written back and the cache starts empty.
// The open batch is bounded by batch_groups, as the sealed batch that
// holds it is.

// ErrWriteBackStore is returned by a write-back fold given another Store
// than the one its cache holds records of: the cache would be wrong for it.
var ErrWriteBackStore = errors.New("projections: write-back fold used with another store")

// writeBack is a write-back fold's cache (see above).
type writeBack struct {
	limit int
	store Store
	// broken is the error of an Apply that failed: the cache may hold
	// that record's partial writes, so the fold cannot go on.
	broken error

	h       header
	hLoaded bool
	hDirty  bool
	// cfg is the run's configuration as the last Apply resolved it (nil
	// until one did): config() is a function of the header's configured
	// flag and the stored config, which only run.started writes, and it
	// replaces cfg when it does.
	cfg *events.Config
	// treeDirty says the tree in Fold.cache was not written back.
	treeDirty bool

	attempts map[string]*held[attemptState]
	groups   map[string]*held[groupState]
	bytes    int

	// open holds the open batch's entries once loaded; the first
	// openStored of them are also in the Store.
	open       []openGroup
	openLoaded bool
	openStored int
}

// held is a record in the cache: its decoded value, whether it differs
// from the Store, and the bytes it is estimated to take.
type held[T any] struct {
	v     T
	dirty bool
	size  int
}

func newWriteBack(limit int) *writeBack {
	return &writeBack{limit: limit, attempts: map[string]*held[attemptState]{}, groups: map[string]*held[groupState]{}}
}

// use checks that s is the Store the cache belongs to, adopting the first.
func (w *writeBack) use(s Store) error {
	if w.broken != nil {
		return fmt.Errorf("projections: a write-back fold cannot go on after an error: %w", w.broken)
	}
	if w.store == nil {
		w.store = s
	}
	if w.store != s {
		return ErrWriteBackStore
	}
	return nil
}

func (w *writeBack) header(s Store) (header, error) {
	if !w.hLoaded {
		c := &applyCtx{s: s}
		if err := c.loadHeader(); err != nil {
			return header{}, err
		}
		w.h, w.hLoaded = c.h, true
	}
	return w.h, nil
}

func (w *writeBack) setHeader(h header) { w.h, w.hLoaded, w.hDirty = h, true, true }

const (
	attemptBase = int(unsafe.Sizeof(held[attemptState]{})) + 64 // plus the map's entry
	groupBase   = int(unsafe.Sizeof(held[groupState]{})) + 64
	turnSize    = int(unsafe.Sizeof(turnMeta{}))
	shapeSize   = int(unsafe.Sizeof(turnShape{}))
	segmentSize = int(unsafe.Sizeof(events.VersionSegment{}))
)

func attemptBytes(id string, a *attemptState) int {
	n := attemptBase + len(id) + len(a.group) + len(a.task) + len(a.retryOf) + cap(a.turns)*turnSize + 8*cap(a.compactions)
	for i := range a.turns {
		n += segmentSize * cap(a.turns[i].later)
		if a.turns[i].shape != nil {
			n += shapeSize
		}
	}
	return n
}

func groupBytes(id string, g *groupState) int {
	n := groupBase + len(id) + len(g.task) + len(g.purpose) + 16*cap(g.members)
	for _, m := range g.members {
		n += len(m)
	}
	return n
}

// attempt returns the attempt's state: the cached one, or the Store's.
func (w *writeBack) attempt(s Store, id string) (attemptState, error) {
	if e, ok := w.attempts[id]; ok {
		return e.v, nil
	}
	c := &applyCtx{s: s}
	a, err := c.storedAttempt(id)
	if err != nil {
		return a, err
	}
	if !a.done {
		e := &held[attemptState]{v: a, size: attemptBytes(id, &a)}
		w.attempts[id] = e
		w.bytes += e.size
	}
	return a, nil
}

// putAttempt caches a's state; a frozen attempt (its group completed) is
// written through instead, and leaves the cache.
func (w *writeBack) putAttempt(s Store, id string, a *attemptState) error {
	e, ok := w.attempts[id]
	if a.done {
		if ok {
			w.bytes -= e.size
			delete(w.attempts, id)
		}
		return s.Set(attemptKey(id), a.encode())
	}
	if !ok {
		e = &held[attemptState]{}
		w.attempts[id] = e
	}
	w.bytes -= e.size
	e.v, e.dirty, e.size = *a, true, attemptBytes(id, a)
	w.bytes += e.size
	return nil
}

// group returns the group's state: the cached one, or the Store's.
func (w *writeBack) group(s Store, id string) (groupState, error) {
	if e, ok := w.groups[id]; ok {
		return e.v, nil
	}
	c := &applyCtx{s: s}
	g, err := c.storedGroup(id)
	if err != nil {
		return g, err
	}
	if !g.done {
		e := &held[groupState]{v: g, size: groupBytes(id, &g)}
		w.groups[id] = e
		w.bytes += e.size
	}
	return g, nil
}

// putGroup caches g's state; a completed group is written through, and
// leaves the cache.
func (w *writeBack) putGroup(s Store, id string, g *groupState) error {
	e, ok := w.groups[id]
	if g.done {
		if ok {
			w.bytes -= e.size
			delete(w.groups, id)
		}
		return s.Set(groupKey(id), g.encode())
	}
	if !ok {
		e = &held[groupState]{}
		w.groups[id] = e
	}
	w.bytes -= e.size
	e.v, e.dirty, e.size = *g, true, groupBytes(id, g)
	w.bytes += e.size
	return nil
}

// openEntries returns the open batch's n entries, loading them from the
// Store the first time.
func (w *writeBack) openEntries(s Store, n uint64) ([]openGroup, error) {
	if !w.openLoaded {
		entries, err := storedOpen(s, n)
		if err != nil {
			return nil, err
		}
		w.open, w.openLoaded, w.openStored = entries, true, len(entries)
	}
	if uint64(len(w.open)) != n {
		return nil, fmt.Errorf("%w: the open batch holds %d entries, its cursor says %d", ErrCorruptState, len(w.open), n)
	}
	return w.open, nil
}

// placed adds the n-th entry of the open batch.
func (w *writeBack) placed(s Store, n uint64, e openGroup) error {
	if _, err := w.openEntries(s, n); err != nil {
		return err
	}
	w.open = append(w.open, e)
	return nil
}

// sealed empties the open batch, deleting the entries the Store holds.
func (w *writeBack) sealed(s Store) error {
	for i := range w.openStored {
		if err := s.Delete(openKey(uint64(i))); err != nil {
			return err
		}
	}
	w.open, w.openLoaded, w.openStored = nil, true, 0
	return nil
}

// trim writes the cache back and empties it once it holds more than its
// limit; the header, the tree and the open batch stay.
func (w *writeBack) trim(s Store, tree *Tree) error {
	if w.bytes <= w.limit {
		return nil
	}
	if err := w.flush(s, tree); err != nil {
		return err
	}
	clear(w.attempts)
	clear(w.groups)
	w.bytes = 0
	return nil
}

// flush writes every record that differs from the Store.
func (w *writeBack) flush(s Store, tree *Tree) error {
	for id, e := range w.attempts {
		if e.dirty {
			if err := s.Set(attemptKey(id), e.v.encode()); err != nil {
				return err
			}
			e.dirty = false
		}
	}
	for id, e := range w.groups {
		if e.dirty {
			if err := s.Set(groupKey(id), e.v.encode()); err != nil {
				return err
			}
			e.dirty = false
		}
	}
	for i := w.openStored; i < len(w.open); i++ {
		b, err := json.Marshal(w.open[i])
		if err != nil {
			return err
		}
		if err := s.Set(openKey(uint64(i)), b); err != nil {
			return err
		}
	}
	w.openStored = len(w.open)
	if w.treeDirty && tree != nil {
		if err := s.Set([]byte(keyTree), tree.encode()); err != nil {
			return err
		}
		w.treeDirty = false
	}
	if w.hDirty {
		if err := s.Set([]byte(keyHeader), w.h.encode()); err != nil {
			return err
		}
		w.hDirty = false
	}
	return nil
}

// storedOpen reads the open batch's n entries from s.
func storedOpen(s Store, n uint64) ([]openGroup, error) {
	entries := make([]openGroup, n)
	for i := range entries {
		b, ok, err := s.Get(openKey(uint64(i)))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: open batch entry %d missing", ErrCorruptState, i)
		}
		if err := json.Unmarshal(b, &entries[i]); err != nil {
			return nil, fmt.Errorf("%w: open batch entry %d: %v", ErrCorruptState, i, err)
		}
	}
	return entries, nil
}
