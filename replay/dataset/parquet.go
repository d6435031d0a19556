package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/rolloutledger/rolloutledger/projections"
)

// The Parquet files (docs/analysts.md, "Exports").
//
// Every table is written with the same fixed writer properties, so the same
// rows give the same bytes: format 2.6, zstd at level 3 for every column
// (about 3× smaller than snappy on token lists, and as fast to read),
// statistics on, no page index or bloom filter, created_by "rolloutledger"
// without a version, and no clock anywhere: the only key/value metadata is
// rolloutledger.* (run, ledger head, rule version) and the Arrow schema.
//
// Dictionary encoding is chosen per column, never left to the writer's
// fallback: the columns whose values repeat (run, task, group, attempt in
// the per-turn tables, tool, finish, reasons, small counters) are written
// with a dictionary, the rest (sequence numbers, offsets, text, token
// lists) plain. A column chunk whose dictionary outgrows the writer's page
// limit switches to plain halfway, and the footer then lists two data
// encodings for that chunk in the order of a Go map's iteration, so the
// same rows would give different bytes from one write to the next. To make
// that impossible, writeRows ends a row group early when any dictionary
// column's values in it could add up to half of DictionaryLimit: a
// dictionary holds at most the bytes of the values it was given, and no one
// value is larger than an event (1 MiB), so no dictionary reaches the limit.
//
// Row groups: RowGroupRows rows for the narrow tables, SampleRowGroupRows
// for samples, whose rows hold every token of a sample (thousands of ids,
// log-probs and versions each), or fewer rows once a group holds
// SampleRowGroupTokens tokens (about 25 MiB of columns, uncompressed): a
// reader can skip and parallelize by group without a group per sample, and
// the writer holds one group at a time, however long the run's attempts.
// With 4 M tokens a group, the builders' doubling and the group written
// beside the next put a token-bearing export near 1.1 GiB at its peak
// (BENCHMARKS.md, "Exports in bounded memory").

// DictionaryLimit is the dictionary page size limit of every column chunk.
const DictionaryLimit = 16 << 20

// Row-group lengths.
const (
	RowGroupRows         = 128 * 1024
	SampleRowGroupRows   = 1024
	SampleRowGroupTokens = 1 << 20
)

// CreatedBy is the Parquet footer's created_by.
const CreatedBy = "rolloutledger"

// Tables are the tables every export writes, in order.
var Tables = []string{"attempts", "turns", "tool_calls", "batches", "samples", "tasks"}

