package projections

import (
	"bytes"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
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
//
// The dedup index — one entry per event of the run, a canonical UUID key
// and a SHA-256 value — is most of a long run's state, so MemStore keeps
// those entries packed in a table without pointers (48 bytes each, which
// the garbage collector need not scan) rather than as strings and slices.
// Nothing else sees the difference.
type MemStore struct {
	m      map[string][]byte
	events map[[16]byte][32]byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{m: map[string][]byte{}, events: map[[16]byte][32]byte{}}
}

// EventKeyLen is the length of a dedup-index key of a canonical UUID.
const EventKeyLen = len(pfxEvent) + 36

// EventKey is the dedup-index key of event id.
func EventKey(id string) []byte { return eventKey(id) }

// ParseEventKey returns the packed form of a dedup-index key: the event
// prefix and a UUID written canonically (lowercase 8-4-4-4-12), so that it
// prints back to the same bytes; ok is false for any other key.
func ParseEventKey(key []byte) ([16]byte, bool) {
	var id [16]byte
	if len(key) != EventKeyLen || !bytes.HasPrefix(key, []byte(pfxEvent)) {
		return id, false
	}
	u := key[len(pfxEvent):]
	if u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
		return id, false
	}
	j := 0
	for _, part := range [][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}} {
		for i := part[0]; i < part[1]; i += 2 {
			hi, ok1 := lowerHex(u[i])
			lo, ok2 := lowerHex(u[i+1])
			if !ok1 || !ok2 {
				return id, false
			}
			id[j] = hi<<4 | lo
			j++
		}
	}
	return id, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func eventKeyOf(id [16]byte) string {
	h := hex.EncodeToString(id[:])
	return pfxEvent + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Get returns the value stored under key.
func (s *MemStore) Get(key []byte) ([]byte, bool, error) {
	if id, ok := ParseEventKey(key); ok {
		if v, ok := s.events[id]; ok {
			return v[:], true, nil
		}
	}
	v, ok := s.m[string(key)]
	return v, ok, nil
}

// Set stores a copy of value under key.
func (s *MemStore) Set(key, value []byte) error {
	if id, ok := ParseEventKey(key); ok && len(value) == 32 {
		delete(s.m, string(key))
		s.events[id] = [32]byte(value)
		return nil
	}
	if id, ok := ParseEventKey(key); ok {
		delete(s.events, id)
	}
	s.m[string(key)] = bytes.Clone(value)
	return nil
}

// Delete removes key; deleting an absent key is not an error.
func (s *MemStore) Delete(key []byte) error {
	if id, ok := ParseEventKey(key); ok {
		delete(s.events, id)
	}
	delete(s.m, string(key))
	return nil
}

// Len is the number of keys held.
func (s *MemStore) Len() int { return len(s.m) + len(s.events) }

// Size is the number of key and value bytes held.
func (s *MemStore) Size() int {
	n := len(s.events) * (len(pfxEvent) + 36 + 32)
	for k, v := range s.m {
		n += len(k) + len(v)
	}
	return n
}

// Keys lists the keys held, sorted bytewise.
func (s *MemStore) Keys() [][]byte { return s.KeysWithPrefix(nil) }

// KeysWithPrefix lists the keys that start with prefix, sorted bytewise.
func (s *MemStore) KeysWithPrefix(prefix []byte) [][]byte {
	var keys []string
	for k := range s.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	if len(s.events) > 0 && (strings.HasPrefix(pfxEvent, string(prefix)) || strings.HasPrefix(string(prefix), pfxEvent)) {
		for id := range s.events {
			if k := eventKeyOf(id); strings.HasPrefix(k, string(prefix)) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

// Clone returns an independent copy of the store, as a restarted projector
// would find its state after reopening it.
func (s *MemStore) Clone() *MemStore {
	c := &MemStore{m: make(map[string][]byte, len(s.m)), events: make(map[[16]byte][32]byte, len(s.events))}
	maps.Copy(c.events, s.events)
	for k, v := range s.m {
		c.m[k] = bytes.Clone(v)
	}
	return c
}
