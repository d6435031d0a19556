package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// readRows reads a Parquet file's rows as JSON objects, as pyarrow's
// to_pylist gives them.
func readRows(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fr, err := pqarrow.NewFileReader(rd, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var rows []map[string]any
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	for tr.Next() {
		var buf bytes.Buffer
		if err := array.RecordToJSON(tr.RecordBatch(), &buf); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, m)
		}
	}
	return rows
}

// The tasks table has one row per task registered, in log order, with its
// prompt, the bytes cut from it, and the admission the fold decided: the
// decision's kind and tally, null while undecided.
func TestTasksTable(t *testing.T) {
	src := cutSource(t, "tasks-1")
	type decided struct {
		admission      string
		probes, passes int64
		rate           float64
	}
	want := map[string]decided{}
	var order []string
	for _, f := range src.facts {
		ev, err := events.Decode(f.Value)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.Data.(*events.TaskRegistered); ok {
			order = append(order, d.Task)
		}
	}
	for _, r := range src.decisions {
		var env projections.Envelope
		if err := json.Unmarshal(r.Value, &env); err != nil {
			t.Fatal(err)
		}
		if env.Type != projections.KindTaskAdmitted && env.Type != projections.KindTaskRejected {
			continue
		}
		var a projections.Admission
		if err := json.Unmarshal(env.Data, &a); err != nil {
			t.Fatal(err)
		}
		kind := Rejected
		if env.Type == projections.KindTaskAdmitted {
			kind = Admitted
		}
		want[a.Task] = decided{kind, a.Probes, a.Passes, a.PassRate}
	}
	if len(want) == 0 {
		t.Fatalf("none of %d tasks decided: nothing to compare", len(order))
	}
	res := exportTo(t, src, FormatParquet, filepath.Join(t.TempDir(), "out"))
	rows := readRows(t, filepath.Join(res.Out, "tasks.parquet"))
	if len(rows) != len(order) {
		t.Fatalf("%d rows, want one per task registered, %d", len(rows), len(order))
	}
	for i, r := range rows {
		if r["task"] != order[i] || r["run"] != "tasks-1" || r["kind"] == "" || r["prompt"] != "Fix the failing test of "+order[i] || r["prompt_cut"] != float64(promptCut) {
			t.Fatalf("row %d: %v; want task %s with its prompt and prompt_cut %d", i, r, order[i], promptCut)
		}
		w, ok := want[order[i]]
		var got decided
		if r["admission"] != nil {
			got = decided{r["admission"].(string), int64(r["probes"].(float64)), int64(r["probe_passes"].(float64)), r["probe_pass_rate"].(float64)}
		} else if r["probes"] != nil || r["probe_passes"] != nil || r["probe_pass_rate"] != nil {
			t.Errorf("task %s, undecided: %v; want null tallies", order[i], r)
		}
		if got != w || ok != (r["admission"] != nil) {
			t.Errorf("task %s: %+v, want %+v", order[i], got, w)
		}
	}
}
