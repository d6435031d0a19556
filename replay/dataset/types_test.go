package dataset

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/api"
)

// The samples table and the API's Arrow samples give each column they
// share one type and one nullability: code that reads one reads the other.
func TestSamplesTypesAreTheAPIs(t *testing.T) {
	meta := arrow.NewMetadata([]string{"rule_version"}, []string{fmt.Sprint(projections.RuleVersion)})
	mine := map[string]arrow.Field{}
	for _, c := range sampleColumns {
		mine[c.field.Name] = c.field
	}
	for _, f := range api.SamplesSchema(meta).Fields() {
		got, ok := mine[f.Name]
		if !ok {
			t.Errorf("the API serves %s; the samples table has no such column", f.Name)
			continue
		}
		if !arrow.TypeEqual(got.Type, f.Type) || got.Nullable != f.Nullable {
			t.Errorf("%s: %s (nullable %v); the API serves %s (nullable %v)", f.Name, got.Type, got.Nullable, f.Type, f.Nullable)
		}
	}
}

// The batches' histograms are typed lists of {value, count}, and the
// segment staleness histogram of a batch counts what the turns table's
// segment_staleness lists of its turns hold.
func TestHistogramsAreTypedAndAgree(t *testing.T) {
	src := planSource(t, textRun, "hist-1", true)
	res := exportTo(t, src, FormatParquet, filepath.Join(t.TempDir(), "out"))
	fromTurns := map[[2]int64]int64{}
	for _, r := range readRows(t, filepath.Join(res.Out, "turns.parquet")) {
		if r["batch_seq"] == nil {
			continue
		}
		for _, s := range r["segment_staleness"].([]any) {
			fromTurns[[2]int64{int64(r["batch_seq"].(float64)), int64(s.(float64))}]++
		}
	}
	fromBatches := map[[2]int64]int64{}
	for _, r := range readRows(t, filepath.Join(res.Out, "batches.parquet")) {
		seq := int64(r["seq"].(float64))
		for _, name := range []string{"segment_staleness_histogram", "in_flight", "in_queue"} {
			bins, ok := r[name].([]any)
			if !ok || len(bins) == 0 {
				t.Fatalf("batch %d: %s is %#v, want a list of {value, count}", seq, name, r[name])
			}
			last := int64(-1 << 62)
			for _, b := range bins {
				bin := b.(map[string]any)
				v, n := int64(bin["value"].(float64)), int64(bin["count"].(float64))
				if v <= last || n <= 0 {
					t.Fatalf("batch %d: %s %v: want ascending values with positive counts", seq, name, bins)
				}
				last = v
				if name == "segment_staleness_histogram" {
					fromBatches[[2]int64{seq, v}] += n
				}
			}
		}
	}
	if len(fromBatches) == 0 || fmt.Sprint(fromBatches) != fmt.Sprint(fromTurns) {
		t.Errorf("segment staleness by batch: batches say %v, the turns' segments %v", fromBatches, fromTurns)
	}
}
