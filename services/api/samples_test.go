package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/projections"
)

func testSamples(t *testing.T) ([]projections.Sample, []byte) {
	t.Helper()
	samples := []projections.Sample{
		{Group: "g-1", Attempt: "g-1/a", Segment: 0, Advantage: 0.25, TokenIDs: []int32{1, 2, 101}, LossMask: []uint8{0, 0, 1},
			RolloutLogprobs: []float32{0, 0, -0.5}, PolicyVersions: []int64{3, 3, 4}},
		{Group: "g-1", Attempt: "g-1/a", Segment: 1, Advantage: 0.25, TokenIDs: []int32{}, LossMask: []uint8{},
			RolloutLogprobs: []float32{}, PolicyVersions: []int64{}},
		{Group: "g-2", Attempt: "g-2/b", Segment: 0, Advantage: -1.5, TokenIDs: []int32{7, 8, 9, 10}, LossMask: []uint8{1, 1, 0, 0},
			RolloutLogprobs: []float32{-1, -2, -3, -4}, PolicyVersions: []int64{1 << 40, 1 << 40, 5, 5}},
	}
	var b []byte
	for i := range samples {
		var err error
		if b, err = projections.AppendSample(b, &samples[i]); err != nil {
			t.Fatal(err)
		}
	}
	return samples, b
}

// readArrow reads an Arrow IPC stream of samples back into Samples, and
// the record batches' sizes.
func readArrow(t *testing.T, body []byte) (*arrow.Schema, []projections.Sample, []int64) {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out []projections.Sample
	var rows []int64
	for r.Next() {
		rec := r.RecordBatch()
		rows = append(rows, rec.NumRows())
		groups, attempts := rec.Column(0).(*array.String), rec.Column(1).(*array.String)
		segs, advs := rec.Column(2).(*array.Int32), rec.Column(3).(*array.Float64)
		ids, mask := rec.Column(4).(*array.List), rec.Column(5).(*array.List)
		lps, vers := rec.Column(6).(*array.List), rec.Column(7).(*array.List)
		for i := range int(rec.NumRows()) {
			from, to := ids.ValueOffsets(i)
			out = append(out, projections.Sample{Group: groups.Value(i), Attempt: attempts.Value(i), Segment: int64(segs.Value(i)),
				Advantage:       advs.Value(i),
				TokenIDs:        append([]int32{}, ids.ListValues().(*array.Int32).Int32Values()[from:to]...),
				LossMask:        append([]uint8{}, mask.ListValues().(*array.Uint8).Uint8Values()[from:to]...),
				RolloutLogprobs: append([]float32{}, lps.ListValues().(*array.Float32).Float32Values()[from:to]...),
				PolicyVersions:  append([]int64{}, vers.ListValues().(*array.Int64).Int64Values()[from:to]...),
			})
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return r.Schema(), out, rows
}

func TestWriteArrowSamples(t *testing.T) {
	want, canonical := testSamples(t)
	meta := arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"}, []string{"r-1", "3", "sha256:ab", "2"})
	var body bytes.Buffer
	if err := WriteArrowSamples(&body, canonical, meta); err != nil {
		t.Fatal(err)
	}
	schema, got, rows := readArrow(t, body.Bytes())
	if !schema.Equal(SamplesSchema(meta)) || !schema.Metadata().Equal(meta) {
		t.Errorf("schema %s, want %s", schema, SamplesSchema(meta))
	}
	// One record batch, whose columns are each one buffer.
	if !equalInts(rows, []int64{3}) {
		t.Errorf("record batches of %v rows, want [3]", rows)
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("read back\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	if err := WriteArrowSamples(&bytes.Buffer{}, canonical[:len(canonical)-1], meta); err == nil {
		t.Error("malformed samples were written")
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The samples route negotiates before it looks: a request whose Accept
// rules out both renderings is refused with 406 naming them, and every
// answer varies by Accept.
func TestSamplesNegotiation(t *testing.T) {
	h := offlineService(t)
	for _, tc := range []struct {
		accept string
		code   int
		error  string
	}{
		{"text/html", http.StatusNotAcceptable, "not_acceptable"},
		// application/json is answered with the NDJSON (older clients send it).
		{"application/json", http.StatusNotFound, "not_found"},
		{MediaArrow + ";q=0, " + MediaNDJSON + ";q=0", http.StatusNotAcceptable, "not_acceptable"},
		{MediaArrow, http.StatusNotFound, "not_found"},
		{"", http.StatusNotFound, "not_found"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/runs/r/batches/1/samples", nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var eb httpx.ErrorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		if w.Code != tc.code || eb.Error.Code != tc.error || w.Header().Get("Vary") != "Accept" {
			t.Errorf("Accept %q: %d %s (Vary %q), want %d %s and Vary: Accept", tc.accept, w.Code, w.Body, w.Header().Get("Vary"), tc.code, tc.error)
		}
		if tc.code == http.StatusNotAcceptable && !strings.Contains(eb.Error.Message, MediaNDJSON+", "+MediaArrow) {
			t.Errorf("406 message %q does not name the types offered", eb.Error.Message)
		}
	}
}

// BenchmarkWriteArrowSamples renders 128 samples of 50,000 tokens (6.4 M
// tokens) as an Arrow IPC stream.
func BenchmarkWriteArrowSamples(b *testing.B) {
	var canonical []byte
	n := 50_000
	s := projections.Sample{Group: "g", Attempt: "a", TokenIDs: make([]int32, n), LossMask: make([]uint8, n),
		RolloutLogprobs: make([]float32, n), PolicyVersions: make([]int64, n)}
	for range 128 {
		canonical, _ = projections.AppendSample(canonical, &s)
	}
	b.SetBytes(int64(len(canonical)))
	for b.Loop() {
		if err := WriteArrowSamples(io.Discard, canonical, arrow.Metadata{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteNDJSON renders the same samples as NDJSON.
func BenchmarkWriteNDJSON(b *testing.B) {
	var canonical []byte
	n := 50_000
	s := projections.Sample{Group: "g", Attempt: "a", TokenIDs: make([]int32, n), LossMask: make([]uint8, n),
		RolloutLogprobs: make([]float32, n), PolicyVersions: make([]int64, n)}
	for i := range n {
		s.TokenIDs[i], s.RolloutLogprobs[i] = int32(i*7919%151936), -float32(i%97)/37
	}
	for range 128 {
		canonical, _ = projections.AppendSample(canonical, &s)
	}
	b.SetBytes(int64(len(canonical)))
	for b.Loop() {
		if _, err := projections.WriteNDJSON(io.Discard, canonical); err != nil {
			b.Fatal(err)
		}
	}
}
