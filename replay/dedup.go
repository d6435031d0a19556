package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// The fold's dedup index, on disk (docs/design.md §14.2).
//
// A replay's fold writes one dedup entry per fact — the event id and the
// SHA-256 of its first record — and looks every fact's id up first, almost
// always in vain. In the scratch Pebble database those entries were most
// of its work: a skiplist insert per fact, flushes, and compactions that
// rewrite random keys level after level, some 4 µs of CPU a fact. They need
// far less: entries of one fixed size, never changed or deleted once
// written, and lookups that a filter settles in memory but for true
// repeats and the filter's few false positives.
//
// So a pass keeps them apart: new entries gather in a map; a full map is
// sorted and written as a run, a file of 48-byte entries (16-byte id,
// 32-byte digest) in id order, once: runs are never merged. A filter of
// every id written settles nearly every lookup in memory; one that it lets
// through reads the map, then asks each run's own filter (one cache line
// each) and reads one page of the few runs that filter lets through, found
// by the first id of every page kept in memory. Merging runs would bound
// the runs a lookup asks, but rewrote every entry about log2 of the runs
// times (at 50 M facts, some 7 times 2.4 GB), for lookups the filter lets
// through a time in a hundred. Memory is the map (and, from the first
// spill, a second array as large for its sort), the filters and the page
// ids: flat but for 22 bits a fact (the filters) and 16 bytes per 85. All
// but the page ids are kept off the Go heap (offheap.go).

const (
	dedupEntry      = 16 + 32
	dedupPage       = 85 // entries a page: 4,080 bytes
	dedupMemEntries = 1 << 19
	// dedupFilterBytes bounds the filter of the ids written: at 50 M
	// facts, ~11 bits an id and 1% false positives. A run known to be
	// shorter gets dedupFilterBits an id (dedupFilterFor).
	dedupFilterBytes = 64 << 20
	dedupFilterBits  = 12
	dedupFilterMin   = 64 << 10
	dedupHashes      = 7
	// dedupRunBits is the bits per entry of a run's own filter: ~1% false
	// positives, each a page read.
	dedupRunBits = 10
)

type dedupID = [16]byte
type dedupSum = [32]byte

type dedupIndex struct {
	dir   string
	limit int // entries held in memory [dedupMemEntries]
	// mem holds the entries not in a run yet, slots an open-addressing
	// table of their positions in mem, plus one (0 is free), in its low
	// 32 bits and the high 32 bits of their hash in its high ones: a probe
	// reads mem only when those match.
	mem    []dedupMem
	slots  []uint64
	spare  []dedupMem  // the other half of a spill's radix sort
	runs   []*dedupRun // oldest first
	filter bloom       // every id written
	// arena holds the filters' words and the arrays above, outside the Go
	// heap (offheap.go).
	arena *wordArena
	next  int // name of the next run file
	page  [dedupPage * dedupEntry]byte
	value dedupSum // the value a Get lends
}

type dedupMem struct {
	id  dedupID
	sum dedupSum
}

// dedupRun is a sorted file of entries, with the first id of every page
// and a filter of its ids.
type dedupRun struct {
	f      *os.File
	n      int
	fence  []dedupID
	filter bloom
}

// newDedupIndex makes an empty index in dir for a run of at most facts
// facts (0: unknown).
func newDedupIndex(dir string, facts uint64) *dedupIndex {
	a := &wordArena{}
	return &dedupIndex{dir: dir, limit: dedupMemEntries, filter: newBloom(a, dedupFilterFor(facts)), arena: a}
}

// dedupFilterFor sizes the filter of a run of at most facts facts (0:
// unknown, the largest). A filter no larger than the run needs stays in
// the caches a fact's probe reads, and costs no page faults for pages a
// short run never fills; a run longer than its bound only sees more false
// positives, each a lookup in memory.
func dedupFilterFor(facts uint64) int {
	if facts == 0 || facts >= dedupFilterBytes*8/dedupFilterBits {
		return dedupFilterBytes
	}
	return max(dedupFilterMin, int(facts)*dedupFilterBits/8)
}

// bloom is a blocked Bloom filter: every id sets dedupHashes bits of one
// 64-byte block, so a probe reads one cache line.
type bloom struct {
	words  []uint64
	blocks uint64
}

// newBloom makes an empty filter of about bytes bytes, its words from a.
func newBloom(a *wordArena, bytes int) bloom {
	blocks := max(1, bytes/64)
	return bloom{words: a.words(blocks * 8), blocks: uint64(blocks)}
}

