package dataset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rolloutledger/rolloutledger/replay"
)

// Formats an export writes.
const (
	FormatParquet  = "parquet"
	FormatHF       = "hf"
	FormatATIF     = "atif"
	FormatMessages = "messages"
)

// Formats lists the formats, in the order help lists them.
var Formats = []string{FormatParquet, FormatHF, FormatATIF, FormatMessages}

// ErrFormat is returned for a format this package does not write.
var ErrFormat = errors.New("dataset: unknown format")

// Result is what an export wrote.
type Result struct {
	Format string `json:"format"`
	// Out is the directory (parquet, hf) or file (atif, messages) written.
	Out   string `json:"out"`
	Heads []Head `json:"heads"`
	Files []File `json:"files"`
	// Facts counts the facts folded over all runs.
	Facts uint64 `json:"facts"`
}

// Export folds each source (one run each) and writes the runs, in the
// order given, in format to out: a directory for parquet and hf, a JSONL
// file for atif and messages.
func Export(ctx context.Context, srcs []replay.Source, format, out string, o Options) (*Result, error) {
	switch format {
	case FormatParquet, FormatHF, FormatATIF, FormatMessages:
	default:
		return nil, fmt.Errorf("%w %q: want one of parquet, hf, atif, messages", ErrFormat, format)
	}
	if len(srcs) == 0 {
		return nil, errors.New("dataset: no run to export")
	}
	o.Tokens = format == FormatATIF
	o.Samples = format == FormatParquet || format == FormatHF
	o.rows = rowsForTables
	if format == FormatATIF || format == FormatMessages {
		o.rows = rowsForTrajectories
	}
	seen := map[string]bool{}
	var runs []*Run
	defer func() {
		for _, r := range runs {
			r.Close()
		}
	}()
	res := &Result{Format: format, Out: out}
	for _, src := range srcs {
		if seen[src.Run()] {
			return nil, fmt.Errorf("dataset: run %s given twice", src.Run())
		}
		seen[src.Run()] = true
		r, err := Build(ctx, src, o)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
		res.Facts += r.Facts
	}
	res.Heads = HeadsOf(runs)
	var err error
	switch format {
	case FormatParquet:
		res.Files, err = WriteParquet(out, runs)
	case FormatHF:
		res.Files, err = WriteHF(out, runs)
	case FormatATIF, FormatMessages:
		if st, serr := os.Stat(out); serr == nil && st.IsDir() {
			return nil, fmt.Errorf("dataset: %s is a directory; the %s format writes one JSONL file", out, format)
		}
		var f File
		if format == FormatATIF {
			f, err = WriteATIF(out, runs)
		} else {
			f, err = WriteMessages(out, runs)
		}
		res.Files = []File{f}
	}
	if err != nil {
		return nil, err
	}
	if format == FormatParquet || format == FormatHF {
		res.Out = filepath.Clean(out)
	}
	return res, nil
}
