package projector

import (
	"log/slog"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
	"github.com/rolloutledger/rolloutledger/projections"
)

// BenchmarkMemoryVsRunLength folds one long simulated run into Pebble,
// window by window as the service does (no Kafka), and records the Go heap
// in use after a GC and the process's resident memory at every tenth of
// the run. The plan being folded stays in memory throughout and is
// measured into the baseline, so growth is the projector's.
//
//	go test -run='^$' -bench=MemoryVsRunLength -benchtime=1x ./services/projector/
func BenchmarkMemoryVsRunLength(b *testing.B) {
	plan, err := simulate.Generate(simulate.Options{Seed: 9, Tasks: 400, Steps: 120, BatchGroups: 8}, "long-run")
	if err != nil {
		b.Fatal(err)
	}
	all := plan.All()
	for b.Loop() {
		db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: pebbleLogger{l: slog.New(slog.DiscardHandler)}})
		if err != nil {
			b.Fatal(err)
		}
		p := &Projector{o: Options{Kafka: kafkalog.Config{}}, db: db, log: slog.New(slog.DiscardHandler)}
		folds := newRunFolds()
		heap0, rss0 := memNow()
		b.Logf("%d facts; baseline heap %.1f MiB, RSS %.1f MiB", len(all), heap0, rss0)
		sealed, next := 0, len(all)/10
		for lo := 0; lo < len(all); lo += 2000 {
			window := make([]kafkalog.Message, 0, 2000)
			for i := lo; i < min(lo+2000, len(all)); i++ {
				v, err := events.Encode(all[i])
				if err != nil {
					b.Fatal(err)
				}
				window = append(window, kafkalog.Message{Value: v, Offset: int64(i)})
			}
			batch := db.NewIndexedBatch()
			ds, _, err := p.foldInto(batch, folds, window)
			if err != nil {
				b.Fatal(err)
			}
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			for _, d := range ds {
				if d.Kind == projections.KindBatchSealed {
					sealed++
				}
			}
			if lo+2000 >= next || lo+2000 >= len(all) {
				heap, rss := memNow()
				b.Logf("%7d facts folded, %3d batches sealed: heap %+7.1f MiB, RSS %+7.1f MiB over baseline", min(lo+2000, len(all)), sealed, heap-heap0, rss-rss0)
				b.ReportMetric(heap-heap0, "heap-growth-MiB")
				next += len(all) / 10
			}
		}
		b.ReportMetric(float64(len(all)), "facts")
		db.Close()
	}
}

// memNow returns the Go heap in use after a collection, and the resident
// set size, in MiB.
func memNow() (heap, rss float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procstatus.MiB(ms.HeapInuse), procstatus.MiB(procstatus.RSS())
}
