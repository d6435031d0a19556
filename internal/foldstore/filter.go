package foldstore

import "github.com/cespare/xxhash/v2"

// keyFilter is a Bloom filter of every key a [Spill] was ever given. A
// fold reads many keys that were never written — every new event id in
// its duplicate index — and the filter answers most of those in memory,
// where Pebble would open the index and filter block of every table that
// might hold the key (most of a replay's time at a few million facts).
// The filter only decides whether to look: a "maybe" reads the database,
// so what a read returns never depends on it.
//
// Its size is fixed, so a spill's memory stays flat in run length; past
// about 20 keys a byte its false positives grow and more reads go to
// Pebble, which only costs time.
type keyFilter struct {
	bits []uint64
	mask uint64 // number of bits - 1, a power of two
}

// filterHashes is the number of bits a key sets: the best for about 7–14
// bits per key, the range a 32 MiB filter gives 20–40 M keys.
const filterHashes = 5

// newKeyFilter makes a filter of bytes bytes, rounded down to a power of
// two and at least 64 bytes.
func newKeyFilter(bytes int) *keyFilter {
	words := 8
	for words*2*8 <= bytes {
		words *= 2
	}
	return &keyFilter{bits: make([]uint64, words), mask: uint64(words*64 - 1)}
}

// probes are a key's bit positions, by double hashing one 64-bit hash.
func (f *keyFilter) probes(key []byte, fn func(bit uint64) bool) {
	h := xxhash.Sum64(key)
	h1, h2 := h, h>>33|1
	for i := range uint64(filterHashes) {
		if !fn((h1 + i*h2) & f.mask) {
			return
		}
	}
}

func (f *keyFilter) add(key []byte) {
	f.probes(key, func(bit uint64) bool {
		f.bits[bit>>6] |= 1 << (bit & 63)
		return true
	})
}

// mayContain is false only for a key never added.
func (f *keyFilter) mayContain(key []byte) bool {
	in := true
	f.probes(key, func(bit uint64) bool {
		in = f.bits[bit>>6]&(1<<(bit&63)) != 0
		return in
	})
	return in
}
