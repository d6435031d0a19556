package simulate

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"sort"

	"github.com/rolloutledger/rolloutledger/events"
)

// The virtual timeline. Attempts are dispatched over a pool of virtual
// engines as a scheduler would: groups in the order they become ready, a
// task's train groups once its probe group completed, a retry once the
// failure is noticed. The trainer stand-in then publishes policy version k
// once batch k is complete and trained, exactly as an asynchronous trainer
// would, so each turn's policy version is read off the timeline and no turn
// can be newer than the batch that trains it (no negative staleness).

const (
	probeReleaseMS  = 2000  // after registration, the probe groups go out
	admissionMS     = 1500  // from a probe group's completion to its train groups' release
	retryDelayMS    = 5000  // from a failure to the retry's dispatch
	engineGapMS     = 300   // microVM teardown between two attempts of an engine
	closeDelayMS    = 10000 // the scheduler's grace before giving a group up
	trainStepMS     = 60000 // the trainer's time for one gradient step and publish
	enginesPerGroup = 1.25  // engines per attempt of a batch: FireFlash runs ~2,000 for 64x8
)

// engineCount scales FireFlash's ~2,000 attempts in flight down to the run.
func engineCount(o Options) int {
	return min(max(int(enginesPerGroup*float64(o.BatchGroups*o.GroupSize)), 8), 2000)
}

type engineSlot struct {
	free int64
	idx  int
}

type job struct {
	a     *attempt
	ready int64
	seq   int
}

type engineHeap []engineSlot