// probe calls fn with the word and bit of each of h's bits until fn
// returns false.
func (b *bloom) probe(h uint64, fn func(w *uint64, bit uint64) bool) {
	block := b.words[(h%b.blocks)*8:][:8]
	// The bits come from a second mix of the hash, independent of the
	// bits that chose the block.
	h2 := (h ^ h>>33) * 0xff51afd7ed558ccd
	h2 = (h2 ^ h2>>33) * 0xc4ceb9fe1a85ec53
	h2 ^= h2 >> 33
	for range dedupHashes {
		bit := h2 & 511
		if !fn(&block[bit>>6], 1<<(bit&63)) {
			return
		}
		h2 = h2>>9 | h2<<55
	}
}

// has says whether h may have been added.
func (b *bloom) has(h uint64) bool {
	in := true
	b.probe(h, func(w *uint64, bit uint64) bool {
		in = *w&bit != 0
		return in
	})
	return in
}

// add adds h and says whether it may have been added before.
func (b *bloom) add(h uint64) (seen bool) {
	seen = true
	b.probe(h, func(w *uint64, bit uint64) bool {
		seen = seen && *w&bit != 0
		*w |= bit
		return true
	})
	return seen
}

func dedupHash(id *dedupID) uint64 { return xxhash.Sum64(id[:]) }

// lookup finds id among the entries in memory: the slot it is in, or the
// free slot it would take.
func (d *dedupIndex) lookup(id *dedupID, h uint64) (slot int, found bool) {
	mask := len(d.slots) - 1
	tag := h &^ (1<<32 - 1)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		e := d.slots[i]
		if e == 0 {
			return i, false
		}
		if e&^(1<<32-1) == tag && d.mem[uint32(e)-1].id == *id {
			return i, true
		}
	}
}

// get returns the digest stored under id; it is lent until the next get.
func (d *dedupIndex) get(id dedupID) ([]byte, bool, error) {
	h := dedupHash(&id)
	if !d.filter.has(h) {
		return nil, false, nil
	}
	return d.find(id, h)
}

// find looks id up in memory and in the runs whose filters let it through.
func (d *dedupIndex) find(id dedupID, h uint64) ([]byte, bool, error) {
	if len(d.slots) > 0 {
		if i, ok := d.lookup(&id, h); ok {
			d.value = d.mem[uint32(d.slots[i])-1].sum
			return d.value[:], true, nil
		}
	}
	for i := len(d.runs) - 1; i >= 0; i-- {
		r := d.runs[i]
		if !r.filter.has(h) {
			continue
		}
		ok, err := r.find(id, &d.page, &d.value)
		if err != nil || ok {
			return d.value[:], ok, err
		}
	}
	return nil, false, nil
}

// set stores the digest of an id not stored yet: the fold writes an id's
// entry once, after looking it up.
func (d *dedupIndex) set(id dedupID, sum dedupSum) error {
	_, found, err := d.record(&id, &sum)
	if err == nil && found {
		err = fmt.Errorf("replay: dedup index: event %x written twice", id)
	}
	return err
}

// record returns the digest stored under id (lent until the next lookup)
// and true, or stores sum under id and returns false: a get and a set in
// one hash of the id and one probe of the filter, which almost always
// settles that the id is new.
func (d *dedupIndex) record(id *dedupID, sum *dedupSum) ([]byte, bool, error) {
	h := dedupHash(id)
	if d.filter.add(h) {
		if v, ok, err := d.find(*id, h); err != nil || ok {
			return v, ok, err
		}
	}
	if d.slots == nil {
		d.slots = d.arena.words(1 << bits.Len(uint(2*d.limit-1)))
		d.mem = d.entries(d.limit)[:0]
	}
	i, _ := d.lookup(id, h)
	d.mem = append(d.mem, dedupMem{id: *id, sum: *sum})
	d.slots[i] = h&^(1<<32-1) | uint64(len(d.mem))
	if len(d.mem) < d.limit {
		return nil, false, nil
	}
	return nil, false, d.spill()
}

// compareIDs orders ids as bytes.Compare does, a word at a time.
func compareIDs(a, b *dedupID) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]))
}

// spill writes the entries in memory as a run, sorted by id (sortMem).
func (d *dedupIndex) spill() error {
	d.sortMem()
	r, w, err := d.create(len(d.mem))
	if err != nil {
		return err
	}
	for i := range d.mem {
		e := &d.mem[i]
		if err := w.add(&e.id, e.sum[:]); err != nil {
			return err
		}
	}
	if err := w.finish(); err != nil {
		return err
	}
	d.mem = d.mem[:0]
	clear(d.slots)
	d.runs = append(d.runs, r)
	return nil
}

