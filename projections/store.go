package projections

import (
	"bytes"
	"maps"
	"slices"
)

// Store holds a run's fold state. The projector backs it with a Pebble batch
// (reads see the batch's own writes); tests use MemStore. Keys are the fold's own.
//
// A value returned by Get is read-only and need only stay valid until the
// next Set or Delete; the fold decodes it before writing again. Set must not
// retain its arguments beyond the call unless it copies them.
type Store interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
}

// MemStore is a map-backed [Store]. It never fails, copies what it is given,
// and lists its contents in sorted key order, so two stores that went
// through the same Sets and Deletes are indistinguishable.
type MemStore struct {
	m map[string][]byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{m: map[string][]byte{}}
}

// Get returns the value stored under key.
func (s *MemStore) Get(key []byte) ([]byte, bool, error) {
	v, ok := s.m[string(key)]
	return v, ok, nil
}

// Set stores a copy of value under key.
func (s *MemStore) Set(key, value []byte) error {
	s.m[string(key)] = bytes.Clone(value)
	return nil
}

// Delete removes key; deleting an absent key is not an error.
func (s *MemStore) Delete(key []byte) error {
	delete(s.m, string(key))
	return nil
}

// Len is the number of keys held.
func (s *MemStore) Len() int { return len(s.m) }

// Size is the number of key and value bytes held.
func (s *MemStore) Size() int {
	n := 0
	for k, v := range s.m {
		n += len(k) + len(v)
	}
	return n
}

// Keys lists the keys held, sorted bytewise.
func (s *MemStore) Keys() [][]byte {
	out := make([][]byte, 0, len(s.m))
	for _, k := range slices.Sorted(maps.Keys(s.m)) {
		out = append(out, []byte(k))
	}
	return out
}

// Clone returns an independent copy of the store, as a restarted projector
// would find its state after reopening it.
func (s *MemStore) Clone() *MemStore {
	c := &MemStore{m: make(map[string][]byte, len(s.m))}
	for k, v := range s.m {
		c.m[k] = bytes.Clone(v)
	}
	return c
}
