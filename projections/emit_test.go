package projections

import (
	"bytes"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// A decision's bytes are recorded and replayed byte for byte, so the seal's
// shortcuts must give exactly what encoding the whole value gives: the
// manifest with its digest appended, and the envelope with its data put in
// place.
func TestManifestWithDigest(t *testing.T) {
	m := Manifest{
		Run: "r", Seq: 3, TrainerVersion: 2, RuleVersion: RuleVersion, Config: events.DefaultConfig(),
		Tree:    TreeHead{Size: 9, Root: "ab"},
		Groups:  []BatchGroup{{Group: "g<&>\u2028", Task: "t", Attempts: []BatchAttempt{}}},
		Dropped: []DroppedGroup{{Group: "d", Task: "t", Reason: "stale"}},
	}
	body, err := events.CanonicalJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Digest = "sha256:" + string(bytes.Repeat([]byte("0f"), 32))
	want, err := events.CanonicalJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"", `{"data":`} {
		got, err := appendDigest(append([]byte(prefix), body...), m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if w := prefix + string(want); string(got) != w {
			t.Errorf("manifest with its digest appended:\n got %s\nwant %s", got, w)
		}
	}
}

func TestEnvelopeJSON(t *testing.T) {
	for _, data := range []any{
		Finding{Kind: FindingConflictingDuplicate, Event: "e", Detail: "a <b> & \u2028 \"c\" é"},
		map[string]any{},
		[]int{1, 2, 3},
		"text",
	} {
		d, err := events.CanonicalJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		e := Envelope{ID: "id", Run: "run<&>", Type: KindAuditFinding, V: DecisionSchemaVersion, Source: DecisionSource,
			RuleVersion: RuleVersion, Fact: FactPosition{Seq: 7, Partition: 1, Offset: 12}}
		got, at, err := envelopeJSON(e, d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[at:at+len(d)], d) {
			t.Errorf("the data of %T is not at %d of %s", data, at, got)
		}
		e.Data = d
		want, err := events.CanonicalJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("envelope of %T:\n got %s\nwant %s", data, got, want)
		}
	}
}
