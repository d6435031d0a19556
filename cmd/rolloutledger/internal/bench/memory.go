package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// ChildEnv names the environment variable that turns a process into the
// memory figure's child: a projector alone, so its resident memory is the
// projector's. Its value is "projector-rss"; the child's settings follow in
// the variables below.
const ChildEnv = "ROLLOUTLEDGER_BENCH_CHILD"

const (
	childBrokers = "ROLLOUTLEDGER_BENCH_BROKERS"
	childPrefix  = "ROLLOUTLEDGER_BENCH_PREFIX"
	childDir     = "ROLLOUTLEDGER_BENCH_DIR"
	childEnd     = "ROLLOUTLEDGER_BENCH_END"
)

// sample is one line of the child's output.
type sample struct {
	Facts   int64   `json:"facts"`
	RSSMiB  float64 `json:"rss_mib"`
	HeapMiB float64 `json:"heap_mib"`
}

// IsChild reports whether this process was started as the memory figure's
// child.
func IsChild() bool {
	v := os.Getenv(ChildEnv)
	return v == "projector-rss" || v == replayChild || v == sealChild || v == generatorChild || v == exportChild
}

// RunChild is the memory figure's child: it runs a projector over the
// one-partition facts topic named by its environment until it folded the
// given number of facts, printing its resident memory at every tenth.
func RunChild(ctx context.Context, out io.Writer) error {
	if os.Getenv(ChildEnv) == replayChild {
		return runReplayChild(ctx, json.NewEncoder(out))
	}
	if os.Getenv(ChildEnv) == generatorChild {
		return runGeneratorChild(json.NewEncoder(out))
	}
	if os.Getenv(ChildEnv) == sealChild {
		return runSealChild(ctx, json.NewEncoder(out))
	}
	if os.Getenv(ChildEnv) == exportChild {
		return runExportChild(ctx, json.NewEncoder(out))
	}
	end, err := strconv.ParseInt(os.Getenv(childEnd), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", childEnd, err)
	}
	kc := kafkalog.Config{Brokers: strings.Split(os.Getenv(childBrokers), ","), TopicPrefix: os.Getenv(childPrefix), Partitions: 1}
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: os.Getenv(childDir), Partitions: []int{0}})
	if err != nil {
		return err
	}
	defer p.Close()
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	defer func() { cancel(); <-done }()
	enc := json.NewEncoder(out)
	rss, heap := memNow()
	if err := enc.Encode(sample{0, rss, heap}); err != nil {
		return err
	}
	next := end / 10
	for {
		off, err := p.Offset(0)
		if err != nil {
			return err
		}
		for off >= next && next <= end {
			rss, heap := memNow()
			if err := enc.Encode(sample{off, rss, heap}); err != nil {
				return err
			}
			if next == end {
				return nil
			}
			next = min(end, next+end/10)
		}
		select {
		case err := <-done:
			return fmt.Errorf("projector stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// memNow returns the resident set size and the Go heap in use after a
// collection, in MiB.
func memNow() (rss, heap float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procstatus.MiB(procstatus.RSS()), procstatus.MiB(ms.HeapInuse)
}

func memoryFigures(ctx context.Context, e *env) ([]*Figure, error) {
	type config struct {
		batchGroups, steps int
	}
	// batch_groups 256 (~2,000 attempts in flight, FireFlash's) would seal
	// a batch.sealed record of 4.3 MB, over what the decisions writer can
	// produce (BENCHMARKS.md): 128 is the largest that runs.
	configs := []config{{4, 85}, {16, 21}, {64, 5}, {128, 3}}
	long := config{16, 84}
	tasks := 200
	if e.o.Short {
		configs, long, tasks = []config{{2, 1}}, config{2, 2}, 24
	}
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	cmd := e.cmd(GroupMemory)
	var figs []*Figure
	for _, c := range configs {
		o := simulate.Options{Seed: 11, Tasks: tasks, Steps: c.steps, BatchGroups: c.batchGroups, MaxTurns: 120}
		samples, facts, err := childRun(ctx, e, exe, o)
		if err != nil {
			return nil, err
		}
		peak := 0.0
		for _, s := range samples {
			peak = max(peak, s.RSSMiB)
		}
		// In flight: the simulator's engines, 1.25 per attempt of a batch
		// (up to 2,000), at group_size 8.
		inflight := min(2000, c.batchGroups*8*5/4) / 8
		figs = append(figs, &Figure{Name: fmt.Sprintf("projector RSS, ~%d groups in flight", inflight), Unit: "MiB", Runs: []float64{peak}, Command: cmd,
			Note: fmt.Sprintf("peak resident memory of a projector process alone folding a %d-fact run with batch_groups %d (~%d attempts in flight); Go heap after GC at the end %.1f MiB; one run", facts, c.batchGroups, inflight*8, samples[len(samples)-1].HeapMiB)})
	}
	o := simulate.Options{Seed: 12, Tasks: tasks, Steps: long.steps, BatchGroups: long.batchGroups, MaxTurns: 120}
	samples, facts, err := childRun(ctx, e, exe, o)
	if err != nil {
		return nil, err
	}
	var mid sample
	for _, s := range samples {
		if s.Facts <= int64(facts)/2 {
			mid = s
		}
	}
	last := samples[len(samples)-1]
	var curve []string
	for _, s := range samples[1:] {
		curve = append(curve, fmt.Sprintf("%dk:%.0f", s.Facts/1000, s.RSSMiB))
	}
	growth := &Figure{Name: "projector RSS growth, second half of a long run", Unit: "MiB", Runs: []float64{last.RSSMiB - mid.RSSMiB}, Command: cmd,
		Note: fmt.Sprintf("%d-fact run, batch_groups %d: RSS %.0f MiB at %d facts, %.0f MiB at %d (heap after GC %.1f -> %.1f MiB); RSS by facts folded: %s", facts, long.batchGroups, mid.RSSMiB, mid.Facts, last.RSSMiB, last.Facts, mid.HeapMiB, last.HeapMiB, strings.Join(curve, " "))}
	limit := 0.1 * mid.RSSMiB
	growth.link = func(map[string]*Figure) {
		growth.goalAtMost(limit, "flat (<= 10% of RSS at half)")
	}
	return append(figs, growth), nil
}

// childRun seeds a fresh one-partition topic with a run and folds it in a
// child projector process, returning the child's samples.
func childRun(ctx context.Context, e *env, exe string, o simulate.Options) ([]sample, int, error) {
	sr, err := generateValues(o, fmt.Sprintf("bench-memory-%d", o.BatchGroups))
	if err != nil {
		return nil, 0, err
	}
	kc := e.kafka("memory", 1)
	if _, err := seed(ctx, kc, sr.run, sr.values); err != nil {
		return nil, 0, err
	}
	dir, err := os.MkdirTemp("", "rolloutledger-bench-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	e.log.Info("memory", "batch_groups", o.BatchGroups, "facts", len(sr.values))
	// A child that stops making progress fails the figure, not the run.
	cctx, cancel := context.WithTimeout(ctx, childTimeout)
	defer cancel()
	c := exec.CommandContext(cctx, exe, "bench")
	c.Env = append(os.Environ(), ChildEnv+"=projector-rss", childBrokers+"="+strings.Join(e.o.Brokers, ","),
		childPrefix+"="+kc.TopicPrefix, childDir+"="+dir, childEnd+"="+strconv.Itoa(len(sr.values)))
	var stderr strings.Builder
	c.Stderr = &stderr
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := c.Start(); err != nil {
		return nil, 0, err
	}
	var samples []sample
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var s sample
		if json.Unmarshal(sc.Bytes(), &s) == nil {
			samples = append(samples, s)
		}
	}
	if err := c.Wait(); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: no result within %s (%d of 11 samples; last at %d of %d facts)", err, childTimeout, len(samples), lastFacts(samples), len(sr.values))
		}
		return nil, 0, fmt.Errorf("memory child, batch_groups %d: %v\n%s", o.BatchGroups, err, tail([]byte(stderr.String())))
	}
	if len(samples) < 2 {
		return nil, 0, fmt.Errorf("memory child reported %d samples\n%s", len(samples), tail([]byte(stderr.String())))
	}
	return samples, len(sr.values), nil
}

// childTimeout bounds one memory child.
const childTimeout = 5 * time.Minute

func lastFacts(s []sample) int64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Facts
}

// generateValues is generate without the decoded records.
func generateValues(o simulate.Options, run string) (*simRun, error) {
	plan, err := simulate.Generate(o, run)
	if err != nil {
		return nil, err
	}
	sr := &simRun{run: run}
	for _, ev := range plan.All() {
		v, err := events.Encode(ev)
		if err != nil {
			return nil, err
		}
		sr.values = append(sr.values, v)
	}
	return sr, nil
}
