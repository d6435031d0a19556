package faults_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The soak test is outside the normal test run: it runs only with -soak.
//
//	go test ./services/stack/faults/ -v -run TestSoak -soak=10m -timeout=0
var (
	soakFor   = flag.Duration("soak", 0, "run TestSoak for this long (0: skip it)")
	soakRate  = flag.Float64("soak-rate", 1500, "TestSoak's offered load in facts per second, over all runs (FireFlash sustains a few hundred)")
	soakRuns  = flag.Int("soak-runs", 6, "TestSoak's concurrent simulated runs")
	soakEvery = flag.Duration("soak-sample", 5*time.Second, "TestSoak's sampling interval")
	// With -soak-tokens the turns are a real run's: inline token ids and
	// log-probs (about 10 bytes a token; the simulator's turns have a
	// median of 380 completion tokens) and text, instead of counts alone.
	soakTokens = flag.Bool("soak-tokens", false, "TestSoak's turns carry inline token ids, log-probs and text, sized as a real run's")
)

// soakSample is one observation of the ledger under load.
type soakSample struct {
	at                 time.Duration
	acked              int64
	projLag, sinkLag   int64
	rssBytes, heapUsed uint64
	// kafkaRSS is the broker's JVM's resident set; pgPSS the PostgreSQL
	// processes' proportional set (their shared buffers counted once).
	kafkaRSS, pgPSS uint64
	// fetched counts the bytes of samples the trainers read, and fetchTime
	// the time their fetches took, since the start.
	fetched, fetches int64
	fetchTime        time.Duration
	warnings, errs   int64
	// viewTook is how long the explorer took to show the newest attempt
	// of the newest run (its turns' token arrays read back from the facts
	// log); viewed is false when there was none yet.
	viewTook time.Duration
	viewed   bool
}

