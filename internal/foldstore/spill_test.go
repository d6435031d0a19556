package foldstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A Spill reads back what a MemStore does after the same writes, across
// many flushes of its overlay to the database.
func TestSpillMatchesMemStore(t *testing.T) {
	s, err := OpenSpill(SpillOptions{Dir: t.TempDir(), OverlayKeys: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := projections.NewMemStore()
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte { return fmt.Appendf(nil, "k%03d", rng.IntN(200)) }
	for i := range 20_000 {
		k := key()
		switch rng.IntN(3) {
		case 0:
			v := fmt.Appendf(nil, "v%d", i)
			if err := s.Set(k, v); err != nil {
				t.Fatal(err)
			}
			m.Set(k, v)
		case 1:
			if err := s.Delete(k); err != nil {
				t.Fatal(err)
			}
			m.Delete(k)
		default:
			got, gok, err := s.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			want, wok, _ := m.Get(k)
			if gok != wok || !bytes.Equal(got, want) {
				t.Fatalf("op %d: Get(%s) = %q, %t; want %q, %t", i, k, got, gok, want, wok)
			}
		}
	}
}

// Close removes the scratch database.
func TestSpillCloseRemovesDir(t *testing.T) {
	s, err := OpenSpill(SpillOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Close (stat: %v)", dir, err)
	}
}
