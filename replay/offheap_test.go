package replay

import "testing"

// An arena's words are zeroed, each slice its own memory, and free may be
// called again.
func TestWordArena(t *testing.T) {
	a := &wordArena{}
	if w := a.words(0); w != nil {
		t.Errorf("0 words: %d, want none", len(w))
	}
	x, y := a.words(1<<16), a.words(3)
	for i := range x {
		if x[i] != 0 {
			t.Fatalf("word %d of a new slice is %#x, want 0", i, x[i])
		}
		x[i] = ^uint64(i)
	}
	for i := range y {
		if y[i] != 0 {
			t.Fatalf("word %d of the second slice is %#x after the first was written, want 0", i, y[i])
		}
		y[i] = 7
	}
	for i := range x {
		if x[i] != ^uint64(i) {
			t.Fatalf("word %d of the first slice is %#x after the second was written", i, x[i])
		}
	}
	if len(a.regions) != 2 {
		t.Errorf("%d regions held, want 2", len(a.regions))
	}
	a.free()
	a.free()
	if len(a.regions) != 0 {
		t.Errorf("%d regions held after free, want none", len(a.regions))
	}
}