// A sustained load of several simulated runs at once, each with a live
// trainer, through ingest, the projector and the Postgres sink in one
// process against the shared Kafka and Postgres. Every few seconds it
// samples how far the projector and the sink are behind the log, the
// process's RSS and Go heap, the warnings and errors logged, and how long
// the explorer takes to show the newest attempt (its token arrays read
// back from the facts log). It fails when a push fails, an error is
// logged, an explorer view fails, or the services do not catch up
// within two minutes of the load stopping; the summary gives the figures.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("soak test: run with -soak=10m")
	}
	kc := testenv.RealKafka(t)
	kc.Partitions = 12
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	counter := &logCounter{}
	logger := slog.New(&countingHandler{c: counter, h: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})})
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: url,
		PostgresSchema: schema, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	conn := connect(t, url)

	var acked, fetched, fetches, fetchNanos atomic.Int64
	var pushErrs, viewErrs []error
	var mu sync.Mutex
	var newest string // the run started last
	// What each run had acknowledged and trained, to find in the ledger
	// at the end.
	type runLoad struct {
		acked atomic.Int64
		steps int
	}
	loads := map[string]*runLoad{}
	load, stopLoad := context.WithTimeout(ctx, *soakFor)
	defer stopLoad()
	var lanes sync.WaitGroup
	runs := 0
	for lane := range *soakRuns {
		lanes.Go(func() {
			for n := 0; load.Err() == nil; n++ {
				rl := &runLoad{}
				o := simulate.Options{
					URL: s.URL(), Seed: uint64(1000*lane + n), Run: fmt.Sprintf("soak-%d-%d", lane, n),
					Tasks: 48, Steps: 6, MaxTurns: 80, Trainer: true, Workers: 2, EventsPerRequest: 32,
					Tokens: *soakTokens, Text: *soakTokens,
					Rate: *soakRate / float64(*soakRuns),
					OnAck: func(a []simulate.Ack) {
						acked.Add(int64(len(a)))
						rl.acked.Add(int64(len(a)))
					},
					// The trainers fetch as real ones do, as Arrow.
					TrainerArrow: true,
					TrainerFetch: func(f simulate.Fetch) {
						fetched.Add(f.Bytes)
						fetches.Add(1)
						fetchNanos.Add(int64(f.Took))
					},
				}
				mu.Lock()
				loads[o.Run] = rl
				newest = o.Run
				mu.Unlock()
				res, err := simulate.Run(load, o)
				mu.Lock()
				rl.steps = len(res.Steps)
				runs++
				if err != nil && load.Err() == nil {
					pushErrs = append(pushErrs, fmt.Errorf("%s: %w", o.Run, err))
				}
				mu.Unlock()
			}
		})
	}

	sample := func(start time.Time) soakSample {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		smp := soakSample{at: time.Since(start), acked: acked.Load(), rssBytes: procstatus.RSS(),
			warnings: counter.warnings.Load(), errs: counter.errors.Load(),
			fetched: fetched.Load(), fetches: fetches.Load(), fetchTime: time.Duration(fetchNanos.Load())}
		smp.kafkaRSS, smp.pgPSS = serviceMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		smp.heapUsed = ms.HeapInuse
		ends, err := pgsink.EndOffsets(sctx, kc)
		if err != nil {
			t.Logf("end offsets: %v", err)
			return smp
		}
		for tp, end := range ends {
			if tp.Topic != kc.FactsTopic() {
				continue
			}
			off, err := s.Projector().Offset(tp.Partition)
			if err == nil && off < end {
				smp.projLag += end - off
			}
		}
		if smp.sinkLag, err = pgsink.Behind(sctx, conn, schema, ends); err != nil {
			t.Logf("sink lag: %v", err)
		}
		mu.Lock()
		run := newest
		mu.Unlock()
		if run != "" {
			smp.viewTook, smp.viewed, err = viewNewestAttempt(sctx, s.URL(), run)
			if err != nil {
				viewErrs = append(viewErrs, err)
			}
		}
		return smp
	}
	start := time.Now()
	var samples []soakSample
	fmt.Printf("%8s %10s %9s %10s %10s %9s %9s %9s %9s %7s %9s %5s %5s\n", "t", "facts", "facts/s", "proj_lag", "sink_lag", "rss_MiB", "heap_MiB",
		"kafka_MiB", "pg_MiB", "fetches", "fetch_MB/s", "warn", "err")
	tick := time.NewTicker(*soakEvery)
	defer tick.Stop()
	done := make(chan struct{})
	go func() { lanes.Wait(); close(done) }()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
		}
		smp := sample(start)
		rate, fetchRate := 0.0, 0.0
		if n := len(samples); n > 0 {
			prev := samples[n-1]
			rate = float64(smp.acked-prev.acked) / (smp.at - prev.at).Seconds()
			fetchRate = fetchMBps(prev, smp)
		}
		samples = append(samples, smp)
		fmt.Printf("%8s %10d %9.0f %10d %10d %9.1f %9.1f %9.1f %9.1f %7d %9.1f %5d %5d\n", smp.at.Round(time.Second), smp.acked, rate,
			smp.projLag, smp.sinkLag, procstatus.MiB(smp.rssBytes), procstatus.MiB(smp.heapUsed), procstatus.MiB(smp.kafkaRSS), procstatus.MiB(smp.pgPSS), smp.fetches, fetchRate,
			smp.warnings, smp.errs)
	}
	loadTime := time.Since(start)

	// The load has stopped: both consumers must catch up.
	caught := time.Now()
	ends, err := pgsink.EndOffsets(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 2*time.Minute, "the projector catches up after the load", func() bool {
		for tp, end := range ends {
			if tp.Topic == kc.FactsTopic() {
				if off, err := s.Projector().Offset(tp.Partition); err != nil || off < end {
					return false
				}
			}
		}
		return true
	})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.Sink().WaitStored(wctx, ends); err != nil {
		t.Fatal(err)
	}
	catchUp := time.Since(caught)

	// Nothing acknowledged was lost: every run's facts folded (duplicates
	// included) are at least what its rollouts had acknowledged and its
	// trainer reported (two facts a step).
	var want, folded int64
	var short []string
	mu.Lock()
	for run, rl := range loads {
		folded64, err := simulate.FactsFolded(ctx, s.URL(), run, "")
		if err != nil {
			t.Errorf("status of %s: %v", run, err)
			continue
		}
		n := int64(folded64)
		w := rl.acked.Load() + 2*int64(rl.steps)
		want, folded = want+w, folded+n
		if n < w {
			short = append(short, fmt.Sprintf("%s: %d folded of %d acknowledged", run, n, w))
		}
	}
	mu.Unlock()
	if len(short) > 0 {
		t.Errorf("facts lost in %d runs: %v", len(short), short)
	}
	// Summary.
	if len(samples) == 0 {
		t.Fatal("no samples: the soak was shorter than one sampling interval")
	}
	last := samples[len(samples)-1]
	var projLags, sinkLags []int64
	for _, smp := range samples {
		projLags = append(projLags, smp.projLag)
		sinkLags = append(sinkLags, smp.sinkLag)
	}
	window := max(1, len(samples)/5)
	first, lastFifth := samples[:window], samples[len(samples)-window:]
	rssOf := func(s soakSample) uint64 { return s.rssBytes }
	kafkaOf := func(s soakSample) uint64 { return s.kafkaRSS }
	pgOf := func(s soakSample) uint64 { return s.pgPSS }
	fetchFirst := fetchMBps(samples[0], first[len(first)-1])
	fetchLast := fetchMBps(lastFifth[0], last)
	var facts int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "turns"}.Sanitize()).Scan(&facts); err != nil {
		t.Fatal(err)
	}
	var views []float64
	for _, smp := range samples {
		if smp.viewed {
			views = append(views, float64(smp.viewTook.Microseconds())/1000)
		}
	}
	slices.Sort(views)
	viewQ := func(q float64) float64 {
		if len(views) == 0 {
			return 0
		}
		return views[min(len(views)-1, int(q*float64(len(views))))]
	}
	fmt.Printf(`
soak summary
  load:        %v, %d runs in %d lanes, offered %.0f facts/s, tokens %v
  acknowledged %d facts, %.0f facts/s on average
  projector:   lag max %d, median %d, last %d records
  pgsink:      lag max %d, median %d, last %d records (facts and decisions)
  caught up:   both %v after the load stopped
  rss:         mean of the first fifth %.1f MiB, of the last fifth %.1f MiB, max %.1f MiB (load generator included)
  kafka rss:   mean of the first fifth %.1f MiB, of the last fifth %.1f MiB
  pg memory:   proportional set, mean of the first fifth %.1f MiB, of the last fifth %.1f MiB
  fetches:     %d batches, %.1f MB read; %.1f MB/s of fetch time over the first fifth, %.1f over the last
  facts:       %d folded of %d acknowledged (%d more: writes whose answer the end of the load cut off, or retried produces), in %d runs
  go heap:     last %.1f MiB
  log:         %d warnings, %d errors; %d failed pushes
  postgres:    %d turn rows stored
  explorer:    %d views of the newest attempt, p50 %.1f ms, p99 %.1f ms, max %.1f ms; %d failed
`, loadTime.Round(time.Second), runs, *soakRuns, *soakRate, *soakTokens, last.acked, float64(last.acked)/loadTime.Seconds(),
		slices.Max(projLags), median(projLags), last.projLag,
		slices.Max(sinkLags), median(sinkLags), last.sinkLag, catchUp.Round(time.Millisecond),
		meanOf(first, rssOf), meanOf(lastFifth, rssOf), procstatus.MiB(maxRSS(samples)),
		meanOf(first, kafkaOf), meanOf(lastFifth, kafkaOf), meanOf(first, pgOf), meanOf(lastFifth, pgOf),
		last.fetches, float64(last.fetched)/1e6, fetchFirst, fetchLast,
		folded, want, folded-want, len(loads), procstatus.MiB(last.heapUsed),
		counter.warnings.Load(), counter.errors.Load(), len(pushErrs), facts,
		len(views), viewQ(0.5), viewQ(0.99), viewQ(1), len(viewErrs))
	for _, w := range counter.lastMessages() {
		fmt.Println("  logged:", w)
	}
	if len(pushErrs) > 0 {
		t.Errorf("%d pushes failed, the first: %v", len(pushErrs), pushErrs[0])
	}
	if n := counter.errors.Load(); n > 0 {
		t.Errorf("%d errors logged", n)
	}
	if len(viewErrs) > 0 {
		t.Errorf("%d explorer views failed, the first: %v", len(viewErrs), viewErrs[0])
	}
}

