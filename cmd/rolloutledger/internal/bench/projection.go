package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// simRun is a generated run: its events, their canonical records, and the
// same as projection records at consecutive offsets of one partition.
type simRun struct {
	run     string
	evs     []events.Event
	values  [][]byte
	records []projections.Record
}

func generate(o simulate.Options, run string) (*simRun, error) {
	plan, err := simulate.Generate(o, run)
	if err != nil {
		return nil, err
	}
	r := &simRun{run: run, evs: plan.All()}
	r.values = make([][]byte, len(r.evs))
	r.records = make([]projections.Record, len(r.evs))
	for i, ev := range r.evs {
		v, err := events.Encode(ev)
		if err != nil {
			return nil, err
		}
		// The fold sees what a reader decodes: decode the record back.
		back, err := events.Decode(v)
		if err != nil {
			return nil, err
		}
		r.values[i] = v
		r.records[i] = projections.Record{Value: v, Event: back, Offset: int64(i)}
	}
	return r, nil
}

func (e *env) foldRunOptions() simulate.Options {
	if e.o.Short {
		return simulate.Options{Seed: 5, Tasks: 12, Steps: 2, BatchGroups: 2, MaxTurns: 30}
	}
	return simulate.Options{Seed: 5, Tasks: 48, Steps: 8, BatchGroups: 16}
}

func projectionFigures(ctx context.Context, e *env) ([]*Figure, error) {
	sr, err := generate(e.foldRunOptions(), "bench-fold")
	if err != nil {
		return nil, err
	}
	n := len(sr.records)
	decode := &Figure{Name: "events.Decode, one core", Unit: "facts/s", Command: "go test -run='^$' -bench=Decode -cpu 1 ./events/ ; " + e.cmd(GroupProjection),
		Note: fmt.Sprintf("strict decode and validation of a simulated run's %d canonical records (no inline tokens), GOMAXPROCS=1", n)}
	fold := &Figure{Name: "fold, one core (no I/O)", Unit: "facts/s", Command: "go test -run='^$' -bench=Fold -cpu 1 ./projections/ ; " + e.cmd(GroupProjection),
		Note: fmt.Sprintf("projections.FoldAll over the same %d decoded facts into a MemStore, GOMAXPROCS=1", n)}
	proj := &Figure{Name: "projector service from Kafka", Unit: "facts/s", Command: e.cmd(GroupProjection),
		Note: fmt.Sprintf("projector.Run catching up on the same %d facts in a 1-partition topic (one run is one partition): read, decode, fold into Pebble, emit decisions (acks=all), synced commit per window", n)}
	for run := range e.o.Runs {
		e.log.Info("projection", "run", run+1, "facts", n)
		prev := runtime.GOMAXPROCS(1)
		t0 := time.Now()
		for _, v := range sr.values {
			if _, err := events.Decode(v); err != nil {
				runtime.GOMAXPROCS(prev)
				return nil, err
			}
		}
		decode.Runs = append(decode.Runs, float64(n)/time.Since(t0).Seconds())
		t0 = time.Now()
		_, err := projections.FoldAll(sr.run, sr.records)
		took := time.Since(t0)
		runtime.GOMAXPROCS(prev)
		if err != nil {
			return nil, err
		}
		fold.Runs = append(fold.Runs, float64(n)/took.Seconds())
		v, err := projectorCatchUp(ctx, e, sr)
		if err != nil {
			return nil, err
		}
		proj.Runs = append(proj.Runs, v)
	}
	return []*Figure{decode, fold, proj}, nil
}

// seed appends a run's records to the facts topic of kc and returns the
// positions Kafka gave them.
func seed(ctx context.Context, kc kafkalog.Config, run string, values [][]byte) ([]kafkalog.Position, error) {
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		return nil, err
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	return appendValues(ctx, w, run, values)
}

