package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// The dedup index answers every id written with its digest and every other
// id with nothing, across its map and its runs, whether its filter of
// every id settles a lookup or lets it through to the runs' own filters
// and pages.
func TestDedupIndex(t *testing.T) {
	random := func(i int) dedupID {
		s := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
		return dedupID(s[:16])
	}
	t.Run("filter", func(t *testing.T) { testDedupIndex(t, newDedupIndex(t.TempDir(), 0), random) })
	// A filter sized for a run a tenth as long as the one it sees.
	t.Run("a run past its bound", func(t *testing.T) { testDedupIndex(t, newDedupIndex(t.TempDir(), 1000), random) })
	t.Run("every lookup reaches the runs", func(t *testing.T) {
		d := newDedupIndex(t.TempDir(), 0)
		d.filter = newBloom(d.arena, 64) // one block: every bit set after a few ids
		testDedupIndex(t, d, random)
	})
	// UUIDv7s made in one millisecond share their first six bytes; a
	// spill orders ids by their first eight, then by the rest.
	t.Run("ids sharing their first word", func(t *testing.T) {
		d := newDedupIndex(t.TempDir(), 0)
		d.filter = newBloom(d.arena, 64)
		testDedupIndex(t, d, func(i int) dedupID {
			id := random(i)
			binary.BigEndian.PutUint64(id[:8], uint64(i%3))
			return id
		})
	})
}

// The filter is sized by the run's bound, within its least and its most.
func TestDedupFilterFor(t *testing.T) {
	for _, tc := range []struct {
		facts uint64
		bytes int
	}{
		{0, dedupFilterBytes}, // unknown
		{1, dedupFilterMin},
		{3_000_000, 3_000_000 * dedupFilterBits / 8},
		{50_000_000, dedupFilterBytes},
		{1 << 40, dedupFilterBytes},
	} {
		if got := dedupFilterFor(tc.facts); got != tc.bytes {
			t.Errorf("%d facts: a filter of %d bytes, want %d", tc.facts, got, tc.bytes)
		}
	}
}

