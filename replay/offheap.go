package replay

import "unsafe"

// The dedup index's filters and arrays outside the Go heap (docs/design.md
// §14.2).
//
// The filters are the index's one part that grows with the run: 12 bits a
// fact for the filter of every id, 10 more for the runs' own. They live
// as long as the index, hold no pointers, and are read a cache line at a
// time, so the collector gains nothing from them; yet on its heap they
// count towards the live heap its pacing doubles, and a 10 M-fact replay
// held some 27 MiB of filters and as much again of room for garbage
// beside them. So they are mapped apart from the heap, where the system
// allows it (offheap_unix.go), and unmapped when the index closes. So are
// the map of entries not spilled yet, its slots and the spill's second
// array (56 MiB, without pointers, as long-lived).

// wordArena hands out zeroed []uint64 backed by memory outside the Go
// heap, and frees them all at once.
type wordArena struct {
	regions [][]byte
}

// words returns n zeroed words, valid until free.
func (a *wordArena) words(n int) []uint64 {
	if n == 0 {
		return nil
	}
	b := mapZeroed(8 * n)
	a.regions = append(a.regions, b)
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// free releases every region handed out; the words must not be used
// after it. It may be called more than once.
func (a *wordArena) free() {
	for _, b := range a.regions {
		unmap(b)
	}
	a.regions = nil
}
