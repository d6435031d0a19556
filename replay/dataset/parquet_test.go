package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// manyAttemptsRun is a run whose turns name 100,000 distinct attempts of
// 200 bytes each (the longest id an event may carry): about 20 MiB of
// dictionary candidates in one table, far past DictionaryLimit.
func manyAttemptsRun(t *testing.T) *Run {
	rows, err := openRowStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &Run{Run: "run-dict", rows: rows, forTables: true}
	t.Cleanup(func() { r.Close() })
	for i := range 100_000 {
		id := fmt.Sprintf("attempt-%08d-", i)
		id += strings.Repeat("x", 200-len(id))
		err := r.putTurn(&Attempt{Attempt: id, ord: uint64(i + 1)}, &Turn{Seq: uint64(i + 1), Offset: int64(i), Attempt: id, Turn: i % 7,
			SegmentStarts: []int64{0}, SegmentVersions: []int64{int64(i / 1000)}, Finish: "stop"})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.rows.flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// A column chunk that starts with a dictionary and falls back to plain
// lists its two data encodings in a map's order, so the footer's bytes
// change from one write to the next. Every chunk of every column must carry
// one data-page encoding, whatever the rows, and the same rows must give
// the same bytes each time.
func TestParquetOneEncodingPerChunk(t *testing.T) {
	runs := []*Run{manyAttemptsRun(t)}
	var first []byte
	for i := range 5 {
		var buf bytes.Buffer
		if _, err := writeTable(&buf, "turns", runs); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = buf.Bytes()
			checkEncodings(t, first)
			continue
		}
		if !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("write %d of the same rows gave different bytes (%d vs %d)", i+1, buf.Len(), len(first))
		}
	}
}

func checkEncodings(t *testing.T, data []byte) {
	t.Helper()
	rd, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	md := rd.MetaData()
	if md.NumRowGroups() < 3 {
		t.Errorf("%d row groups: the attempt column's dictionary should have cut the 100,000 rows into several", md.NumRowGroups())
	}
	dict := map[string]bool{}
	for _, c := range turnColumns {
		dict[c.field.Name] = c.dict
	}
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			name := cc.PathInSchema().String()
			var data []parquet.Encoding
			for _, s := range cc.EncodingStats() {
				if fmt.Sprint(s.PageType) != "DICTIONARY_PAGE" { // the page-type enum is internal to the library
					data = append(data, s.Encoding)
				}
			}
			if len(data) != 1 {
				t.Errorf("row group %d column %s: data pages in %d encodings %v, want one", g, name, len(data), data)
			}
			top := strings.SplitN(name, ".", 2)[0]
			if got := cc.HasDictionaryPage(); got != dict[top] {
				t.Errorf("row group %d column %s: dictionary page %v, its column says %v", g, name, got, dict[top])
			}
		}
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct{ n int }

var errDeviceFull = errors.New("no space left on device")

func (f *failAfter) Write(b []byte) (int, error) {
	if len(b) > f.n {
		k := f.n
		f.n = 0
		return k, errDeviceFull
	}
	f.n -= len(b)
	return len(b), nil
}

// A table whose file cannot be written, or whose rows cannot be read
// back, ends with that error while its row groups are written on another
// goroutine: never a file reported whole, never a hang.
func TestParquetWriteFailures(t *testing.T) {
	runs := []*Run{manyAttemptsRun(t)}
	var whole bytes.Buffer
	if _, err := writeTable(&whole, "turns", runs); err != nil {
		t.Fatal(err)
	}
	for _, after := range []int{1 << 10, whole.Len() / 2} {
		_, err := writeTable(&failAfter{n: after}, "turns", runs)
		if !errors.Is(err, errDeviceFull) {
			t.Errorf("writer failing after %d bytes: got %v, want %v", after, err, errDeviceFull)
		}
	}
	errRead := errors.New("row store read failed")
	for _, at := range []int{1, 60_000} { // in the first row group, and in a later one
		rows := func(yield func(*row[*Turn], error) bool) {
			i := 0
			for r, err := range turnsOf(runs) {
				if i++; i == at {
					yield(nil, errRead)
					return
				}
				if !yield(r, err) {
					return
				}
			}
		}
		n, err := writeRows(io.Discard, turnColumns, rows, groupLimit[*Turn]{rows: RowGroupRows}, runs)
		if !errors.Is(err, errRead) || n != 0 {
			t.Errorf("rows failing at row %d: got %d rows, %v; want %v", at, n, err, errRead)
		}
	}
}
