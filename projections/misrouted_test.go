package projections

import (
	"bytes"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// The misrouted finding about a record depends on the record and its
// position only: the projector and replay, whenever they read it, make the
// same bytes, and two records make two findings.
func TestMisroutedIsNamedByPosition(t *testing.T) {
	b := newRun(t).start(openConfig())
	recs := b.records()
	r := recs[0]
	r.Partition = 7
	d1, err := Misrouted(r.Event, r, 3, 12)
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := Misrouted(r.Event, r, 3, 12)
	if !bytes.Equal(d1.Value, d2.Value) || d1.ID != d2.ID {
		t.Fatal("the misrouted finding about one record differs between two calls")
	}
	env := envelopeOf(t, d1)
	if !IsMisrouted(env) || env.Fact != (FactPosition{Partition: 7, Offset: r.Offset}) || env.RuleVersion != RuleVersion {
		t.Errorf("got envelope %+v, want a misrouted finding at 7/%d with no seq", env, r.Offset)
	}
	f := findingsOf(t, []Decision{d1})[0]
	want := "a fact of run run-1 was read from partition 7 of 12; the run maps to partition 3, so the fact is not folded"
	if f.Kind != FindingMisrouted || f.Event != r.Event.ID || f.Type != events.TypeRunStarted || f.Detail != want {
		t.Errorf("got finding %+v", f)
	}
	r.Offset++
	d3, _ := Misrouted(r.Event, r, 3, 12)
	if d3.ID == d1.ID {
		t.Error("two records at different offsets share a finding id")
	}
	// A numbered finding is not misrouted.
	for _, d := range newRun(t).gradient(4, "sha256:00").fold() {
		if IsMisrouted(envelopeOf(t, d)) {
			t.Errorf("decision %s of the fold reads as misrouted", d.ID)
		}
	}
}
