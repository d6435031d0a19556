package projector

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// BenchmarkExplorerFirstViews measures the run explorer's views of one
// long run as a restarted server answers them: the run (the scale bench's
// shape, payload-free, EXPLORE_BENCH_FACTS facts) is folded into a
// projector's state window by window as the service folds it, the
// database is closed and opened again, and each view is asked for once
// (the first view, cold) and then five times more (the median, warm).
// EXPLORE_BENCH_DIR keeps the folded state for another run of the bench;
// EXPLORE_BENCH_STEPS=N makes the run N steps of two short groups each
// instead (more steps than the run view shows, in few facts);
// EXPLORE_BENCH_TOKENS=1 gives the turns inline token ids, log-probs and
// text, as a real run's carry them; the facts are then also appended to
// the real Kafka broker ($KAFKA_BROKERS), whose facts log the attempt's
// view reads its token arrays back from, as the service's does.
//
//	EXPLORE_BENCH_FACTS=1000000 go test ./services/projector/ -run '^$' -bench ExplorerFirstViews -benchtime 1x -timeout 0
func BenchmarkExplorerFirstViews(b *testing.B) {
	facts := 200_000
	if v, err := strconv.Atoi(os.Getenv("EXPLORE_BENCH_FACTS")); err == nil && v > 0 {
		facts = v
	}
	const run = "explore-bench"
	dir := os.Getenv("EXPLORE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	tokens := os.Getenv("EXPLORE_BENCH_TOKENS") == "1"
	shape := simulate.Options{Seed: 42, Tasks: 200, Steps: max(1, 64*facts/3_000_000), BatchGroups: 64, MaxTurns: 200, Tokens: tokens, Text: tokens}
	dir = filepath.Join(dir, fmt.Sprintf("facts-%d", facts))
	if steps, err := strconv.Atoi(os.Getenv("EXPLORE_BENCH_STEPS")); err == nil && steps > 0 {
		// A run longer in steps than the run view shows, in few facts:
		// batches of two short groups.
		shape.Steps, shape.BatchGroups, shape.MaxTurns = steps, 2, 10
		dir = filepath.Join(filepath.Dir(dir), fmt.Sprintf("steps-%d", steps))
	}
	if tokens {
		dir += "-tokens"
	}
	log := slog.New(slog.DiscardHandler)
	var kc kafkalog.Config
	if tokens {
		kc = testenv.RealKafka(b)
		kc.Partitions = 1
		// A kept state names the topics its facts went to.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if v, err := os.ReadFile(filepath.Join(dir, "topic-prefix")); err == nil {
			kc.TopicPrefix = string(v)
		} else if err := os.WriteFile(filepath.Join(dir, "topic-prefix"), []byte(kc.TopicPrefix), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "folded")); err != nil {
		start := time.Now()
		n, err := foldSimulated(dir, run, shape, kc)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("folded %d facts in %s (%.0f facts/s)", n, time.Since(start).Round(time.Second), float64(n)/time.Since(start).Seconds())
		if err := os.WriteFile(filepath.Join(dir, "folded"), []byte(strconv.Itoa(n)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		db, err := pebble.Open(dir, pebbleOptions(log, dir))
		if err != nil {
			b.Fatal(err)
		}
		p := &Projector{db: db, log: log}
		all, err := db.EstimateDiskUsage([]byte{0}, []byte{0xff})
		if err != nil {
			b.Fatal(err)
		}
		records, err := db.EstimateDiskUsage([]byte{nsExplore}, []byte{nsExplore + 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("state on disk %d MiB, of which the explorer's records %d MiB", all>>20, records>>20)
		b.ReportMetric(float64(records>>20), "explorer-MiB")
		s := &explore.Service{Kafka: kc, Runs: p, Records: p.ExplorerRecords}
		mux := http.NewServeMux()
		s.Register(mux)
		get := func(path string) ([]byte, time.Duration) {
			t0 := time.Now()
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			d := time.Since(t0)
			if rec.Code != http.StatusOK {
				b.Fatalf("GET %s: %d %.300s", path, rec.Code, rec.Body)
			}
			return rec.Body.Bytes(), d
		}
		base := "/v1/runs/" + run + "/explore"
		first, _ := get(base + "/attempts?limit=1")
		var page explore.AttemptPage
		if err := json.Unmarshal(first, &page); err != nil || len(page.Attempts) == 0 {
			b.Fatalf("attempts page: %v", err)
		}
		mid, _ := get(base + "/attempts?limit=1&cursor=" + strconv.FormatUint(page.Total/2, 10))
		if err := json.Unmarshal(mid, &page); err != nil || len(page.Attempts) == 0 {
			b.Fatalf("attempts page: %v", err)
		}
		a := page.Attempts[0]
		runs, _ := get("/v1/explore/runs")
		var list struct {
			Runs []explore.RunSummary `json:"runs"`
		}
		if err := json.Unmarshal(runs, &list); err != nil || len(list.Runs) != 1 {
			b.Fatalf("runs list: %v", err)
		}
		views := []struct{ name, path string }{
			{"runs", "/v1/explore/runs"},
			{"run", base},
			{"steps-last-page", base + "/steps?limit=500&cursor=" + strconv.Itoa(max(1, list.Runs[0].Batches-500))},
			{"attempts-first-page", base + "/attempts"},
			{"attempts-last-page", base + "/attempts?cursor=" + strconv.FormatUint(page.Total-min(page.Total, 2000), 10)},
			{"attempt", base + "/attempts/" + a.Attempt},
			{"group", base + "/groups/" + a.Group},
			{"side-by-side", base + "/side-by-side/" + a.Group},
			{"task", base + "/tasks/" + a.Task},
			{"tasks", base + "/tasks"},
			{"search", base + "/search?q=zz-absent"},
		}
		if n := list.Runs[0].Batches; n > 0 {
			views = append(views, struct{ name, path string }{"step", base + "/steps/" + strconv.Itoa(n)})
		}
		for _, v := range views {
			body, cold := get(v.path)
			var warm []time.Duration
			for range 5 {
				_, d := get(v.path)
				warm = append(warm, d)
			}
			slices.Sort(warm)
			b.ReportMetric(float64(cold.Microseconds())/1000, v.name+"-first-ms")
			b.ReportMetric(float64(warm[2].Microseconds())/1000, v.name+"-warm-ms")
			b.Logf("%-20s first %8.2f ms  warm %8.2f ms  %9d bytes", v.name, float64(cold.Microseconds())/1000, float64(warm[2].Microseconds())/1000, len(body))
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// foldSimulated folds the simulated run of shape into a new projector
// state in dir, in windows of 2,000 records, and returns how many it
// folded. With kc's
// brokers, each window is first appended to kc's facts topic and folded
// at the positions Kafka gave it.
func foldSimulated(dir, run string, shape simulate.Options, kc kafkalog.Config) (int, error) {
	log := slog.New(slog.DiscardHandler)
	db, err := pebble.Open(dir, pebbleOptions(log, dir))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	p := &Projector{o: Options{Kafka: kafkalog.Config{}}, db: db, log: log}
	src, err := simulate.NewSource(shape, run)
	if err != nil {
		return 0, err
	}
	rf := newRunFolds()
	var window []kafkalog.Message
	var w *kafkalog.Writer
	if len(kc.Brokers) > 0 {
		if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
			return 0, err
		}
		w = kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
		defer w.Close()
	}
	n := 0
	flush := func() error {
		if len(window) == 0 {
			return nil
		}
		if w != nil {
			recs := make([]kafkalog.Record, len(window))
			for i, m := range window {
				recs[i] = kafkalog.Record{Key: m.Key, Value: m.Value}
			}
			pos, err := w.Append(context.Background(), recs)
			if err != nil {
				return err
			}
			for i := range window {
				window[i].Partition, window[i].Offset = int(pos[i].Partition), pos[i].Offset
			}
		}
		batch := db.NewBatch()
		defer batch.Close()
		if _, _, err := p.foldInto(batch, rf, window); err != nil {
			return err
		}
		if err := batch.Set(offsetKey("facts", 0), binary.BigEndian.AppendUint64(nil, uint64(window[len(window)-1].Offset+1)), nil); err != nil {
			return err
		}
		window = window[:0]
		return batch.Commit(pebble.NoSync)
	}
	for ev := range src.Events() {
		v, err := events.Encode(ev)
		if err != nil {
			return n, err
		}
		window = append(window, kafkalog.Message{Key: []byte(run), Value: v, Offset: int64(n), Time: ev.At})
		n++
		if len(window) == 2000 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}
