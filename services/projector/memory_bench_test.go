package projector

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
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
			ds := foldCommit(b, p, folds, window)
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

// foldCommit folds a window into one batch of p's database and commits it,
// as the service does but for Kafka, and returns the decisions.
func foldCommit(b *testing.B, p *Projector, folds *runFolds, window []kafkalog.Message) []projections.Decision {
	batch := p.db.NewIndexedBatch()
	defer batch.Close()
	ds, _, err := p.foldInto(batch, folds, window)
	if err != nil {
		b.Fatal(err)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	return ds
}

// memNow returns the Go heap in use after a collection, and the resident
// set size, in MiB.
func memNow() (heap, rss float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procstatus.MiB(ms.HeapInuse), procstatus.MiB(procstatus.RSS())
}

// BenchmarkMemoryTokenBatches folds a token-bearing run whose batches are
// large, as a long-horizon run's are (64 groups a batch, turns of 2K
// completion tokens with their ids and log-probs: several hundred MB of
// samples a batch), window by window as the service does, Arrow bodies
// included, and reports the process's peak resident memory and the
// largest batch's samples. What a seal holds must not grow with its
// batch's tokens (docs/design.md §12.3).
//
//	MEMORY_TOKEN_FACTS=240000 MEMORY_TOKEN_GROUPS=16 go test -run='^$' -bench=MemoryTokenBatches -benchtime=1x ./services/projector/
//
// MEMORY_TOKEN_FACTS sizes the run [120000]; MEMORY_TOKEN_GROUPS the
// batches [64].
func BenchmarkMemoryTokenBatches(b *testing.B) {
	env := func(name string, def int) int {
		s := os.Getenv(name)
		if s == "" {
			return def
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s: %q is not a positive number", name, s)
		}
		return n
	}
	facts, groups := env("MEMORY_TOKEN_FACTS", 120_000), env("MEMORY_TOKEN_GROUPS", 64)
	o := simulate.Options{Seed: 42, Tasks: 200, Steps: max(1, groups*facts/3_000_000), BatchGroups: groups, MaxTurns: 200, Tokens: true}
	for b.Loop() {
		src, err := simulate.NewSource(o, "token-batches")
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		p, err := Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		folds := newRunFolds()
		_, rss0 := memNow()
		var n, sealed int
		var largest int64
		window := make([]kafkalog.Message, 0, 2000)
		flush := func() {
			for _, d := range foldCommit(b, p, folds, window) {
				if d.Kind != projections.KindBatchSealed {
					continue
				}
				sealed++
				bytes, err := p.sampleBytes(d.Run, d.Seq)
				if err != nil {
					b.Fatal(err)
				}
				largest = max(largest, bytes)
			}
			window = window[:0]
		}
		for ev := range src.Events() {
			v, err := events.Encode(ev)
			if err != nil {
				b.Fatal(err)
			}
			window = append(window, kafkalog.Message{Value: v, Offset: int64(n)})
			n++
			if len(window) == cap(window) {
				flush()
			}
		}
		flush()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		peak := procstatus.MiB(procstatus.PeakRSS())
		b.Logf("%d facts, %d batches sealed, the largest %.0f MB of samples; peak RSS %.0f MiB (%.0f before the fold)", n, sealed, float64(largest)/1e6, peak, rss0)
		b.ReportMetric(peak, "peak-MiB")
		b.ReportMetric(float64(largest)/(1<<20), "largest-batch-samples-MiB")
		b.ReportMetric(float64(n), "facts")
	}
}

// sampleBytes is the size of a stored batch's canonical samples.
func (p *Projector) sampleBytes(run string, seq uint64) (int64, error) {
	prefix := batchKey(nsSamples, run, seq)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(prefix[:len(prefix):len(prefix)], 0xff, 0xff, 0xff, 0xff, 0xff)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var n int64
	for it.First(); it.Valid(); it.Next() {
		n += int64(len(it.Value()))
	}
	return n, it.Error()
}