func (h engineHeap) Len() int { return len(h) }
func (h engineHeap) Less(i, j int) bool {
	return h[i].free < h[j].free || h[i].free == h[j].free && h[i].idx < h[j].idx
}
func (h engineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *engineHeap) Push(x any)   { *h = append(*h, x.(engineSlot)) }
func (h *engineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type jobHeap []job

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(i, j int) bool {
	return h[i].ready < h[j].ready || h[i].ready == h[j].ready && h[i].seq < h[j].seq
}
func (h jobHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)   { *h = append(*h, x.(job)) }
func (h *jobHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// timeline dispatches jobs: a ready retry first, since a whole group waits
// for it, then fresh attempts in the order their groups became ready.
type timeline struct {
	engines        engineHeap
	fresh, retries jobHeap
	seq            int
}

// next is the queue whose head an engine free at now should take, or nil
// if no job is ready yet.
func (tl *timeline) next(now int64) *jobHeap {
	for _, q := range []*jobHeap{&tl.retries, &tl.fresh} {
		if q.Len() > 0 && (*q)[0].ready <= now {
			return q
		}
	}
	return nil
}

func (tl *timeline) earliest() int64 {
	t := int64(math.MaxInt64)
	for _, q := range []*jobHeap{&tl.retries, &tl.fresh} {
		if q.Len() > 0 {
			t = min(t, (*q)[0].ready)
		}
	}
	return t
}

// schedule gives every attempt an engine and a start time, and every group
// its dispatch and completion times.
func (m *model) schedule(nEngines int) {
	tl := &timeline{}
	for i := range nEngines {
		tl.engines = append(tl.engines, engineSlot{idx: i})
	}
	heap.Init(&tl.engines)
	for _, t := range m.tasks {
		tl.release(t.probe, probeReleaseMS)
	}
	for tl.fresh.Len()+tl.retries.Len() > 0 {
		e := heap.Pop(&tl.engines).(engineSlot)
		q := tl.next(e.free)
		if q == nil {
			// Idle until the earliest job is ready; engines that free up
			// earlier may still queue an earlier one.
			e.free = tl.earliest()
			heap.Push(&tl.engines, e)
			continue
		}
		j := heap.Pop(q).(job)
		a, g := j.a, j.a.group
		a.engine, a.start = e.idx, e.free
		end := a.start + a.duration
		e.free = end + engineGapMS
		heap.Push(&tl.engines, e)
		if !g.dispatched {
			g.dispatched, g.started = true, a.start
			for _, r := range g.release {
				tl.release(r, a.start)
			}
		}
		chain := g.slots[a.slot]
		if a.failed && a != chain[len(chain)-1] {
			next := slices.Index(chain, a) + 1
			tl.push(&tl.retries, chain[next], end+retryDelayMS)
			continue
		}
		// The slot's final attempt: rewarded, or its retries exhausted.
		if a.failed {
			g.lastFail = max(g.lastFail, end)
		} else {
			g.lastReward = max(g.lastReward, end+a.verifyMS)
		}
		if g.openSlots--; g.openSlots > 0 {
			continue
		}
		g.done = g.lastReward
		if g.closed {
			// The scheduler gives up after the other slots were rewarded.
			g.done = max(g.lastFail+closeDelayMS, g.lastReward+1000)
		}
		if g.purpose == events.PurposeProbe {
			for _, tg := range g.task.trains {
				tl.release(tg, g.done+admissionMS)
			}
		}
	}
}

func (tl *timeline) release(g *group, at int64) {
	if g.released {
		return
	}
	g.released, g.ready, g.openSlots = true, at, len(g.slots)
	for _, chain := range g.slots {
		tl.push(&tl.fresh, chain[0], at)
	}
}

func (tl *timeline) push(q *jobHeap, a *attempt, ready int64) {
	heap.Push(q, job{a: a, ready: ready, seq: tl.seq})
	tl.seq++
}

// publish plays the trainer: usable train groups fill batches in the order
// they complete (rule 7), a group none of whose turns would train is
// skipped as fully stale, and version k is published a training step after
// batch k is complete (or after version k-1, if the trainer is behind). It
// returns the publication times; versions[0] = 0 is the initial policy.
func (m *model) publish() []int64 {
	cfg := m.config()
	var usable []*group
	for _, g := range m.groups {
		if g.purpose == events.PurposeTrain && g.drop == "" {
			usable = append(usable, g)
		}
	}
	slices.SortStableFunc(usable, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.done, b.done), cmp.Compare(a.idx, b.idx))
	})
	versions := []int64{0}
	k, filled := 1, 0
	for _, g := range usable {
		// Every turn of g precedes g.done, so versions published later
		// cannot apply to it: the times known so far suffice.
		trains := false
		for _, chain := range g.slots {
			a := chain[len(chain)-1]
			turns := m.turnsOf(a)
			for i := range turns {
				// The turn's newest segment is its least stale.
				segs := m.turnSegments(versions, a.start+turns[i].start, &turns[i])
				s := int64(k-1) - segs[len(segs)-1].PolicyVersion
				trains = trains || s >= 0 && s <= int64(cfg.MaxStaleness)
			}
		}
		if !trains {
			g.drop = "fully_stale"
			continue
		}
		g.batch = k
		if filled++; filled == m.o.BatchGroups {
			versions = append(versions, max(g.done, versions[k-1])+trainStepMS)
			k, filled = k+1, 0
		}
	}
	return versions
}

// versionAt is the latest version published at or before t.
func versionAt(versions []int64, t int64) int64 {
	return int64(sort.Search(len(versions), func(i int) bool { return versions[i] > t })) - 1
}

// turnSegments are the version segments of a turn generated from virtual
// time at: a version published while the turn ran takes over the tokens
// generated after it (an in-flight weight update), the tokens spread evenly
// over the turn's latency. A version 1 run's turns report the version they
// started with. Versions published later than those known so far cannot
// apply: publish calls this only for turns that ended before them.
func (m *model) turnSegments(versions []int64, at int64, tr *turn) []events.VersionSegment {
	segs := events.SingleVersion(versionAt(versions, at))
	if m.o.FactVersion == 1 {
		return segs
	}
	for v := segs[0].PolicyVersion + 1; v < int64(len(versions)) && versions[v] <= at+tr.latency; v++ {
		start := tr.completion * (versions[v] - at) / max(tr.latency, 1)
		last := &segs[len(segs)-1]
		switch {
		case start >= tr.completion:
			// Published after the last token.
			return segs
		case start <= last.Start:
			// No token of the older version after all.
			last.PolicyVersion = v
		default:
			segs = append(segs, events.VersionSegment{Start: start, PolicyVersion: v})
		}
	}
	return segs
}
