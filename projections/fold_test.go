package projections

import (
	"errors"
	"testing"
)

// Apply's contract with its caller: a record of another run is refused
// without a write; a record given as a value only or as an event only is
// the same fact; a record that does not decode is a fact all the same.
func TestApplyRecords(t *testing.T) {
	b := newRun(t).start(openConfig())
	recs := b.records()
	f, s := NewFold(testRun), NewMemStore()

	other := recs[0]
	other.Event.Run = "run-2"
	if _, err := f.Apply(s, other); !errors.Is(err, ErrWrongRun) {
		t.Errorf("a record of another run: got %v, want ErrWrongRun", err)
	}
	if s.Len() != 0 {
		t.Errorf("a refused record wrote %d keys", s.Len())
	}

	// Value only: decoded by Apply. Event only: encoded by Apply. Both
	// take the same dedup key and bytes, so the second is a duplicate.
	if ds, err := f.Apply(s, Record{Value: recs[0].Value}); err != nil || len(ds) != 0 {
		t.Fatalf("value only: got %v, %v", ds, err)
	}
	if f.Repeat() {
		t.Error("the first record of an id reported as a repeat")
	}
	if ds, err := f.Apply(s, Record{Event: recs[0].Event}); err != nil || len(ds) != 0 {
		t.Fatalf("event only: got %v, %v (want a silent duplicate)", ds, err)
	}
	if !f.Repeat() {
		t.Error("the second record of an id not reported as a repeat")
	}
	ds, err := f.Apply(s, Record{Value: []byte(`{"id":"nope"}`), Partition: 3, Offset: 77})
	if err != nil {
		t.Fatal(err)
	}
	if f.Repeat() {
		t.Error("an undecodable record after a repeat still reported as one")
	}
	fs := findingsOf(t, ds)
	if len(fs) != 1 || fs[0].Kind != FindingUndecodable {
		t.Fatalf("got %+v, want one undecodable_fact", fs)
	}
	if got := envelopeOf(t, ds[0]).Fact; got != (FactPosition{Seq: 3, Partition: 3, Offset: 77}) {
		t.Errorf("got fact %+v, want seq 3 at 3/77", got)
	}
}