// File is one file an export wrote.
type File struct {
	// Path is relative to the export's directory, with forward slashes.
	Path   string `json:"path"`
	Table  string `json:"table,omitempty"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Head names the ledger head one run's export was taken from.
type Head struct {
	Run   string               `json:"run"`
	Facts uint64               `json:"facts"`
	Head  projections.TreeHead `json:"head"`
}

// HeadsOf is the heads of runs, in order.
func HeadsOf(runs []*Run) []Head {
	var hs []Head
	for _, r := range runs {
		hs = append(hs, Head{Run: r.Run, Facts: r.Facts, Head: r.Head})
	}
	return hs
}

func writerProps[R any](cols []column[R], rowGroup int64) *parquet.WriterProperties {
	opts := []parquet.WriterProperty{
		parquet.WithVersion(parquet.V2_6),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(3),
		parquet.WithDictionaryDefault(false),
		parquet.WithDictionaryPageSizeLimit(DictionaryLimit),
		parquet.WithStats(true),
		parquet.WithMaxRowGroupLength(rowGroup),
		parquet.WithCreatedBy(CreatedBy),
		parquet.WithPageIndexEnabled(false),
	}
	for _, c := range cols {
		if c.dict {
			opts = append(opts, parquet.WithDictionaryFor(c.field.Name, true))
		}
	}
	return parquet.NewWriterProperties(opts...)
}

// WriteParquet writes runs' tables to dir, one file per table named
// <table>.parquet, each written beside its name and renamed into place.
func WriteParquet(dir string, runs []*Run) ([]File, error) {
	var files []File
	for _, t := range Tables {
		f, err := writeTableFile(dir, t+".parquet", t, runs)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// writeTableFile writes one table of runs to dir/rel.
func writeTableFile(dir, rel, table string, runs []*Run) (File, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	tmp, err := createBeside(path)
	if err != nil {
		return File{}, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h)}
	rows, err := writeTable(cw, table, runs)
	if err == nil {
		err = spillErr(runs)
	}
	if err := commitFile(tmp, path, err); err != nil {
		return File{}, err
	}
	return File{Path: rel, Table: table, Rows: rows, Bytes: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// writeTable writes one table of runs as Parquet to w.
func writeTable(w io.Writer, table string, runs []*Run) (int64, error) {
	switch table {
	case "attempts":
		return writeRows(w, attemptColumns, attemptsOf(runs), groupLimit[*Attempt]{rows: RowGroupRows}, runs)
	case "turns":
		return writeRows(w, turnColumns, turnsOf(runs), groupLimit[*Turn]{rows: RowGroupRows}, runs)
	case "tool_calls":
		return writeRows(w, toolCallColumns, callsOf(runs), groupLimit[*ToolCall]{rows: RowGroupRows}, runs)
	case "batches":
		return writeRows(w, batchColumns, rowsOf(runs, func(r *Run) []*Batch { return r.Batches }), groupLimit[*Batch]{rows: RowGroupRows}, runs)
	case "tasks":
		return writeRows(w, taskColumns, rowsOf(runs, func(r *Run) []*Task { return r.Tasks }), groupLimit[*Task]{rows: RowGroupRows}, runs)
	case "samples":
		return writeRows(w, sampleColumns, samplesOf(runs), groupLimit[*sampleRow]{rows: SampleRowGroupRows,
			weight: func(r *row[*sampleRow]) int { return r.r.v.Len }, max: SampleRowGroupTokens}, runs)
	}
	return 0, fmt.Errorf("dataset: no table %q", table)
}

// row is one row of a table and the run it belongs to.
type row[R any] struct {
	run *Run
	r   R
}

func rowsOf[R any](runs []*Run, get func(*Run) []R) iter.Seq2[*row[R], error] {
	return func(yield func(*row[R], error) bool) {
		for _, run := range runs {
			for _, r := range get(run) {
				if !yield(&row[R]{run: run, r: r}, nil) {
					return
				}
			}
		}
	}
}

// column is one column of a table of R: its field, how a row fills it,
// and whether it is written with a dictionary (only scalar columns are).
type column[R any] struct {
	field arrow.Field
	add   func(b array.Builder, r *row[R])
	dict  bool
}

// dictionary marks c to be written with a dictionary.
func dictionary[R any](c column[R]) column[R] {
	c.dict = true
	return c
}

// dictionaryBytes bounds what the dictionary of a builder's values can
// hold, counted as the Parquet writer counts it: 4 bytes of length and the
// bytes of each string, the width of each fixed-width value.
func dictionaryBytes(b array.Builder) int {
	switch b := b.(type) {
	case *array.StringBuilder:
		return b.DataLen() + 4*b.Len()
	case *array.Int64Builder, *array.Float64Builder:
		return 8 * b.Len()
	}
	return 0
}

// groupLimit is when a row group of R ends: at rows rows, or, with a
// weight, once the rows' weights add up to max.
type groupLimit[R any] struct {
	rows   int
	weight func(*row[R]) int
	max    int
}

func writeRows[R any](w io.Writer, cols []column[R], rows iter.Seq2[*row[R], error], limit groupLimit[R], runs []*Run) (int64, error) {
	rowGroup := limit.rows
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = c.field
	}
	schema := arrow.NewSchema(fields, nil)
	fw, err := pqarrow.NewFileWriter(schema, w, writerProps(cols, int64(rowGroup)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return 0, err
	}
	heads, err := json.Marshal(HeadsOf(runs))
	if err != nil {
		return 0, err
	}
	if err := fw.AppendKeyValueMetadata("rolloutledger.heads", string(heads)); err != nil {
		return 0, err
	}
	if err := fw.AppendKeyValueMetadata("rolloutledger.rule_version", fmt.Sprint(projections.RuleVersion)); err != nil {
		return 0, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	// A row group is encoded and compressed on another goroutine while
	// the next is built from the row store, so an export holds two groups
	// at most. They are written in order, so the file's bytes are those of
	// writing each in turn. Reading the rows back and writing them, one
	// after the other, had been a third of a Parquet export's time.
	groups := make(chan arrow.RecordBatch)
	var failed atomic.Bool
	wrote := make(chan error, 1)
	go func() {
		var err error
		for rec := range groups {
			if err == nil {
				if err = fw.Write(rec); err != nil {
					failed.Store(true)
				}
			}
			rec.Release()
		}
		wrote <- err
	}()
	// end waits for the groups sent to be written and closes the file;
	// every return goes through it.
	end := func(err error) (int64, error) {
		close(groups)
		err = errors.Join(err, <-wrote)
		return 0, errors.Join(err, fw.Close())
	}
	var total int64
	n, weight := 0, 0
	flush := func() {
		if n > 0 {
			groups <- b.NewRecordBatch()
			n, weight = 0, 0
		}
	}
	for r, err := range rows {
		if err != nil {
			return end(err)
		}
		for i, c := range cols {
			c.add(b.Field(i), r)
		}
		n++
		total++
		if limit.weight != nil {
			weight += limit.weight(r)
		}
		if n == rowGroup || (limit.weight != nil && weight >= limit.max) || dictionaryFull(cols, b) {
			if failed.Load() {
				return end(nil)
			}
			flush()
		}
	}
	flush()
	if _, err := end(nil); err != nil {
		return 0, err
	}
	return total, nil
}

// dictionaryFull says whether a dictionary column of the row group being
// built could, with one more row, reach DictionaryLimit.
func dictionaryFull[R any](cols []column[R], b *array.RecordBuilder) bool {
	for i, c := range cols {
		if c.dict && dictionaryBytes(b.Field(i)) >= DictionaryLimit/2 {
			return true
		}
	}
	return false
}

// spillErr is the first error any of runs met reading back what it keeps
// on disk while a file was written: the file is not kept.
func spillErr(runs []*Run) error {
	for _, r := range runs {
		if err := r.Err(); err != nil {
			return err
		}
	}
	return nil
}
