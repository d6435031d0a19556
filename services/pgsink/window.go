package pgsink

import (
	"runtime"
	"sync"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// window is what the sink prepares of a window of records before its
// transaction: their rows, decoded.
type window struct {
	records int
	rows    []*rowSet // decoded in parallel: one set per slice of the records
	// links are the trace contexts of the records, when tracing.
	links *telemetry.Links
}

// decodeSlice is the fewest records worth a goroutine of their own.
const decodeSlice = 256

// prepare decodes a window's records into rows. Decoding (the strict event
// decoder) is most of the sink's CPU time, so large windows are cut into
// slices decoded on all cores; a table's rows may then come in any order,
// which the inserts do not depend on (they sort by log position).
//
// With a plan, each slice's rows are also encoded for COPY (copybin.go).
func prepare(batch []kafkalog.Message, factsTopic string, plan *copyPlan, tel *telemetry.Telemetry) *window {
	w := &window{records: len(batch)}
	if len(batch) == 0 {
		return w
	}
	if tel.Tracing() {
		w.links = telemetry.NewLinks(telemetry.MaxLinks)
		for _, m := range batch {
			w.links.Add(kafkalog.SpanContext(tel, m.Headers))
		}
	}
	n := min(runtime.GOMAXPROCS(0), (len(batch)+decodeSlice-1)/decodeSlice)
	w.rows = make([]*rowSet, n)
	var wg sync.WaitGroup
	for i := range n {
		lo, hi := i*len(batch)/n, (i+1)*len(batch)/n
		rs := &rowSet{}
		w.rows[i] = rs
		wg.Go(func() {
			for _, m := range batch[lo:hi] {
				rs.addRecord(m, m.Topic == factsTopic)
			}
			if plan != nil {
				rs.encode(plan)
			}
		})
	}
	wg.Wait()
	return w
}

// tableRows are all of the window's rows of one table.
func (w *window) tableRows(t tableID) [][]any {
	if len(w.rows) == 1 {
		return w.rows[0].rows[t]
	}
	n := 0
	for _, rs := range w.rows {
		n += len(rs.rows[t])
	}
	if n == 0 {
		return nil
	}
	out := make([][]any, 0, n)
	for _, rs := range w.rows {
		out = append(out, rs.rows[t]...)
	}
	return out
}
