// Package slab cuts many small byte slices from a few shared blocks: one
// allocation for many values that live about as long as each other (a
// replay's frames in flight, a fact tree's hashes).
package slab

// Bytes cuts slices from blocks of Block bytes. A slice keeps its whole
// block alive while it is; each slice's capacity ends at its own bytes,
// so an append to it cannot run into the next. Its zero value cuts every
// slice alone; set Block.
type Bytes struct {
	Block int
	free  []byte
}

// Cut returns n bytes, zeroed. A slice of more than a quarter of a block
// is allocated alone, so that a large one wastes no block.
func (b *Bytes) Cut(n int) []byte {
	if n > b.Block/4 {
		return make([]byte, n)
	}
	if len(b.free) < n {
		b.free = make([]byte, b.Block)
	}
	p := b.free[:n:n]
	b.free = b.free[n:]
	return p
}
