package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/foldstore"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// BenchmarkExportMemory exports simulated runs of several lengths, each
// format in a child process of its own, and reports each child's peak
// resident memory (VmHWM) and rate: an export's memory must not grow with
// the run (docs/design.md §14.7).
//
//	EXPORT_MEMORY_FACTS=1000000,3000000 EXPORT_MEMORY_DIR=/var/tmp/x \
//	  go test ./replay/dataset/ -run - -bench ExportMemory -benchtime 1x -timeout 0
//
// EXPORT_MEMORY_FACTS sizes the runs [200000,600000]; EXPORT_MEMORY_DIR
// keeps the archives made, for the next run to reuse [a temporary
// directory]; EXPORT_MEMORY_FORMATS picks formats [all];
// EXPORT_MEMORY_TOKENS=1 gives every turn its token ids and log-probs, as
// a real run's carry (about 4.3 KB a fact in the archive).
func BenchmarkExportMemory(b *testing.B) {
	sizes := []int{200_000, 600_000}
	if s := os.Getenv("EXPORT_MEMORY_FACTS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				b.Fatalf("EXPORT_MEMORY_FACTS: %q is not a number of facts", f)
			}
			sizes = append(sizes, n)
		}
	}
	dir := os.Getenv("EXPORT_MEMORY_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	formats := Formats
	if s := os.Getenv("EXPORT_MEMORY_FORMATS"); s != "" {
		formats = strings.Split(s, ",")
	}
	tokens := os.Getenv("EXPORT_MEMORY_TOKENS") == "1"
	for _, n := range sizes {
		name, o := fmt.Sprintf("export-memory-%d.rla", n), simOptions(n)
		if tokens {
			name, o.Tokens = fmt.Sprintf("export-memory-tokens-%d.rla", n), true
		}
		arch := filepath.Join(dir, name)
		if _, err := os.Stat(arch); err != nil {
			if err := writeSimArchive(arch, "export-memory", o); err != nil {
				b.Fatal(err)
			}
		}
		for _, format := range formats {
			b.Run(fmt.Sprintf("%s/%d", format, n), func(b *testing.B) {
				for b.Loop() {
					s, err := exportChild(arch, format, b.TempDir())
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(s.PeakMiB, "peak-MiB")
					b.ReportMetric(float64(s.Facts)/s.Seconds, "facts/s")
					b.ReportMetric(float64(s.Facts), "facts")
				}
			})
		}
	}
}

// simOptions is a simulated run of about facts facts, the replay
// benchmark's shape (text on, no inline tokens).
func simOptions(facts int) simulate.Options {
	if facts < 200_000 {
		return simulate.Options{Seed: 42, Tasks: 24, Steps: max(1, facts/5000), BatchGroups: 4, MaxTurns: 80}
	}
	return simulate.Options{Seed: 42, Tasks: 200, Steps: max(1, 64*facts/3_000_000), BatchGroups: 64, MaxTurns: 200}
}

// memorySample is the child's one line of output.
type memorySample struct {
	Facts   uint64  `json:"facts"`
	PeakMiB float64 `json:"peak_rss_mib"`
	Seconds float64 `json:"seconds"`
}

const (
	childArchive = "ROLLOUTLEDGER_EXPORT_CHILD_ARCHIVE"
	childFormat  = "ROLLOUTLEDGER_EXPORT_CHILD_FORMAT"
	childOut     = "ROLLOUTLEDGER_EXPORT_CHILD_OUT"
)

// exportChild runs TestExportMemoryChild in a child process.
func exportChild(arch, format, dir string) (memorySample, error) {
	c := exec.Command(os.Args[0], "-test.run=^TestExportMemoryChild$", "-test.count=1")
	c.Env = append(os.Environ(), childArchive+"="+arch, childFormat+"="+format, childOut+"="+dir)
	out, err := c.Output()
	if err != nil {
		return memorySample{}, fmt.Errorf("export child (%s): %v: %s", format, err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var s memorySample
			err := json.Unmarshal([]byte(line), &s)
			return s, err
		}
	}
	return memorySample{}, fmt.Errorf("export child (%s): no result in %q", format, out)
}

// TestExportMemoryChild is BenchmarkExportMemory's child; it does nothing
// unless started by it.
func TestExportMemoryChild(t *testing.T) {
	arch := os.Getenv(childArchive)
	if arch == "" {
		t.Skip("run by BenchmarkExportMemory")
	}
	a, err := replay.OpenArchive(arch)
	if err != nil {
		t.Fatal(err)
	}
	format, dir := os.Getenv(childFormat), os.Getenv(childOut)
	start := time.Now()
	res, err := Export(context.Background(), []replay.Source{a}, format, outPath(dir, format), Options{ScratchDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(memorySample{Facts: res.Facts, PeakMiB: procstatus.MiB(procstatus.PeakRSS()), Seconds: time.Since(start).Seconds()})
	fmt.Printf("%s\n", b)
}

// writeSimArchive generates a run a piece at a time, folds it into a
// scratch store to conclude its decisions, and writes both as an archive
// at path.
func writeSimArchive(path, run string, o simulate.Options) error {
	src, err := simulate.NewSource(o, run)
	if err != nil {
		return err
	}
	w, err := replay.CreateArchive(path, run, "simulate")
	if err != nil {
		return err
	}
	written := false
	defer func() {
		if !written {
			w.Abort()
		}
	}()
	store, err := foldstore.OpenSpill(foldstore.SpillOptions{Dir: filepath.Dir(path)})
	if err != nil {
		return err
	}
	defer store.Close()
	fold := projections.NewFold(run)
	var decided [][]byte
	i := 0
	for ev := range src.Events() {
		v, err := events.Encode(ev)
		if err != nil {
			return err
		}
		ds, err := fold.Apply(store, projections.Record{Value: v, Event: ev, Offset: int64(i)})
		if err != nil {
			return err
		}
		for _, d := range ds {
			decided = append(decided, d.Value)
		}
		if err := w.AddFact(replay.Fact{Seq: uint64(i + 1), Offset: int64(i), Value: v}); err != nil {
			return err
		}
		i++
	}
	for i, d := range decided {
		if err := w.AddDecision(replay.Recorded{Offset: int64(i), Value: d}); err != nil {
			return err
		}
	}
	written = true
	_, err = w.Close()
	return err
}