func appendValues(ctx context.Context, w *kafkalog.Writer, run string, values [][]byte) ([]kafkalog.Position, error) {
	out := make([]kafkalog.Position, 0, len(values))
	key := []byte(run)
	for i := 0; i < len(values); {
		var recs []kafkalog.Record
		size := 0
		for ; i < len(values) && len(recs) < 4096 && size < 2<<20; i++ {
			recs = append(recs, kafkalog.Record{Key: key, Value: values[i]})
			size += len(values[i])
		}
		pos, err := w.Append(ctx, recs)
		if err != nil {
			return nil, err
		}
		out = append(out, pos...)
	}
	return out, nil
}

// projectorCatchUp seeds a fresh topic with the run and times a fresh
// projector folding all of it.
func projectorCatchUp(ctx context.Context, e *env, sr *simRun) (float64, error) {
	kc := e.kafka("projector", 1)
	if _, err := seed(ctx, kc, sr.run, sr.values); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "rolloutledger-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	end := int64(len(sr.values))
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.Run(pctx) }()
	defer func() { cancel(); <-done }()
	for {
		off, err := p.Offset(0)
		if err != nil {
			return 0, err
		}
		if off >= end {
			return float64(end) / time.Since(start).Seconds(), nil
		}
		select {
		case err := <-done:
			return 0, fmt.Errorf("projector stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if time.Since(start) > 10*time.Minute {
			return 0, fmt.Errorf("projector did not catch up in 10 minutes (%d of %d)", off, end)
		}
	}
}

// sealFigures pushes simulated runs at a steady 10,000 facts/s, with
// inline tokens as a real run's turns carry them, through a stack running
// ingest, projector and API in this process; the load generator and the
// trainer stand-in long-polling for batches run in a child process of
// their own ([sealChild]), so the load's CPU is not the ledger's
// goroutines'. It measures, in the child, from Kafka's acknowledgment of
// the fact that completes a batch to the trainer holding its manifest.
func sealFigures(ctx context.Context, e *env) ([]*Figure, error) {
	const rate = 10000
	o := sealLoad{Tasks: 96, Steps: 40, BatchGroups: 4, Rate: rate, Tokens: true}
	if e.o.Short {
		o = sealLoad{Tasks: 24, Steps: 4, BatchGroups: 4, Rate: rate, Tokens: true}
	}
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("simulate (tasks %d, steps %d, batch_groups %d, inline tokens) pushed at %d facts/s over HTTP from a child process into a stack (ingest, projector, api) in the bench's process; from Kafka's ack of the batch's watermark fact to GET .../batches/next returning it to the child's trainer (long poll: includes one HTTP round trip), which then reads the samples as Arrow IPC", o.Tasks, o.Steps, o.BatchGroups, rate)
	p50 := &Figure{Name: "seal latency p50 at 10,000 facts/s", Unit: "ms", Command: e.cmd(GroupSeal) + " ; go test -run='^$' -bench=SealLatency -benchtime=1x ./services/stack/", Note: note}
	p99 := &Figure{Name: "seal latency p99 at 10,000 facts/s", Unit: "ms", Command: p50.Command}
	achieved := &Figure{Name: "achieved load during the seal runs", Unit: "facts/s", Command: p50.Command}
	for run := range e.o.Runs {
		e.log.Info("seal latency", "run", run+1)
		kc := e.kafka("seal", 12)
		dir, err := os.MkdirTemp("", "rolloutledger-bench-")
		if err != nil {
			return nil, err
		}
		s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: dir,
			Only: []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		lo := o
		lo.URL, lo.Seed = s.URL(), uint64(100+run)
		res, err := sealChildRun(ctx, exe, lo)
		s.Shutdown(context.Background())
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		lat := res.LatenciesMS
		if len(lat) == 0 {
			return nil, fmt.Errorf("no batch latency measured (%d steps)", res.Steps)
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		p50.Runs = append(p50.Runs, q(0.5))
		p99.Runs = append(p99.Runs, q(0.99))
		achieved.Runs = append(achieved.Runs, float64(res.Events)/res.Seconds)
		p99.Note = fmt.Sprintf("%d batches per run; p99 of so few batches is close to their maximum", len(lat))
	}
	p99.link = func(map[string]*Figure) { p99.goalAtMost(50, "<= 50 ms") }
	return []*Figure{p50, p99, achieved}, nil
}

// sealChild is [ChildEnv]'s value for the seal figure's load generator;
// childSealLoad holds its [sealLoad] as JSON.
const (
	sealChild     = "seal-load"
	childSealLoad = "ROLLOUTLEDGER_BENCH_SEAL_LOAD"
)

// sealChildTimeout bounds one seal load child: on a loaded machine the
// load falls far short of the rate asked, and a run takes minutes.
const sealChildTimeout = 30 * time.Minute

// sealLoad is what the seal figure's child pushes, and where.
type sealLoad struct {
	URL         string  `json:"url"`
	Seed        uint64  `json:"seed"`
	Tasks       int     `json:"tasks"`
	Steps       int     `json:"steps"`
	BatchGroups int     `json:"batch_groups"`
	Rate        float64 `json:"rate"`
	Tokens      bool    `json:"tokens"`
}

// sealResult is the child's one line of output.
type sealResult struct {
	// LatenciesMS are, per batch whose watermark fact the child saw
	// acknowledged, the time from that ack to the trainer holding the
	// batch.
	LatenciesMS []float64 `json:"latencies_ms"`
	Steps       int       `json:"steps"`
	Events      int       `json:"events"`
	Seconds     float64   `json:"seconds"`
}

// sealChildRun runs the load generator in a child process and returns
// what it measured.
func sealChildRun(ctx context.Context, exe string, o sealLoad) (sealResult, error) {
	spec, err := json.Marshal(o)
	if err != nil {
		return sealResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, sealChildTimeout)
	defer cancel()
	c := exec.CommandContext(cctx, exe, "bench")
	c.Env = append(os.Environ(), ChildEnv+"="+sealChild, childSealLoad+"="+string(spec))
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return sealResult{}, fmt.Errorf("seal load child: %v\n%s", err, tail([]byte(stderr.String())))
	}
	var res sealResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return sealResult{}, fmt.Errorf("seal load child: its output: %v\n%s", err, tail(out))
	}
	return res, nil
}

