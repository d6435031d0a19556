package api

import (
	"bytes"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A batch of rule version 4 renders its samples' temperatures as a last
// Arrow column; one of an older rule version has no such column.
func TestArrowSamplesTemperatures(t *testing.T) {
	s := projections.Sample{Group: "g", Attempt: "a", TokenIDs: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1},
		RolloutLogprobs: []float32{0, -1, -2}, PolicyVersions: []int64{1, 1, 2}, Temperatures: []float32{0.5, 0.5, 1}}
	canonical, err := projections.AppendSample(nil, &s)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rules string
		want  []float32
	}{{"4", s.Temperatures}, {"3", nil}} {
		meta := arrow.NewMetadata([]string{"rule_version"}, []string{tc.rules})
		var body bytes.Buffer
		if err := WriteArrowSamples(&body, canonical, meta); err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewReader(bytes.NewReader(body.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Next() {
			t.Fatal("no record batch")
		}
		rec := r.RecordBatch()
		idx := rec.Schema().FieldIndices("temperatures")
		switch {
		case tc.want == nil && len(idx) != 0:
			t.Errorf("rule version %s: a temperatures column", tc.rules)
		case tc.want != nil:
			if len(idx) != 1 || idx[0] != 8 {
				t.Fatalf("rule version %s: temperatures at %v", tc.rules, idx)
			}
			got := rec.Column(8).(*array.List).ListValues().(*array.Float32).Float32Values()
			if !slices.Equal(got, tc.want) {
				t.Errorf("temperatures %v, want %v", got, tc.want)
			}
		}
		r.Release()
	}
}
