package dataset

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/replay"
)

// BenchmarkExport sets the Parquet export of an archived run (the replay
// benchmark's shape) against replay.Verify of the same
// archive: the export's goal is at least half verify's rate.
//
//	go test ./replay/dataset/ -run - -bench Export -benchtime 3x
//
// EXPORT_BENCH_STEPS sizes the run (about 5,000 facts a step; default 10);
// EXPORT_BENCH_TOKENS=1 gives every turn its token ids and log-probs, as a
// real run's carry, and exports each format with them.
func BenchmarkExport(b *testing.B) {
	steps := 10
	if s, err := strconv.Atoi(os.Getenv("EXPORT_BENCH_STEPS")); err == nil && s > 0 {
		steps = s
	}
	tokens := os.Getenv("EXPORT_BENCH_TOKENS") == "1"
	src := planSource(b, simulate.Options{Seed: 42, Tasks: 24, Steps: steps, BatchGroups: 4, MaxTurns: 80, Tokens: tokens}, "bench-export", false)
	arch := filepath.Join(b.TempDir(), "run.rla")
	if _, err := replay.Export(context.Background(), src, arch, replay.ExportOptions{}); err != nil {
		b.Fatal(err)
	}
	a, err := replay.OpenArchive(arch)
	if err != nil {
		b.Fatal(err)
	}
	facts := float64(a.Manifest().Facts)
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := replay.Verify(context.Background(), a, replay.VerifyOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(facts*float64(b.N)/b.Elapsed().Seconds(), "facts/s")
	})
	formats := []string{FormatParquet}
	if tokens {
		formats = Formats
	}
	for _, format := range formats {
		b.Run(format, func(b *testing.B) {
			dir := b.TempDir()
			for b.Loop() {
				if _, err := Export(context.Background(), []replay.Source{a}, format, outPath(b.TempDir(), format), Options{ScratchDir: dir}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(facts*float64(b.N)/b.Elapsed().Seconds(), "facts/s")
		})
	}
}