// runSealChild is the seal figure's child: it pushes the load its
// environment describes, with the trainer stand-in, and prints a
// [sealResult].
func runSealChild(ctx context.Context, enc *json.Encoder) error {
	var o sealLoad
	if err := json.Unmarshal([]byte(os.Getenv(childSealLoad)), &o); err != nil {
		return fmt.Errorf("%s: %w", childSealLoad, err)
	}
	var mu sync.Mutex
	acked := map[projections.LogPosition]time.Time{}
	// The trainer reads its samples as Arrow IPC, as the SDK does.
	so := simulate.Options{URL: o.URL, Seed: o.Seed, Tasks: o.Tasks, Steps: o.Steps, BatchGroups: o.BatchGroups,
		Rate: o.Rate, Tokens: o.Tokens, Trainer: true, TrainerArrow: true}
	so.OnAck = func(acks []simulate.Ack) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range acks {
			acked[projections.LogPosition{Partition: a.Partition, Offset: a.Offset}] = a.At
		}
	}
	res, err := simulate.Run(ctx, so)
	if err != nil {
		return err
	}
	out := sealResult{Steps: len(res.Steps), Events: res.Events, Seconds: res.Duration.Seconds()}
	for _, st := range res.Steps {
		if at, ok := acked[st.Watermark]; ok {
			out.LatenciesMS = append(out.LatenciesMS, float64(st.Received.Sub(at).Microseconds())/1000)
		}
	}
	return enc.Encode(out)
}
