package bench_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/bench"
	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// Benchmarks against the real servers (KAFKA_BROKERS, DATABASE_URL):
//
//	go test -run '^$' -bench 'SinkVsPsqlCopy|Lag' -benchtime 1x ./cmd/rolloutledger/internal/bench/
//
// Each iteration is a whole load, so -benchtime 1x (or 3x) is the useful
// setting; the figures are the custom metrics, not ns/op.

// seedLog writes a generated run to the facts topic in virtual-time order,
// and the decisions the projections conclude from it to the decisions
// topic, as a producer fleet and the projector would. It returns the
// number of records written.
func seedLog(tb testing.TB, kc kafkalog.Config, o simulate.Options, run string) int {
	tb.Helper()
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		tb.Fatal(err)
	}
	// A token-bearing run is some 400 MB of log: a broker that keeps every
	// run's topics slows the runs after it.
	tb.Cleanup(func() {
		if err := kafkalog.DeleteTopics(context.Background(), kc, kc.FactsTopic(), kc.DecisionsTopic()); err != nil {
			tb.Logf("delete the run's topics: %v", err)
		}
	})
	plan, err := simulate.Generate(o, run)
	if err != nil {
		tb.Fatal(err)
	}
	evs := plan.All()
	facts := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer facts.Close()
	var recs []projections.Record
	for lo := 0; lo < len(evs); lo += 2000 {
		chunk := evs[lo:min(lo+2000, len(evs))]
		values, err := events.EncodeBatch(chunk)
		if err != nil {
			tb.Fatal(err)
		}
		out := make([]kafkalog.Record, len(values))
		for i, v := range values {
			out[i] = kafkalog.Record{Key: []byte(run), Value: v}
		}
		pos, err := facts.Append(ctx, out)
		if err != nil {
			tb.Fatal(err)
		}
		for i, v := range values {
			recs = append(recs, projections.Record{Value: v, Event: chunk[i], Partition: pos[i].Partition, Offset: pos[i].Offset})
		}
	}
	ds, err := projections.FoldAll(run, recs)
	if err != nil {
		tb.Fatal(err)
	}
	decided := make([]kafkalog.Record, len(ds))
	for i, d := range ds {
		decided[i] = kafkalog.Record{Key: []byte(run), Value: d.Value}
	}
	dw := kafkalog.NewWriter(kc, kc.DecisionsTopic(), kafkalog.WriterOptions{})
	defer dw.Close()
	if _, err := dw.Append(ctx, decided); err != nil {
		tb.Fatal(err)
	}
	return len(evs) + len(ds)
}

// drain runs a sink into a fresh schema until it stored every record of
// the log (bench.DrainSink, as `rolloutledger bench` measures it).
func drain(tb testing.TB, kc kafkalog.Config, url, schema string) (time.Duration, int64) {
	tb.Helper()
	took, rows, err := bench.DrainSink(context.Background(), kc, url, schema)
	if err != nil {
		tb.Fatal(err)
	}
	return took, rows
}

// psqlCopy times psql's \copy of the rows the sink stored in from into
// the same tables of to (bench.PsqlCopy).
func psqlCopy(tb testing.TB, url, from, to string) (time.Duration, int64) {
	tb.Helper()
	psql, err := exec.LookPath("psql")
	if err != nil {
		testenv.Unavailable(tb, "psql is not installed")
	}
	took, rows, err := bench.PsqlCopy(context.Background(), psql, url, from, to)
	if err != nil {
		tb.Fatal(err)
	}
	return took, rows
}

// The sink's throughput into Postgres beside psql's \copy of the very
// same rows into the same tables on the same server: for a payload-free
// run, and for the same run with its turns' token arrays inline, as a
// real run's turns carry them (the rows are the same; the records the
// sink reads and decodes are some fourteen times larger).
func BenchmarkSinkVsPsqlCopy(b *testing.B) {
	for _, c := range []struct {
		name   string
		tokens bool
	}{{"payload-free", false}, {"tokens", true}} {
		b.Run(c.name, func(b *testing.B) {
			kc := testenv.RealKafka(b)
			url := testenv.Postgres(b)
			records := seedLog(b, kc, simulate.Options{Seed: 1, Tasks: 96, Steps: 8, Tokens: c.tokens}, "bench-run")
			b.ResetTimer()
			var sinkTime, psqlTime time.Duration
			var sinkRows, psqlRows int64
			for range b.N {
				schema, copied := testenv.Schema(b, url), testenv.Schema(b, url)
				took, rows := drain(b, kc, url, schema)
				sinkTime += took
				sinkRows += rows
				took, rows = psqlCopy(b, url, schema, copied)
				psqlTime += took
				psqlRows += rows
			}
			sinkRate, psqlRate := float64(sinkRows)/sinkTime.Seconds(), float64(psqlRows)/psqlTime.Seconds()
			b.ReportMetric(float64(records*b.N)/sinkTime.Seconds(), "sink-records/s")
			b.ReportMetric(sinkRate, "sink-rows/s")
			b.ReportMetric(psqlRate, "psql-copy-rows/s")
			b.ReportMetric(sinkRate/psqlRate, "sink/psql")
			b.ReportMetric(float64(sinkRows/int64(b.N)), "rows")
		})
	}
}

