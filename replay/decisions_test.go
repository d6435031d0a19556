package replay

import (
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