// viewNewestAttempt asks the explorer, as a user would during the load,
// for the newest attempt of run, and returns how long its view took; ok
// is false when the run has no attempt yet.
func viewNewestAttempt(ctx context.Context, base, run string) (took time.Duration, ok bool, err error) {
	get := func(path string, v any) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return resp.StatusCode, err
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, body)
		}
		return resp.StatusCode, json.Unmarshal(body, v)
	}
	list := "/v1/runs/" + run + "/explore/attempts?limit=1"
	var page struct {
		Attempts []struct {
			Attempt string `json:"attempt"`
		} `json:"attempts"`
		Total uint64 `json:"total"`
	}
	code, err := get(list, &page)
	if code == http.StatusNotFound {
		return 0, false, nil // the projector has not folded the run's first fact yet
	}
	if err != nil {
		return 0, false, err
	}
	if page.Total > 1 {
		if _, err := get(list+"&cursor="+strconv.FormatUint(page.Total-1, 10), &page); err != nil {
			return 0, false, err
		}
	}
	if len(page.Attempts) == 0 {
		return 0, false, nil
	}
	var view struct {
		Turns []json.RawMessage `json:"turn_list"`
	}
	start := time.Now()
	if _, err := get("/v1/runs/"+run+"/explore/attempts/"+page.Attempts[0].Attempt, &view); err != nil {
		return 0, false, err
	}
	return time.Since(start), true, nil
}