// entries returns n zeroed entries outside the Go heap, as the filters
// are (offheap.go): the map, its slots and the spill's second array hold
// no pointers and live as long as the index, 56 MiB that the collector's
// pacing would otherwise match with as much room for garbage.
func (d *dedupIndex) entries(n int) []dedupMem {
	w := d.arena.words(n * int(unsafe.Sizeof(dedupMem{})) / 8)
	return unsafe.Slice((*dedupMem)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// sortMem sorts the entries in memory by id: a radix sort of the ids'
// first eight bytes, a byte a pass from the last, moving the entries
// between mem and spare, then the rare runs of equal first words by the
// rest. A comparison sort of a spill's half a million entries through a
// function value took as long as the fold of a hundred thousand facts,
// and writing entries in the order of a sorted index of them read mem at
// random, a cache miss an entry; the passes read and write it in order. A
// byte every entry shares (the top bytes of the timestamp in a run's
// UUIDv7s) costs one counting pass.
func (d *dedupIndex) sortMem() {
	if cap(d.spare) < len(d.mem) {
		d.spare = d.entries(len(d.mem))
	}
	src, dst := d.mem, d.spare[:len(d.mem)]
	if len(src) == 0 {
		return
	}
	var count [256]int
	for b := 7; b >= 0; b-- {
		count = [256]int{}
		for i := range src {
			count[src[i].id[b]]++
		}
		if count[src[0].id[b]] == len(src) {
			continue // every entry has this byte: already in order by it
		}
		at := 0
		for v, c := range count {
			count[v] = at
			at += c
		}
		for i := range src {
			v := src[i].id[b]
			dst[count[v]] = src[i]
			count[v]++
		}
		src, dst = dst, src
	}
	d.mem, d.spare = src, dst[:0]
	for i := 0; i < len(src); {
		j := i + 1
		for j < len(src) && [8]byte(src[j].id[:8]) == [8]byte(src[i].id[:8]) {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(src[i:j], func(a, b dedupMem) int { return compareIDs(&a.id, &b.id) })
		}
		i = j
	}
}

// runWriter writes a run's entries in order.
type runWriter struct {
	r *dedupRun
	w *bufio.Writer
}

// create makes an empty run file for n entries (createUnlinked).
func (d *dedupIndex) create(n int) (*dedupRun, *runWriter, error) {
	f, err := createUnlinked(d.dir, fmt.Sprintf("dedup-%06d", d.next))
	d.next++
	if err != nil {
		return nil, nil, fmt.Errorf("replay: dedup index: %w", err)
	}
	r := &dedupRun{f: f, filter: newBloom(d.arena, n*dedupRunBits/8)}
	return r, &runWriter{r: r, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (w *runWriter) add(id *dedupID, sum []byte) error {
	if w.r.n%dedupPage == 0 {
		w.r.fence = append(w.r.fence, *id)
	}
	w.r.n++
	w.r.filter.add(dedupHash(id))
	if _, err := w.w.Write(id[:]); err != nil {
		return fmt.Errorf("replay: dedup index: %w", err)
	}
	if _, err := w.w.Write(sum); err != nil {
		return fmt.Errorf("replay: dedup index: %w", err)
	}
	return nil
}

func (w *runWriter) finish() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("replay: dedup index: %w", err)
	}
	return nil
}

// find looks id up in the run, reading one page into page.
func (r *dedupRun) find(id dedupID, page *[dedupPage * dedupEntry]byte, sum *dedupSum) (bool, error) {
	// The last page whose first id is at most id.
	p, found := slices.BinarySearchFunc(r.fence, id, func(f, id dedupID) int { return compareIDs(&f, &id) })
	if !found {
		if p == 0 {
			return false, nil
		}
		p--
	}
	n := min(dedupPage, r.n-p*dedupPage)
	b := page[:n*dedupEntry]
	if _, err := r.f.ReadAt(b, int64(p)*dedupPage*dedupEntry); err != nil {
		return false, fmt.Errorf("replay: dedup index: %w", err)
	}
	// The first entry of the page whose id is at least id.
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(b[m*dedupEntry:m*dedupEntry+16], id[:]) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < n && bytes.Equal(b[lo*dedupEntry:lo*dedupEntry+16], id[:]) {
		copy(sum[:], b[lo*dedupEntry+16:(lo+1)*dedupEntry])
		return true, nil
	}
	return false, nil
}

func (r *dedupRun) close() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("replay: dedup index: %w", err)
	}
	return nil
}

// close closes every run, their files already gone, and frees the
// filters: the index is not used after it.
func (d *dedupIndex) close() error {
	var first error
	for _, r := range d.runs {
		if err := r.close(); err != nil && first == nil {
			first = err
		}
	}
	d.runs, d.filter, d.mem, d.slots, d.spare = nil, bloom{}, nil, nil, nil
	d.arena.free()
	return first
}

// createUnlinked makes a new file name in dir, for reading and writing,
// and removes it from the directory at once: it lives while it is open,
// and nothing is left behind by a pass that ends without closing it.
func createUnlinked(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
