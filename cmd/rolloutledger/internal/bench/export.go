package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/dataset"
)

// exportFigure is the Parquet export of the replay group's run from its
// archive, set against replay --verify's rate on the same archive.
func exportFigure(cmd string) *Figure {
	return &Figure{Name: "export to Parquet from an archive", Unit: "facts/s", Command: cmd + " ; rolloutledger export --format parquet",
		Note: "dataset.Export of the replay run's archive: fold every fact, write the five tables (zstd)"}
}

// timeExport exports the archive at arch to Parquet under dir and adds the
// rate, and the files' size to the note of the first run.
func timeExport(ctx context.Context, arch, dir string, i int, f *Figure) error {
	runtime.GC()
	a, err := replay.OpenArchive(arch)
	if err != nil {
		return err
	}
	out := filepath.Join(dir, fmt.Sprintf("parquet-%d", i))
	start := time.Now()
	res, err := dataset.Export(ctx, []replay.Source{a}, dataset.FormatParquet, out, dataset.Options{})
	if err != nil {
		return err
	}
	f.Runs = append(f.Runs, float64(res.Facts)/time.Since(start).Seconds())
	if i == 0 {
		var size int64
		for _, file := range res.Files {
			size += file.Bytes
		}
		f.Note += fmt.Sprintf("; %.1f MB of Parquet for %d facts", float64(size)/1e6, res.Facts)
	}
	return os.RemoveAll(out)
}
