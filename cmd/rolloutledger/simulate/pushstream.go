package simulate

import (
	"context"
	"iter"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// streamWindows cuts a run's events, in [Plan.All]'s order, into the
// windows [windows] cuts a held plan into, a window at a time: at most
// size events (run.started alone first), ended early before a turn at a
// newer policy version with byVersion, each producer's events of a window
// one unit, units in the order their producers first appear. count, when
// set, is called for every event taken.
func streamWindows(evs iter.Seq[events.Event], size int, byVersion bool, count func(events.Event)) iter.Seq[[]unit] {
	return func(yield func([]unit) bool) {
		next, stop := iter.Pull(evs)
		defer stop()
		var carry *events.Event
		var seen int64
		first := true
		for {
			limit := size
			if first {
				limit = 1
			}
			var w []unit
			at := map[string]int{}
			n := 0
			for n < limit {
				var ev events.Event
				if carry != nil {
					ev, carry = *carry, nil
				} else {
					var ok bool
					if ev, ok = next(); !ok {
						break
					}
					if count != nil {
						count(ev)
					}
				}
				if t, ok := ev.Data.(*events.TurnGenerated); byVersion && ok && newestVersion(t) > seen {
					seen = newestVersion(t)
					if n > 0 {
						carry = &ev
						break
					}
				}
				i, ok := at[ev.Source]
				if !ok {
					i = len(w)
					at[ev.Source] = i
					w = append(w, unit{stream: ev.Source})
				}
				w[i].events = append(w[i].events, ev)
				n++
			}
			first = false
			if n == 0 {
				return
			}
			if !yield(w) {
				return
			}
		}
	}
}

// pushSource pushes a generated source as push pushes a plan, without
// holding it: windows are generated as the previous one is acknowledged.
// The trainer's stream is left out with a live trainer (published set).
func pushSource(ctx context.Context, o Options, src *Source, published *atomic.Int64) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	o = o.withDefaults()
	res := Result{Run: src.Run, ByType: map[events.Type]int{}}
	if have, want := batchedGroups(src.Groups, src.Options.Steps), src.Options.Steps*src.Options.BatchGroups; have < want {
		o.Logger.Warn("simulate: too few usable train groups for the steps asked (too few admitted tasks, or too many failures)",
			"run", src.Run, "groups", have, "want", want)
	}
	evs := src.Events()
	streams := src.Streams()
	if published != nil {
		all := evs
		evs = func(yield func(events.Event) bool) {
			for ev := range all {
				if ev.Source != trainer && !yield(ev) {
					return
				}
			}
		}
		streams--
	}
	p := newPusher(o)
	p.published = published
	o.Logger.Info("simulate: pushing run", "run", src.Run, "url", o.URL, "streams", streams, "workers", o.Workers, "seed", src.Options.Seed)
	size := max(2*o.Workers*o.EventsPerRequest, streams*o.EventsPerRequest/8)
	start := time.Now()
	err := p.pushWindows(ctx, streamWindows(evs, size, published != nil, func(ev events.Event) { res.ByType[ev.Type]++ }))
	res.Duration = time.Since(start)
	res.Events, res.Requests, res.Retries = int(p.events.Load()), int(p.requests.Load()), int(p.retries.Load())
	if err != nil {
		o.Logger.Error("simulate: run failed", "run", src.Run, "events", res.Events, "err", err)
		return res, err
	}
	o.Logger.Info("simulate: run pushed", "run", src.Run, "events", res.Events, "requests", res.Requests,
		"retries", res.Retries, "duration", res.Duration)
	return res, nil
}

// batchedGroups counts the train groups expected in batches 1..steps.
func batchedGroups(groups []GroupInfo, steps int) int {
	n := 0
	for _, g := range groups {
		if g.Batch >= 1 && g.Batch <= steps {
			n++
		}
	}
	return n
}
