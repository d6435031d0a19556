package projections

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// plainStore hides the MemStore's [EventIndex]: the fold asks it a Get
// and a Set of the event's key, as it asks the projector's store.
type plainStore struct{ m *MemStore }

func (p plainStore) Get(k []byte) ([]byte, bool, error) { return p.m.Get(k) }
func (p plainStore) Set(k, v []byte) error              { return p.m.Set(k, v) }
func (p plainStore) Delete(k []byte) error              { return p.m.Delete(k) }

// A store that keeps the dedup index itself and one asked through keys
// reach the same decisions and hold the same state, over a run with
// retried facts and a conflicting duplicate, and over a record whose id
// is not a canonical UUID (which the index by packed id cannot hold).
func TestEventIndexAsKeys(t *testing.T) {
	r := buildProducerRun(t)
	recs := records(t, r.canonical)
	// The last record again under its id in upper case (a "uuid" all the
	// same), twice, then its first record again under that id.
	last, first := recs[len(recs)-1], recs[0]
	upper := func(r Record, id string) Record {
		at := bytes.Index(r.Value, []byte(`"id":"`)) + len(`"id":"`)
		r.Value = slices.Concat(r.Value[:at], []byte(id), r.Value[at+36:])
		return r
	}
	id := strings.ToUpper(string(last.Value[bytes.Index(last.Value, []byte(`"id":"`))+6:][:36]))
	recs = append(recs, upper(last, id), upper(last, id), upper(first, id))

	fold := func(s Store) []Decision {
		f := NewFold(r.run())
		var out []Decision
		for i, rec := range recs {
			ds, err := f.Apply(s, rec)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			out = append(out, ds...)
		}
		return out
	}
	indexed, keyed := NewMemStore(), NewMemStore()
	if _, ok := Store(indexed).(EventIndex); !ok {
		t.Fatal("MemStore is not an EventIndex: the test compares nothing")
	}
	got, want := fold(indexed), fold(plainStore{keyed})
	if len(got) != len(want) {
		t.Fatalf("%d decisions by the index, %d by keys", len(got), len(want))
	}
	conflicts := 0
	for i := range got {
		if !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("decision %d differs:\n%s\n%s", i, got[i].Value, want[i].Value)
		}
		if bytes.Contains(got[i].Value, []byte(FindingConflictingDuplicate)) {
			conflicts++
		}
	}
	if conflicts < 2 {
		t.Errorf("%d conflicting duplicates, want the run's and the upper-case id's", conflicts)
	}
	gk, wk := indexed.Keys(), keyed.Keys()
	if len(gk) != len(wk) {
		t.Fatalf("%d keys by the index, %d by keys", len(gk), len(wk))
	}
	for i := range gk {
		gv, _, _ := indexed.Get(gk[i])
		wv, _, _ := keyed.Get(wk[i])
		if !bytes.Equal(gk[i], wk[i]) || !bytes.Equal(gv, wv) {
			t.Fatalf("key %d: %q=%x by the index, %q=%x by keys", i, gk[i], gv, wk[i], wv)
		}
	}
}

// parseUUID takes exactly the canonical form: lowercase hexadecimal in
// groups of 8-4-4-4-12, and prints back to the same text.
func TestParseUUID(t *testing.T) {
	const canon = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	id, ok := parseUUID(canon)
	if !ok || eventKeyOf(id) != pfxEvent+canon {
		t.Fatalf("parseUUID(%q) = %x, %v", canon, id, ok)
	}
	for _, bad := range []string{
		"", canon[:35], canon + "0", strings.ToUpper(canon),
		"0190a1b2c-3d4-7e5f-8a9b-0c1d2e3f4a5b", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g",
		"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5/", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5:",
		"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5`", "0190a1b2-c3d4-7e5f-8a9b_0c1d2e3f4a5b",
		"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5\xff",
	} {
		if id, ok := parseUUID(bad); ok {
			t.Errorf("parseUUID(%q) = %x, want refused", bad, id)
		}
	}
}
