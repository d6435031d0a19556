package foldstore

import (
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// SpillOptions size a [Spill]. The zero value means the defaults.
type SpillOptions struct {
	// Dir is where the temporary database is made; empty means the
	// system's temporary directory.
	Dir string
	// CacheBytes is Pebble's block cache [64 MiB].
	CacheBytes int64
	// FilterBytes is the in-memory filter of the keys written [32 MiB],
	// which settles most reads of keys never written without Pebble.
	FilterBytes int
	// MemTableBytes is the size of one memtable [16 MiB]; Pebble holds at
	// most two.
	MemTableBytes uint64
	// OverlayKeys is how many keys the in-memory overlay holds before it
	// is written to the database [32,768].
	OverlayKeys int
	// OverlayBytes is how many bytes of keys and values it holds before
	// then, whatever their number [8 MiB]: a fold of token-bearing turns
	// writes each turn's arrays (kilobytes) to its state, and 32,768 of
	// them, with the write batch that copies them to Pebble, had held
	// gigabytes. At 32 MiB a token-bearing export of a million facts
	// peaked at 709 MiB, at 8 MiB at 481 (BENCHMARKS.md).
	OverlayBytes int
}

func (o SpillOptions) withDefaults() SpillOptions {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.FilterBytes <= 0 {
		o.FilterBytes = 32 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 16 << 20
	}
	if o.OverlayKeys <= 0 {
		o.OverlayKeys = 32 << 10
	}
	if o.OverlayBytes <= 0 {
		o.OverlayBytes = 8 << 20
	}
	return o
}

// Spill is a [projections.Store] in a temporary Pebble database, removed
// by Close: a fold's state whose memory is bounded by the overlay, the
// memtables and the block cache, whatever the length of the run. Nothing
// is synced and there is no write-ahead log: the database does not outlive
// the process that made it.
type Spill struct {
	dir    string
	db     *pebble.DB
	ov     *Overlay
	limit  int // keys
	bytes  int // and bytes (Overlay.Bytes)
	filter *keyFilter
}

// OpenSpill makes an empty Spill in a new temporary directory.
func OpenSpill(o SpillOptions) (*Spill, error) {
	o = o.withDefaults()
	dir, err := os.MkdirTemp(o.Dir, "rolloutledger-fold-")
	if err != nil {
		return nil, fmt.Errorf("foldstore: scratch directory: %w", err)
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	po := &pebble.Options{
		Cache:         cache,
		MemTableSize:  o.MemTableBytes,
		DisableWAL:    true,
		Logger:        quietLogger{dir: dir},
		ErrorIfExists: true,
	}
	// The fold reads many keys that do not exist yet (every new event id
	// in the dedup index): Bloom filters settle those without reading a
	// block.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, po)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("foldstore: open scratch database in %s: %w", dir, err)
	}
	s := &Spill{dir: dir, db: db, limit: o.OverlayKeys, bytes: o.OverlayBytes, filter: newKeyFilter(o.FilterBytes)}
	s.ov = s.newOverlay()
	return s, nil
}

// newOverlay is an empty overlay that reads the database only for keys
// the filter does not rule out.
func (s *Spill) newOverlay() *Overlay {
	ov := NewOverlay(s.db)
	ov.absent = func(k []byte) bool { return !s.filter.mayContain(k) }
	return ov
}

// Dir is the temporary directory the database lives in.
func (s *Spill) Dir() string { return s.dir }

// spill writes the overlay to the database once it holds limit keys or
// bytes bytes. Values handed out by Get stay valid: the old overlay is
// dropped, not overwritten.
func (s *Spill) spill() error {
	if s.ov.Len() < s.limit && s.ov.Bytes() < s.bytes {
		return nil
	}
	return s.Flush()
}

// Flush writes the overlay to the database and starts an empty one.
func (s *Spill) Flush() error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.ov.Flush(b); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("foldstore: %w", err)
	}
	s.ov = s.newOverlay()
	return nil
}

// Get implements [projections.Store].
func (s *Spill) Get(k []byte) ([]byte, bool, error) {
	if err := s.spill(); err != nil {
		return nil, false, err
	}
	return s.ov.Get(k)
}

// Set implements [projections.Store].
func (s *Spill) Set(k, v []byte) error {
	if err := s.spill(); err != nil {
		return err
	}
	s.filter.add(k)
	s.ov.Set(k, v)
	return nil
}

// Delete implements [projections.Store].
func (s *Spill) Delete(k []byte) error {
	if err := s.spill(); err != nil {
		return err
	}
	s.ov.Delete(k)
	return nil
}

// Close closes the database and removes its directory.
func (s *Spill) Close() error {
	err := s.db.Close()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// quietLogger drops Pebble's informational lines; a fatal one panics, as
// Pebble expects, naming the scratch directory.
type quietLogger struct{ dir string }

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (l quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble, scratch directory %s: "+format, append([]any{l.dir}, args...)...))
}