// fetchMBps is the trainers' fetch rate between two samples: megabytes
// read per second spent fetching.
func fetchMBps(a, b soakSample) float64 {
	if b.fetchTime <= a.fetchTime {
		return 0
	}
	return float64(b.fetched-a.fetched) / 1e6 / (b.fetchTime - a.fetchTime).Seconds()
}

// serviceMemory is the Kafka broker's resident set (its JVM's) and the
// PostgreSQL processes' proportional set size, from /proc; 0 for one not
// found.
func serviceMemory() (kafka, pg uint64) {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid := d.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		switch name := strings.TrimSpace(string(comm)); {
		case name == "postgres":
			pg += procstatus.Field("/proc/"+pid+"/smaps_rollup", "Pss")
		case name == "java":
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			if strings.Contains(string(cmdline), "kafka.Kafka") {
				kafka += procstatus.Field("/proc/"+pid+"/status", "VmRSS")
			}
		}
	}
	return kafka, pg
}

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// meanOf is the mean of one of the samples' byte figures, in MiB.
func meanOf(ss []soakSample, f func(soakSample) uint64) float64 {
	var sum uint64
	for _, s := range ss {
		sum += f(s)
	}
	return procstatus.MiB(sum / uint64(len(ss)))
}

func maxRSS(ss []soakSample) uint64 {
	var m uint64
	for _, s := range ss {
		m = max(m, s.rssBytes)
	}
	return m
}

// logCounter counts the warnings and errors logged through its handlers
// and keeps the last few messages.
type logCounter struct {
	warnings, errors atomic.Int64
	mu               sync.Mutex
	last             []string
}

func (c *logCounter) lastMessages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.last)
}

// countingHandler passes records on to h and counts them in c.
type countingHandler struct {
	c *logCounter
	h slog.Handler
}

func (h *countingHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		h.c.errors.Add(1)
	case r.Level >= slog.LevelWarn:
		h.c.warnings.Add(1)
	}
	h.c.mu.Lock()
	h.c.last = append(h.c.last, r.Level.String()+" "+r.Message)
	if len(h.c.last) > 5 {
		h.c.last = h.c.last[1:]
	}
	h.c.mu.Unlock()
	return h.h.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{c: h.c, h: h.h.WithAttrs(as)}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{c: h.c, h: h.h.WithGroup(name)}
}
