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
//	m <run> 0x00 <seq:8>                 a sealed batch's samples (NDJSON)
//	r <run>                              run index: first-seen order (8 bytes)
const (
	nsOffset   = 'o'
	nsState    = 's'
	nsDecision = 'd'
	nsSamples  = 'm'
	nsRun      = 'r'
)

// runStore is the projections.Store of one run inside a Pebble indexed
// batch: reads see the batch's own writes, so a fold applied to many
// records before one commit reads what it wrote.
type runStore struct {
	b      *pebble.Batch
	prefix []byte
}

func newRunStore(b *pebble.Batch, run string) *runStore {
	p := make([]byte, 0, len(run)+2)
	p = append(p, nsState)
	p = append(p, run...)
	p = append(p, 0)
	return &runStore{b: b, prefix: p}
}

func (s *runStore) key(k []byte) []byte {
	out := make([]byte, 0, len(s.prefix)+len(k))
	return append(append(out, s.prefix...), k...)
}

func (s *runStore) Get(k []byte) ([]byte, bool, error) {
	return get(s.b, s.key(k))
}

func (s *runStore) Set(k, v []byte) error { return s.b.Set(s.key(k), v, nil) }

func (s *runStore) Delete(k []byte) error { return s.b.Delete(s.key(k), nil) }

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
