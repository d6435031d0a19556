package projections

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// A fold given each record's digests ahead (as replay's decode workers
// and the projector's Prepare compute them) decides byte for byte what a
// fold that hashes every record itself decides, conflicting duplicates,
// seals and tree heads included, and leaves the same state.
func TestPrecomputedDigestsFoldTheSame(t *testing.T) {
	r := buildProducerRun(t)
	recs := records(t, r.canonical)
	want, err := FoldAll(testRun, recs)
	if err != nil {
		t.Fatal(err)
	}
	hashed := make([]Record, len(recs))
	for i, rec := range recs {
		rec.Digests = HashValue(rec.Value)
		hashed[i] = rec
	}
	f, s := NewFold(testRun), NewMemStore()
	var got []Decision
	for i, rec := range hashed {
		ds, err := f.Apply(s, rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got = append(got, ds...)
	}
	if len(got) != len(want) {
		t.Fatalf("%d decisions with digests given, %d without", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("decision %d differs with digests given:\n got %s\nwant %s", i, got[i].Value, want[i].Value)
		}
	}
	wantHead, err := HeadOf(foldedStore(t, recs))
	if err != nil {
		t.Fatal(err)
	}
	gotHead, err := HeadOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if gotHead != wantHead {
		t.Fatalf("tree head %v with digests given, %v without", gotHead, wantHead)
	}
}

func foldedStore(t *testing.T, recs []Record) Store {
	t.Helper()
	f, s := NewFold(testRun), NewMemStore()
	for i, rec := range recs {
		if _, err := f.Apply(s, rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	return s
}

// HashValue's digests are the plain SHA-256 and the RFC 6962 leaf hash.
func TestHashValue(t *testing.T) {
	v := []byte(`{"id":"x"}`)
	d := HashValue(v)
	if !d.Set() {
		t.Fatal("HashValue's digests say they were not computed")
	}
	if sum := sha256.Sum256(v); d.sum != sum {
		t.Errorf("sum %x, want %x", d.sum, sum)
	}
	if !bytes.Equal(d.Leaf(), LeafHash(v)) {
		t.Errorf("leaf %x, want %x", d.Leaf(), LeafHash(v))
	}
	var zero Digests
	if zero.Set() || zero.Leaf() != nil {
		t.Error("the zero Digests claim to be computed")
	}
}
