package slab

import (
	"bytes"
	"testing"
)

// Slices cut from one block do not overlap, an append to one leaves the
// next alone, and a large slice or a zero Bytes allocates alone.
func TestCut(t *testing.T) {
	b := Bytes{Block: 64}
	x, y := b.Cut(10), b.Cut(6)
	if len(x) != 10 || cap(x) != 10 || len(y) != 6 || cap(y) != 6 {
		t.Fatalf("len/cap %d/%d and %d/%d", len(x), cap(x), len(y), cap(y))
	}
	copy(y, "yyyyyy")
	x = append(x, 'z')
	copy(x, "xxxxxxxxxx")
	if string(y) != "yyyyyy" {
		t.Fatalf("an append to one slice wrote into the next: %q", y)
	}
	if b.Cut(1); len(b.free) != 64-17 {
		t.Fatalf("the third slice was not cut from the same block: %d bytes free", len(b.free))
	}
	big := b.Cut(17)
	if len(big) != 17 || len(b.free) != 64-17 {
		t.Fatalf("a slice over a quarter block took %d of the block's bytes", 64-17-len(b.free))
	}
	var zero Bytes
	if z := zero.Cut(8); len(z) != 8 || !bytes.Equal(z, make([]byte, 8)) {
		t.Fatalf("zero Bytes cut %v", z)
	}
	for range 10 {
		if p := b.Cut(16); !bytes.Equal(p, make([]byte, 16)) {
			t.Fatalf("a cut slice is not zeroed: %v", p)
		}
	}
}
