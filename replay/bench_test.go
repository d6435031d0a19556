package replay

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Benchmarks of replay at scale. The runs are simulated; REPLAY_BENCH_SCALE
// picks their size:
//
//	small   ~110 K facts without tokens,  ~40 K with (CI smoke)
//	large   ~3.0 M facts without tokens, ~160 K with (default)
//
// Each run is generated and folded once per benchmark binary, written to
// an archive, and for the Kafka benchmarks appended to the real broker at
// $KAFKA_BROKERS (facts and the decisions the fold concluded) once.
//
//	go test ./replay -run '^$' -bench . -benchtime 1x -timeout 60m
//
// REPLAY_BENCH_CPUPROFILE=F writes a CPU profile of the verifications
// alone to F (go test's -cpuprofile also covers making the runs).

type benchRun struct {
	name  string
	src   *memSource
	bytes int64
	dir   string
	arch  string // archive path
	kafka kafkalog.Config
	once  sync.Once
}

var (
	benchOnce sync.Once
	benchRuns map[string]*benchRun
	benchDir  string
)

// TestMain removes the benchmarks' archives when the binary is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func benchScale() string {
	if s := os.Getenv("REPLAY_BENCH_SCALE"); s != "" {
		return s
	}
	return "large"
}

func benchRunsFor(b *testing.B) map[string]*benchRun {
	benchOnce.Do(func() {
		plain := simulate.Options{Seed: 42, Tasks: 200, Steps: 64, BatchGroups: 64, MaxTurns: 200}
		tokens := simulate.Options{Seed: 43, Tasks: 48, Steps: 8, BatchGroups: 16, Tokens: true}
		if benchScale() == "small" {
			plain = simulate.Options{Seed: 42, Tasks: 48, Steps: 8, BatchGroups: 16}
			tokens = simulate.Options{Seed: 43, Tasks: 24, Steps: 4, BatchGroups: 8, Tokens: true}
		}
		dir, err := os.MkdirTemp("", "replay-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		benchRuns = map[string]*benchRun{}
		for name, o := range map[string]simulate.Options{"no-tokens": plain, "tokens": tokens} {
			src := planSource(b, o, "bench-"+name)
			r := &benchRun{name: name, src: src, dir: dir}
			for _, f := range src.facts {
				r.bytes += int64(len(f.Value))
			}
			r.arch = filepath.Join(dir, name+".rla")
			if _, err := Export(context.Background(), src, r.arch, ExportOptions{}); err != nil {
				b.Fatal(err)
			}
			benchRuns[name] = r
		}
		runtime.GC()
	})
	return benchRuns
}

// kafkaSource appends the run's facts to Kafka once, folds them as read
// back (so the decisions quote their real positions), appends those
// decisions, and opens the run there.
func (r *benchRun) kafkaSource(b *testing.B) *KafkaSource {
	r.once.Do(func() {
		kc := testenv.RealKafka(b)
		kc.Partitions = 1
		ctx := context.Background()
		if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
			b.Fatal(err)
		}
		appendAll(b, kc, kc.FactsTopic(), r.src.run, factValues(r.src))
		ks, err := OpenKafka(ctx, kc, r.src.run)
		if err != nil {
			b.Fatal(err)
		}
		ds, _ := refold(b, ks)
		values := make([][]byte, len(ds))
		for i, d := range ds {
			values[i] = d.Value
		}
		appendAll(b, kc, kc.DecisionsTopic(), r.src.run, values)
		r.kafka = kc
	})
	if r.kafka.Brokers == nil {
		b.Skip("no Kafka")
	}
	s, err := OpenKafka(context.Background(), r.kafka, r.src.run)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func appendAll(b *testing.B, kc kafkalog.Config, topic, run string, values [][]byte) {
	w := kafkalog.NewWriter(kc, topic, kafkalog.WriterOptions{})
	defer w.Close()
	for i := 0; i < len(values); {
		var recs []kafkalog.Record
		size := 0
		for ; i < len(values) && len(recs) < 2048 && size < 2<<20; i++ {
			recs = append(recs, kafkalog.Record{Key: []byte(run), Value: values[i], Headers: []kafkalog.Header{}})
			size += len(values[i])
		}
		if _, err := w.Append(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
}

func factValues(m *memSource) [][]byte {
	out := make([][]byte, len(m.facts))
	for i, f := range m.facts {
		out[i] = f.Value
	}
	return out
}

func reportRate(b *testing.B, facts, bytes int64, n int) {
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(facts)*float64(n)/secs, "facts/s")
	b.ReportMetric(float64(bytes)*float64(n)/1e6/secs, "MB/s")
	b.ReportMetric(float64(facts), "facts")
}

func benchVerify(b *testing.B, open func(b *testing.B, r *benchRun) Source) {
	for _, name := range []string{"no-tokens", "tokens"} {
		b.Run(name, func(b *testing.B) {
			r := benchRunsFor(b)[name]
			src := open(b, r)
			if f := os.Getenv("REPLAY_BENCH_CPUPROFILE"); f != "" {
				stop := startProfile(b, f+"."+name)
				defer stop()
			}
			n := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				rep, err := Verify(context.Background(), src, VerifyOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if !rep.OK() {
					b.Fatalf("the run does not verify: %v %v", rep.First, rep.History)
				}
				n++
			}
			reportRate(b, int64(len(r.src.facts)), r.bytes, n)
			// CPU time a fact, over every core: what bounds the rate on
			// a machine whose cores are shared, and steadier than it.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n*len(r.src.facts)), "cpu-µs/fact")
			// The fold's state at the end: key and value bytes held.
			b.ReportMetric(float64(r.src.stateBytes)/float64(len(r.src.facts)), "state-B/fact")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startProfile starts a CPU profile to path and returns what stops it.
func startProfile(b *testing.B, path string) func() {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

func BenchmarkVerifyArchive(b *testing.B) {
	benchVerify(b, func(b *testing.B, r *benchRun) Source {
		a, err := OpenArchive(r.arch)
		if err != nil {
			b.Fatal(err)
		}
		return a
	})
}

func BenchmarkVerifyKafka(b *testing.B) {
	benchVerify(b, func(b *testing.B, r *benchRun) Source { return r.kafkaSource(b) })
}

// BenchmarkOpenArchive is the verification on open: checksums, SHA-256
// and the final head recomputed.
func BenchmarkOpenArchive(b *testing.B) {
	for _, name := range []string{"no-tokens", "tokens"} {
		b.Run(name, func(b *testing.B) {
			r := benchRunsFor(b)[name]
			st, _ := os.Stat(r.arch)
			n := 0
			for b.Loop() {
				if _, err := OpenArchive(r.arch); err != nil {
					b.Fatal(err)
				}
				n++
			}
			reportRate(b, int64(len(r.src.facts)), st.Size(), n)
		})
	}
}

func BenchmarkExport(b *testing.B) {
	for _, from := range []string{"memory", "kafka"} {
		for _, name := range []string{"no-tokens", "tokens"} {
			b.Run(from+"/"+name, func(b *testing.B) {
				r := benchRunsFor(b)[name]
				var src Source = r.src
				if from == "kafka" {
					src = r.kafkaSource(b)
				}
				out := filepath.Join(b.TempDir(), "out.rla")
				n := 0
				for b.Loop() {
					if _, err := Export(context.Background(), src, out, ExportOptions{}); err != nil {
						b.Fatal(err)
					}
					n++
				}
				reportRate(b, int64(len(r.src.facts)), r.bytes, n)
			})
		}
	}
}

// BenchmarkProve makes an inclusion proof of a fact near the end of the
// run in the last batch's head, and a consistency proof from the first
// batch to the last.
func BenchmarkProve(b *testing.B) {
	r := benchRunsFor(b)["no-tokens"]
	heads, err := recordedHeads(context.Background(), r.src)
	if err != nil {
		b.Fatal(err)
	}
	var last RecordedHead
	for _, h := range heads {
		if h.Kind == string(projections.KindBatchSealed) && h.Seq > last.Seq {
			last = h
		}
	}
	for _, from := range []string{"archive", "kafka"} {
		b.Run(from, func(b *testing.B) {
			var src Source
			if from == "kafka" {
				src = r.kafkaSource(b)
			} else {
				a, err := OpenArchive(r.arch)
				if err != nil {
					b.Fatal(err)
				}
				src = a
			}
			b.Run("inclusion", func(b *testing.B) {
				for b.Loop() {
					p, err := ProveInclusion(context.Background(), src, FactRef{Seq: last.Size - 1}, HeadRef{Kind: "batch", N: last.Seq})
					if err != nil {
						b.Fatal(err)
					}
					if err := CheckProof(p, last.TreeHead); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(last.Size), "tree-size")
			})
			b.Run("consistency", func(b *testing.B) {
				for b.Loop() {
					if _, err := ProveConsistency(context.Background(), src, HeadRef{Kind: "batch", N: 1}, HeadRef{Kind: "batch", N: last.Seq}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCheckProof is what an auditor pays: checking a proof with the
// head alone.
func BenchmarkCheckProof(b *testing.B) {
	r := benchRunsFor(b)["no-tokens"]
	a, err := OpenArchive(r.arch)
	if err != nil {
		b.Fatal(err)
	}
	p, err := ProveInclusion(context.Background(), a, FactRef{Seq: 1}, HeadRef{Kind: "fact", N: a.Manifest().FinalHead.Size / 2})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := CheckProof(p, p.Head.TreeHead); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Hashes)), "hashes")
}
