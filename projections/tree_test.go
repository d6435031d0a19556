package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"testing"
)

// mth is RFC 6962's Merkle tree hash, written from its definition (§2.1)
// and nothing else, to check the compact tree against.
func mth(leaves [][]byte) []byte {
	switch n := len(leaves); n {
	case 0:
		sum := sha256.Sum256(nil)
		return sum[:]
	case 1:
		sum := sha256.Sum256(append([]byte{0}, leaves[0]...))
		return sum[:]
	default:
		k := 1 << (bits.Len(uint(n-1)) - 1) // the largest power of two below n
		left, right := mth(leaves[:k]), mth(leaves[k:])
		sum := sha256.Sum256(append(append([]byte{1}, left...), right...))
		return sum[:]
	}
}

func referenceRoot(vals [][]byte) string { return hex.EncodeToString(mth(vals)) }

func values(recs []Record) [][]byte {
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = r.Value
	}
	return out
}

func TestTreeMatchesDefinition(t *testing.T) {
	var vals [][]byte
	tree := NewTree()
	for n := 0; n <= 130; n++ {
		if got, want := tree.Head(), (TreeHead{Size: uint64(n), Root: referenceRoot(vals)}); got != want {
			t.Fatalf("size %d: got head %+v, want %+v", n, got, want)
		}
		// The stored form continues exactly where the tree was.
		again, err := decodeTree(tree.encode())
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if got := again.Head(); got != tree.Head() {
			t.Fatalf("size %d: decoded head %+v, want %+v", n, got, tree.Head())
		}
		v := []byte(fmt.Sprintf(`{"n":%d}`, n))
		vals = append(vals, v)
		again.AppendValue(v)
		tree = again
	}
}

func TestTreeStateIsLogarithmic(t *testing.T) {
	tree := NewTree()
	leaf := LeafHash([]byte("x"))
	for n := 1; n <= 1<<12; n++ {
		tree.Append(leaf)
		if got, want := len(tree.encode()), 1+len(uvarint(uint64(n)))+32*bits.OnesCount(uint(n)); got != want {
			t.Fatalf("size %d: stored tree of %d bytes, want %d", n, got, want)
		}
	}
}

func uvarint(v uint64) []byte { var w wbuf; w.uvarint(v); return w.b }

func TestDecodeTreeRefusesDamage(t *testing.T) {
	tree := NewTree()
	for range 5 {
		tree.AppendValue([]byte("v"))
	}
	good := tree.encode()
	for name, b := range map[string][]byte{
		"truncated":     good[:len(good)-1],
		"extra hash":    append(bytes.Clone(good), make([]byte, 32)...),
		"wrong version": append([]byte{9}, good[1:]...),
	} {
		if _, err := decodeTree(b); !errors.Is(err, ErrCorruptState) {
			t.Errorf("%s: got %v, want ErrCorruptState", name, err)
		}
	}
}

// Every head a batch carries is the root of the run's records up to its
// watermark, duplicates and undecodable records included.
func TestBatchHeads(t *testing.T) {
	recs := goldenRun(t).records()
	// A redelivered record and one that does not decode are leaves too.
	recs = append(recs[:40:40], append([]Record{recs[39], {Value: []byte(`{"not":"an event"}`), Partition: 3, Offset: 1}}, recs[40:]...)...)
	ds, err := FoldAll(testRun, recs)
	if err != nil {
		t.Fatal(err)
	}
	ms := manifestsOf(t, ds)
	if len(ms) != 2 {
		t.Fatalf("got %d batches, want 2", len(ms))
	}
	for _, m := range ms {
		if want := (TreeHead{Size: m.Tree.Size, Root: referenceRoot(values(recs[:m.Tree.Size]))}); m.Tree != want {
			t.Errorf("batch %d: got head %+v, want %+v", m.Seq, m.Tree, want)
		}
	}
}

// A Store written without the tree cannot be continued: its heads would be
// wrong.
func TestStateWithoutTree(t *testing.T) {
	recs := goldenRun(t).records()
	f, s := NewFold(testRun), NewMemStore()
	for _, r := range recs[:10] {
		if _, err := f.Apply(s, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete([]byte(keyTree)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(s, recs[10]); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("got %v, want ErrCorruptState", err)
	}
}

// MemStore packs the dedup index; nothing outside it can tell.
func TestMemStorePacksEvents(t *testing.T) {
	s := NewMemStore()
	id := "0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11"
	sum := bytes.Repeat([]byte{7}, 32)
	s.Set(eventKey(id), sum)
	s.Set(eventKey("0192F0C4-7A1E-7C3B-9D2E-4B1F8A6C0D11"), sum) // not canonical: kept as is
	s.Set(eventKey(id+"x"), []byte("v"))
	s.Set([]byte("task\x00t"), []byte("w"))
	if len(s.events) != 1 || s.Len() != 4 {
		t.Fatalf("packed %d of %d keys, want 1 of 4", len(s.events), s.Len())
	}
	if v, ok, _ := s.Get(eventKey(id)); !ok || !bytes.Equal(v, sum) {
		t.Fatalf("got %x, %v", v, ok)
	}
	want := []string{"ev\x000192F0C4-7A1E-7C3B-9D2E-4B1F8A6C0D11", "ev\x00" + id, "ev\x00" + id + "x", "task\x00t"}
	for i, k := range s.Keys() {
		if string(k) != want[i] {
			t.Errorf("key %d: got %q, want %q", i, k, want[i])
		}
	}
	if got := len(s.KeysWithPrefix([]byte(pfxEvent))); got != 3 {
		t.Errorf("%d keys with the event prefix, want 3", got)
	}
	c := s.Clone()
	s.Delete(eventKey(id))
	if _, ok, _ := s.Get(eventKey(id)); ok {
		t.Error("deleted key still there")
	}
	if _, ok, _ := c.Get(eventKey(id)); !ok {
		t.Error("the clone lost a key its original deleted later")
	}
	if c.Size() != s.Size()+len(eventKey(id))+32 {
		t.Errorf("sizes %d and %d", c.Size(), s.Size())
	}
}