// Lag from Kafka's acknowledgment of a fact to its row being visible in
// Postgres (the sink's COMMIT returned), at a steady produce rate.
func BenchmarkLag(b *testing.B) {
	for _, rate := range []int{500, 5000} {
		b.Run(fmt.Sprintf("rate_%d", rate), func(b *testing.B) {
			kc := testenv.RealKafka(b)
			url := testenv.Postgres(b)
			if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
				b.Fatal(err)
			}
			plan, err := simulate.Generate(simulate.Options{Seed: 2, Tasks: 96, Steps: 8}, "lag-run")
			if err != nil {
				b.Fatal(err)
			}
			evs := plan.All()
			b.ResetTimer()
			var all []time.Duration
			var achieved float64
			for range b.N {
				lags, got := measureLag(b, kc, url, testenv.Schema(b, url), evs, rate, 8*time.Second)
				all = append(all, lags...)
				achieved += got
			}
			slices.Sort(all)
			q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(1), "max-ms")
			b.ReportMetric(achieved/float64(b.N), "facts/s")
		})
	}
}

type committed struct {
	next int64
	at   time.Time
}

// measureLag produces evs at rate facts per second for d, in 10 ms ticks,
// while a sink stores them, and returns each fact's lag and the rate
// achieved.
func measureLag(tb testing.TB, kc kafkalog.Config, url, schema string, evs []events.Event, rate int, d time.Duration) ([]time.Duration, float64) {
	tb.Helper()
	ctx := context.Background()
	if _, err := pgsink.Migrate(ctx, url, schema, nil); err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	commits := map[pgsink.TopicPartition][]committed{}
	sink, err := pgsink.New(pgsink.Options{Kafka: kc, DatabaseURL: url, Schema: schema, OnCommit: func(c pgsink.Commit) {
		mu.Lock()
		defer mu.Unlock()
		for tp, next := range c.Next {
			commits[tp] = append(commits[tp], committed{next, c.At})
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = sink.Run(sctx) }()
	defer func() { cancel(); <-ran }()
	// Let the sink connect and reach the end of the log first.
	if err := pgsink.WaitCaughtUp(ctx, url, schema, kc); err != nil {
		tb.Fatal(err)
	}

	type acked struct {
		tp     pgsink.TopicPartition
		offset int64
		at     time.Time
	}
	var acks []acked
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	perTick := max(1, rate/100)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start, sent := time.Now(), 0
	for time.Since(start) < d && sent < len(evs) {
		<-tick.C
		chunk := evs[sent:min(sent+perTick, len(evs))]
		values, err := events.EncodeBatch(chunk)
		if err != nil {
			tb.Fatal(err)
		}
		recs := make([]kafkalog.Record, len(values))
		for i, v := range values {
			recs[i] = kafkalog.Record{Key: []byte(chunk[i].Run), Value: v}
		}
		pos, err := w.Append(ctx, recs)
		if err != nil {
			tb.Fatal(err)
		}
		now := time.Now()
		for _, p := range pos {
			acks = append(acks, acked{pgsink.TopicPartition{Topic: kc.FactsTopic(), Partition: int(p.Partition)}, p.Offset, now})
		}
		sent += len(chunk)
	}
	achieved := float64(sent) / time.Since(start).Seconds()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := pgsink.WaitCaughtUp(wctx, url, schema, kc); err != nil {
		tb.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	lags := make([]time.Duration, 0, len(acks))
	for _, a := range acks {
		cs := commits[a.tp]
		i, _ := slices.BinarySearchFunc(cs, a.offset+1, func(c committed, n int64) int {
			switch {
			case c.next < n:
				return -1
			case c.next > n:
				return 1
			}
			return 0
		})
		if i == len(cs) {
			tb.Fatalf("no commit covers %s/%d at %d", a.tp.Topic, a.tp.Partition, a.offset)
		}
		lags = append(lags, max(0, cs[i].at.Sub(a.at)))
	}
	return lags, achieved
}