func testDedupIndex(t *testing.T, d *dedupIndex, id func(int) dedupID) {
	d.limit = 100
	defer d.close()
	sum := func(i int) dedupSum { return sha256.Sum256([]byte(fmt.Sprint("value ", i))) }
	const n = 10_000
	for i := range n {
		if _, ok, err := d.get(id(i)); err != nil || ok {
			t.Fatalf("id %d before it was written: ok %v, err %v", i, ok, err)
		}
		if err := d.set(id(i), sum(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(d.runs); got != n/100 {
		t.Errorf("%d runs after %d entries in maps of 100, want %d", got, n, n/100)
	}
	for i := range n + 1000 {
		v, ok, err := d.get(id(i))
		switch {
		case err != nil:
			t.Fatal(err)
		case i < n && (!ok || dedupSum(v) != sum(i)):
			t.Fatalf("id %d: got %x, %v; want %x", i, v, ok, sum(i))
		case i >= n && ok:
			t.Fatalf("id %d was never written, got %x", i, v)
		}
	}
	if err := d.set(id(7), sum(7)); err == nil {
		t.Error("an id written twice is not an error")
	}
	// record answers a written id with its first digest and keeps it,
	// and stores a new one, in the map or past a spill.
	for i := range n + 150 {
		other := sum(-1 - i)
		v, seen, err := d.record(new(id(i)), &other)
		switch {
		case err != nil:
			t.Fatal(err)
		case i < n && (!seen || dedupSum(v) != sum(i)):
			t.Fatalf("record of written id %d: %x, %v; want %x", i, v, seen, sum(i))
		case i >= n && seen:
			t.Fatalf("record of new id %d: seen, %x", i, v)
		}
	}
	for i := range n + 150 {
		want := sum(i)
		if i >= n {
			want = sum(-1 - i)
		}
		if v, ok, err := d.get(id(i)); err != nil || !ok || dedupSum(v) != want {
			t.Fatalf("id %d after record: %x, %v, %v; want %x", i, v, ok, err, want)
		}
	}
}

func TestEventKeyID(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"ev\x000190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", true},
		{"ev\x000190A1B2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", false}, // not canonical
		{"ev\x000190a1b2c3d47e5f8a9b0c1d2e3f4a5b", false},
		{"att\x000190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", false},
		{"ev\x000190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5bx", false},
	} {
		id, ok := projections.ParseEventKey([]byte(tc.key))
		if ok != tc.ok {
			t.Errorf("ParseEventKey(%q): ok %v, want %v", tc.key, ok, tc.ok)
		}
		if ok && fmt.Sprintf("%x", id) != "0190a1b2c3d47e5f8a9b0c1d2e3f4a5b" {
			t.Errorf("ParseEventKey(%q) = %x", tc.key, id)
		}
	}
}

// The scratch store sends event keys to the dedup index by their parsed
// ids, every other key to the spill; a key answers for itself, even one
// written into the buffer of another.
func TestScratchRoutesKeys(t *testing.T) {
	s, err := openScratch(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := projections.EventKey
	k1, k2 := key("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), key("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c")
	sum := func(b byte) []byte { return bytes.Repeat([]byte{b}, len(dedupSum{})) }
	want := func(k []byte, v []byte) {
		t.Helper()
		got, ok, err := s.Get(k)
		switch {
		case err != nil:
			t.Fatal(err)
		case v == nil && ok:
			t.Fatalf("%q: got %x, want nothing", k, got)
		case v != nil && (!ok || !bytes.Equal(got, v)):
			t.Fatalf("%q: got %x (%v), want %x", k, got, ok, v)
		}
	}
	want(k1, nil)
	if err := s.Set(k2, sum(2)); err != nil {
		t.Fatal(err)
	}
	want(k1, nil)
	want(k2, sum(2))
	if err := s.Set(k1, sum(1)); err != nil {
		t.Fatal(err)
	}
	want(k1, sum(1))
	buf := bytes.Clone(k1)
	want(buf, sum(1))
	copy(buf, key("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d"))
	want(buf, nil)
	want(k2, sum(2))
	if err := s.Delete(k1); err == nil {
		t.Error("a dedup entry was deleted")
	}
	// A key of an event key's length that is not one goes to the spill,
	// before any event key was parsed and after.
	for _, fresh := range []bool{true, false} {
		st := s
		if fresh {
			if st, err = openScratch(t.TempDir(), nil); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
		}
		other := make([]byte, projections.EventKeyLen)
		if err := st.Set(other, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := st.Get(other); err != nil || !ok || string(got) != "x" {
			t.Fatalf("a %d-byte key of zeros: got %q %v %v", len(other), got, ok, err)
		}
		if err := st.Delete(other); err != nil {
			t.Fatalf("a key of the spill: %v", err)
		}
	}
}

// A spill's sort orders the entries by id as a comparison sort does,
// whichever bytes of the ids' first words they share, and moves each
// digest with its id.
func TestSortMem(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 7))
	d := newDedupIndex(t.TempDir(), 0)
	defer d.close()
	for _, tc := range []struct {
		name string
		n    int
		mask uint64 // the bits of the first word that vary
	}{
		{"empty", 0, ^uint64(0)},
		{"one", 1, ^uint64(0)},
		{"random", 10_000, ^uint64(0)},
		{"UUIDv7s of one run: the top bytes shared", 10_000, 1<<28 - 1},
		{"a few first words", 10_000, 3 << 40},
		{"one first word", 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := r.Uint64() &^ tc.mask
			d.mem = d.mem[:0]
			for range tc.n {
				var e dedupMem
				binary.BigEndian.PutUint64(e.id[:8], base|r.Uint64()&tc.mask)
				binary.BigEndian.PutUint64(e.id[8:], r.Uint64())
				e.sum = sha256.Sum256(e.id[:])
				d.mem = append(d.mem, e)
			}
			want := slices.Clone(d.mem)
			slices.SortFunc(want, func(a, b dedupMem) int { return bytes.Compare(a.id[:], b.id[:]) })
			d.sortMem()
			if !slices.Equal(d.mem, want) {
				t.Fatalf("the sort differs from a comparison sort of the ids")
			}
		})
	}
}

// BenchmarkDedupSpill is one spill of a full map: the sort of its ids,
// the run's filter, and the writing of its entries. The ids are UUIDv7s
// as a run's engines make them, a millisecond's worth at a time, in the
// order of a log that interleaves them.
//
//	go test -run='^$' -bench=DedupSpill -count=6 ./replay/
func BenchmarkDedupSpill(b *testing.B) {
	d := newDedupIndex(b.TempDir(), 0)
	defer d.close()
	r := rand.New(rand.NewPCG(5, 12))
	entries := make([]dedupMem, dedupMemEntries)
	ms := uint64(1_780_000_000_000)
	for i := range entries {
		if i%200 == 0 {
			ms++
		}
		id := &entries[i].id
		binary.BigEndian.PutUint64(id[:8], ms<<16|0x7000|r.Uint64()&0xfff)
		binary.BigEndian.PutUint64(id[8:], r.Uint64())
		entries[i].sum[0] = byte(i)
	}
	// Engines write ahead of one another: the log holds their ids a few
	// milliseconds out of order.
	for i := range entries {
		j := min(len(entries)-1, i+r.IntN(2000))
		entries[i], entries[j] = entries[j], entries[i]
	}
	for b.Loop() {
		d.mem = append(d.mem[:0], entries...)
		if err := d.spill(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(entries)), "ns/entry")
}
