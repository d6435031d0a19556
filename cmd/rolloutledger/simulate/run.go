package simulate

import (
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// Result reports a finished (or failed) Run.
type Result struct {
	// Run is the run id the events carry.
	Run string
	// Events counts the events the ledger acknowledged.
	Events int
	// Requests counts the acknowledged POSTs; Retries the extra tries
	// answered by a retryable status or lost in transport.
	Requests int
	Retries  int
	// Duration is the wall time spent pushing.
	Duration time.Duration
	// ByType counts the plan's events by type.
	ByType map[events.Type]int
	// Steps are the trainer's steps, with Options.Trainer.
	Steps []TrainerStep
}

// windowSize is how many events of the merged virtual-time order are
// released at once: two full requests per worker, or, for runs with many
// engines, an eighth of a full request per stream, so requests do not
// shrink to a couple of events each.
func windowSize(o Options, p *Plan) int {
	return max(2*o.Workers*o.EventsPerRequest, len(p.Streams)*o.EventsPerRequest/8)
}

// Run generates the run described by o (see [Generate]) and pushes it to
// the ledger at o.URL (see [Push]).
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	run := o.Run
	if run == "" {
		run = fmt.Sprintf("sim-%d-%08x", o.Seed, rand.Uint32())
	}
	// Generated as it is pushed: a run of any length in flat memory.
	src, err := NewSource(o, run)
	if err != nil {
		return Result{Run: run}, err
	}
	if !o.Trainer {
		return pushSource(ctx, o, src, nil)
	}
	pushed := make(chan struct{})
	var published, acknowledged atomic.Int64
	type trained struct {
		steps []TrainerStep
		err   error
	}
	done := make(chan trained, 1)
	go func() {
		steps, err := Train(ctx, TrainerOptions{
			URL: o.URL, Run: run, Steps: o.withDefaults().Steps, Pushed: pushed,
			Seed: o.Seed, Token: o.Token, Client: o.Client, Logger: o.Logger, Published: &published,
			Acknowledged: &acknowledged, Arrow: o.TrainerArrow, OnFetch: o.TrainerFetch,
		})
		done <- trained{steps, err}
	}()
	res, err := pushSource(ctx, o, src, &published)
	acknowledged.Store(int64(res.Events))
	close(pushed)
	t := <-done
	res.Steps = t.steps
	res.Events += 2 * len(t.steps) // each step's gradient.applied and policy.published
	if err != nil {
		return res, err
	}
	return res, t.err
}

// Push sends a generated plan to the ledger at o.URL; of o it uses only the
// transport fields (URL, Workers, EventsPerRequest, Token, Client, Logger).
// The producers' streams are pushed concurrently by Workers goroutines,
// each stream's events in order (a stream's next request waits for the
// previous one's 200), and roughly in virtual-time order across streams:
// the run is cut into windows of consecutive events of [Plan.All], and a
// window is released once the previous one is acknowledged. The
// run.started event goes first, alone, so the run exists before anything
// refers to it.
func Push(ctx context.Context, o Options, plan *Plan) (Result, error) {
	return push(ctx, o, plan, nil)
}

func push(ctx context.Context, o Options, plan *Plan, published *atomic.Int64) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	o = o.withDefaults()
	res := Result{Run: plan.Run, ByType: plan.ByType()}
	if have, want := plan.batchedGroups(), plan.Options.Steps*plan.Options.BatchGroups; have < want {
		o.Logger.Warn("simulate: too few usable train groups for the steps asked (too few admitted tasks, or too many failures)",
			"run", plan.Run, "groups", have, "want", want)
	}
	p := newPusher(o)
	p.published = published
	o.Logger.Info("simulate: pushing run", "run", plan.Run, "url", o.URL, "events", plan.Len(),
		"streams", len(plan.Streams), "workers", o.Workers, "seed", plan.Options.Seed)
	start := time.Now()
	err := p.pushPlan(ctx, plan)
	res.Duration = time.Since(start)
	res.Events, res.Requests, res.Retries = int(p.events.Load()), int(p.requests.Load()), int(p.retries.Load())
	if err != nil {
		o.Logger.Error("simulate: run failed", "run", plan.Run, "events", res.Events, "err", err)
		return res, err
	}
	o.Logger.Info("simulate: run pushed", "run", plan.Run, "events", res.Events, "requests", res.Requests,
		"retries", res.Retries, "duration", res.Duration)
	return res, nil
}

// unit is a piece of one stream that one worker sends in order.
type unit struct {
	stream string
	events []events.Event
}

