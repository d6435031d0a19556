package foldstore

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A Spill reads back what a MemStore does after the same writes, across
// many flushes of its overlay to the database, whether its key filter
// rules out most keys never written (the default) or, saturated, none,
// and whether the overlay is flushed for its keys or for its bytes.
func TestSpillMatchesMemStore(t *testing.T) {
	for _, o := range []SpillOptions{
		{OverlayKeys: 7},
		{OverlayKeys: 7, FilterBytes: 64},
		{OverlayKeys: 1 << 20, OverlayBytes: 100},
	} {
		t.Run(fmt.Sprintf("filter=%d,keys=%d,bytes=%d", o.FilterBytes, o.OverlayKeys, o.OverlayBytes), func(t *testing.T) {
			o.Dir = t.TempDir()
			s, err := OpenSpill(o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			m := projections.NewMemStore()
			rng := rand.New(rand.NewPCG(1, 2))
			key := func() []byte { return fmt.Appendf(nil, "k%04d", rng.IntN(2000)) }
			for i := range 20_000 {
				k := key()
				switch rng.IntN(4) {
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
		})
	}
}

// The overlay of large values is written out by its bytes, long before
// it holds OverlayKeys of them, and every value reads back.
func TestSpillBoundsOverlayBytes(t *testing.T) {
	const limit, value = 1 << 20, 64 << 10
	s, err := OpenSpill(SpillOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.bytes = limit
	v := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, value) }
	for i := range 200 {
		if err := s.Set(fmt.Appendf(nil, "turn/%03d", i), v(i)); err != nil {
			t.Fatal(err)
		}
		if b := s.ov.Bytes(); b >= limit+value+16 {
			t.Fatalf("after %d values of %d bytes the overlay holds %d bytes, past its bound of %d and one value", i+1, value, b, limit)
		}
	}
	for i := range 200 {
		got, ok, err := s.Get(fmt.Appendf(nil, "turn/%03d", i))
		if err != nil || !ok || !bytes.Equal(got, v(i)) {
			t.Fatalf("value %d: ok %t, err %v, %d bytes read back", i, ok, err, len(got))
		}
	}
}

// The key filter never rules out a key it was given, and lets through no
// more of the others than a Bloom filter of its size should.
func TestKeyFilter(t *testing.T) {
	const n = 100_000
	f := newKeyFilter(n * 2) // 128 KiB: 10.5 bits a key
	for i := range n {
		f.add(fmt.Appendf(nil, "event/%d", i))
	}
	for i := range n {
		if !f.mayContain(fmt.Appendf(nil, "event/%d", i)) {
			t.Fatalf("event/%d was added and is ruled out", i)
		}
	}
	fp := 0
	for i := range n {
		if f.mayContain(fmt.Appendf(nil, "other/%d", i)) {
			fp++
		}
	}
	bitsPerKey := float64(f.mask+1) / n
	theory := math.Pow(1-math.Exp(-filterHashes/bitsPerKey), filterHashes)
	if rate := float64(fp) / n; rate > 1.5*theory {
		t.Errorf("false positives %.3f%% of keys never added, want about %.3f%% (%.1f bits a key)", 100*rate, 100*theory, bitsPerKey)
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
