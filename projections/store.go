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

// An EventIndex is a [Store] that keeps the dedup index's entries (one per
// event, its SHA-256, docs/design.md §5.4) by the event's packed id. The
// fold then looks an event up and records it in one call, where a plain
// Store is asked a Get and a Set of a key it would parse back: a replay
// does that once a fact. Entries recorded this way are the ones Get and
// Set see under the event's key.
type EventIndex interface {
	// RecordEvent returns the digest recorded under id and true; when
	// there is none it records sum under id and returns false. The digest
	// returned is valid until the store's next call.
	RecordEvent(id [16]byte, sum *[32]byte) (prev []byte, seen bool, err error)
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
	if len(key) != EventKeyLen || !bytes.HasPrefix(key, []byte(pfxEvent)) {
		return [16]byte{}, false
	}
	return parseUUID(key[len(pfxEvent):])
}

// parseUUID packs a UUID written canonically (lowercase 8-4-4-4-12); ok is
// false for any other text.
func parseUUID[T string | []byte](u T) (id [16]byte, ok bool) {
	if len(u) != 36 || u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
		return id, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
		}
		hi, lo := hexValue[u[i]], hexValue[u[i+1]]
		if hi|lo > 15 {
			return id, false
		}
		id[j] = hi<<4 | lo
		j++
	}
	return id, true
}

// hexValue is the value of each lowercase hexadecimal digit, 0xff for
// every other byte.
var hexValue = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

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

// RecordEvent implements [EventIndex].
func (s *MemStore) RecordEvent(id [16]byte, sum *[32]byte) ([]byte, bool, error) {
	if v, ok := s.events[id]; ok {
		return v[:], true, nil
	}
	s.events[id] = *sum
	return nil, false, nil
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