// windows cuts the plan into the units of each window. Windows are runs of
// size consecutive events of the merged order; since that order keeps each
// stream's, a stream's units in window w precede its units in window w+1.
// The first window is run.started alone.
//
// With byVersion, a window also ends before the first turn planned at a
// newer policy version than any before it, so everything that seals batch v
// is sent before any turn planned at version v: pacing against a live
// trainer then never waits on facts of its own window.
func windows(p *Plan, size int, byVersion bool) [][]unit {
	refs := p.order()
	if len(refs) == 0 {
		return nil
	}
	var out [][]unit
	var seen int64
	for lo := 0; lo < len(refs); {
		hi := min(lo+size, len(refs))
		if lo == 0 {
			hi = 1
		}
		if byVersion {
			for i := lo; i < hi; i++ {
				r := refs[i]
				t, ok := p.Streams[r.stream].Events[r.pos].Data.(*events.TurnGenerated)
				if !ok || newestVersion(t) <= seen {
					continue
				}
				seen = newestVersion(t)
				if i > lo {
					hi = i
					break
				}
			}
		}
		// Each stream's events in this window are contiguous in it.
		span := map[int][2]int{}
		var order []int
		for _, r := range refs[lo:hi] {
			s, ok := span[r.stream]
			if !ok {
				order = append(order, r.stream)
				s = [2]int{r.pos, r.pos}
			}
			s[1] = r.pos + 1
			span[r.stream] = s
		}
		w := make([]unit, 0, len(order))
		for _, s := range order {
			st := p.Streams[s]
			w = append(w, unit{stream: st.Producer, events: st.Events[span[s][0]:span[s][1]]})
		}
		out = append(out, w)
		lo = hi
	}
	return out
}

func (p *pusher) pushPlan(ctx context.Context, plan *Plan) error {
	return p.pushWindows(ctx, slices.Values(windows(plan, windowSize(p.o, plan), p.published != nil)))
}

// pushWindows sends each window's units with the workers, a window once
// the previous one is acknowledged.
func (p *pusher) pushWindows(ctx context.Context, wins iter.Seq[[]unit]) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	units := make(chan unit)
	var done sync.WaitGroup // one per unit of the current window
	var workers sync.WaitGroup
	for range p.o.Workers {
		workers.Go(func() {
			for u := range units {
				if ctx.Err() == nil {
					if err := p.sendUnit(ctx, u); err != nil {
						cancel(err)
					}
				}
				done.Done()
			}
		})
	}
	defer func() {
		close(units)
		workers.Wait()
	}()
	start, released, i := time.Now(), 0, 0
	for w := range wins {
		i++
		if err := p.pace(ctx, w); err != nil {
			return err
		}
		if p.o.Rate > 0 {
			for _, u := range w {
				released += len(u.events)
			}
			due := start.Add(time.Duration(float64(released) / p.o.Rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Until(due)):
			}
		}
		done.Add(len(w))
		for _, u := range w {
			units <- u
		}
		done.Wait()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		p.o.Logger.Debug("simulate: window acknowledged", "window", i, "events", p.events.Load())
	}
	return nil
}

// paceWait bounds how long a window waits for the live trainer.
const paceWait = 5 * time.Second

// pace holds a window whose turns were planned at a policy version the live
// trainer has not published yet, for at most paceWait. The plan's virtual
// timeline fixes how fast rollouts run against training; pacing replays that
// ratio against a real trainer. When the trainer falls further behind, the
// window goes anyway and its turns report the newest published version
// (capVersions): rollouts never stall on the trainer.
func (p *pusher) pace(ctx context.Context, w []unit) error {
	if p.published == nil {
		return nil
	}
	var want int64
	for _, u := range w {
		for _, ev := range u.events {
			if t, ok := ev.Data.(*events.TurnGenerated); ok {
				want = max(want, newestVersion(t))
			}
		}
	}
	deadline := time.Now().Add(paceWait)
	for p.published.Load() < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// pusher sends chunks of events and counts what happened.
type pusher struct {
	o        Options
	endpoint string
	client   *http.Client
	trace    string // W3C trace id shared by the run's requests
	// published, when set, is the newest policy version a live trainer
	// has published; turns never claim a newer one (see capVersions).
	published *atomic.Int64

	events, requests, retries atomic.Int64
}

func newPusher(o Options) *pusher {
	p := &pusher{o: o, endpoint: strings.TrimRight(o.URL, "/") + "/v1/events", client: o.Client}
	if p.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = o.Workers
		p.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	p.trace = fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	return p
}

// newestVersion is the policy version of a turn's last tokens.
func newestVersion(t *events.TurnGenerated) int64 {
	return t.VersionSegments[len(t.VersionSegments)-1].PolicyVersion
}
