package dataset

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// TestKafkaAndArchive pushes a simulated run through the ledger into real
// Kafka, exports it from Kafka and from the archive of it, in every
// format: the bytes must be identical, and name the same head.
func TestKafkaAndArchive(t *testing.T) {
	ctx := context.Background()
	kc := testenv.RealKafka(t)
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	o := textRun
	o.Run, o.URL, o.Trainer = "export-kafka", s.URL(), true
	res, err := simulate.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, time.Minute, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})
	s.Shutdown(ctx)
	ks, err := replay.OpenKafka(ctx, kc, res.Run)
	if err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(t.TempDir(), "run.rla")
	if _, err := replay.Export(ctx, ks, arch, replay.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := replay.OpenArchive(arch)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			fromKafka := exportTo(t, ks, format, outPath(t.TempDir(), format))
			fromArchive := exportTo(t, a, format, outPath(t.TempDir(), format))
			sameFiles(t, "archive against Kafka", readAll(t, fromArchive.Out), readAll(t, fromKafka.Out))
			if fromKafka.Heads[0] != fromArchive.Heads[0] || fromKafka.Heads[0].Head != a.Manifest().FinalHead {
				t.Errorf("heads: Kafka %+v, archive %+v, the archive's final head %+v", fromKafka.Heads[0], fromArchive.Heads[0], a.Manifest().FinalHead)
			}
		})
	}
}
