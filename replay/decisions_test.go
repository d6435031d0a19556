package replay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A recorded decision's envelope is read as encoding/json would read it:
// a batch's seq and head from its data, nothing of another kind's data,
// and a value with anything after it, or none at all, refused with its
// position.
func TestParseRecorded(t *testing.T) {
	const batch = `{"id":"b1","run":"r","type":"batch.sealed","v":1,"rule_version":3,"fact":{"seq":41,"partition":2,"offset":7},` +
		`"data":{"seq":5,"groups":[{"group":"g","attempts":[]}],"tree":{"size":41,"root":"ab"}}}`
	d, err := parseRecorded(Recorded{Partition: 1, Offset: 9, Value: []byte(batch)})
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "b1" || d.Type != projections.KindBatchSealed || d.RuleVersion != 3 || d.Fact.Seq != 41 || d.Seq != 5 ||
		d.Head == nil || *d.Head != (projections.TreeHead{Size: 41, Root: "ab"}) {
		t.Errorf("batch: got %+v (head %v)", d, d.Head)
	}
	// Another kind's data may hold fields of any shape, a "tree" too.
	other := `{"id":"g1","type":"group.evaluated","fact":{"seq":3},"data":{"seq":"not a number","tree":[1,2]}}`
	if d, err := parseRecorded(Recorded{Value: []byte(other)}); err != nil || d.Seq != 0 || d.Head != nil {
		t.Errorf("group: got %+v, %v", d, err)
	}
	for name, v := range map[string]string{
		"trailing":  batch + ` {}`,
		"malformed": `{"id":"b1",`,
		"no id":     `{"type":"batch.sealed","data":{}}`,
	} {
		_, err := parseRecorded(Recorded{Partition: 1, Offset: 9, Value: []byte(v)})
		if err == nil || !strings.Contains(err.Error(), "1/9") {
			t.Errorf("%s: got %v, want an error naming 1/9", name, err)
		}
	}
}

// The decisions parsed ahead reach fn in the order recorded, each with
// its own envelope and digest; a value that does not parse reaches fn
// with its error in its place, and an error from fn ends the pass and is
// returned, however many decisions are parsed ahead of it.
func TestParsedDecisionsInOrder(t *testing.T) {
	src := &memSource{run: "r"}
	for i := range 200 {
		v := fmt.Sprintf(`{"id":"d%d","run":"r","type":"audit.finding","v":1,"rule_version":4,"fact":{"seq":%d},"data":{"kind":"late_reward"}}`, i, i+1)
		if i == 150 {
			v = `{"id":"d150","run":"r"` // cut short
		}
		src.decisions = append(src.decisions, Recorded{Partition: 1, Offset: int64(i), Value: []byte(v)})
	}
	stop := errors.New("enough")
	seen := 0
	err := parsedDecisions(context.Background(), src, func(r Recorded, d decisionInfo, err error) error {
		if r.Offset != int64(seen) {
			t.Fatalf("decision at offset %d reached fn %d-th", r.Offset, seen)
		}
		seen++
		switch {
		case r.Offset == 150:
			if err == nil {
				t.Fatal("a value cut short parsed")
			}
			return stop
		case err != nil:
			t.Fatalf("decision %d: %v", r.Offset, err)
		case d.ID != fmt.Sprintf("d%d", r.Offset) || d.Sum != sha256.Sum256(r.Value):
			t.Fatalf("decision %d: id %q, digest %x", r.Offset, d.ID, d.Sum)
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 151 {
		t.Fatalf("after %d decisions: %v, want fn's error after 151", seen, err)
	}
	// Through decidedConfig, the error names the decision.
	_, _, err = decidedConfig(context.Background(), src, nil)
	if err == nil || !strings.Contains(err.Error(), "decision at 1/150") {
		t.Fatalf("decidedConfig: %v, want the decision at 1/150 named", err)
	}
}
