package simulate

import (
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
//
// The timeline unfolds as virtual time advances, a dispatch at a time
// ([timeline.step]): a group is drawn in full when its first attempt is
// dispatched, and nothing of it is kept once the timeline and whoever
// hooked onto it are done with it. What it holds grows with the attempts
// in flight, not with the run.

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

// release is groups released together, whose first attempts are queued at
// once (in order, all ready at the same time) as the scheduler's fresh
// jobs: the groups next, next+stride, ... below end, drawn one at a time
// as their turn comes. Jobs of one release are consecutive in the queue's
// (ready, seq) order, so the release stands for them all.
type release struct {
	ready             int64
	seq               int
	g                 *group // the group being dispatched
	slot              int    // g's next slot
	next, stride, end int
}

// timeline dispatches jobs: a ready retry first, since a whole group waits
// for it, then fresh attempts in the order their groups became ready. It
// plays the trainer as it goes (see [timeline.train]).
type timeline struct {
	m       *model
	cfg     events.Config
	engines *orderedHeap[engineSlot]
	fresh   *orderedHeap[*release]
	retries *orderedHeap[job]
	seq     int

	// The trainer: usable train groups complete but not yet taken, the
	// publication times so far (versions[0] = 0 is the initial policy),
	// and the batch being filled.
	complete  *orderedHeap[*group]
	versions  []int64
	k, filled int

	// Hooks, each optional, called as the timeline unfolds.
	onDraw     func(g *group)   // g drawn, about to be dispatched
	onDispatch func(a *attempt) // a given its engine and start, in order of start
	onStart    func(g *group)   // g's first attempt dispatched: started known
	onDone     func(g *group)   // g's last slot dispatched: done known
	onJudge    func(g *group)   // usable train group g batched, or found fully stale
	onPublish  func(v int)      // version v's publication time known
}

func (m *model) newTimeline(nEngines int) *timeline {
	tl := &timeline{m: m, cfg: m.config(), versions: []int64{0}, k: 1,
		engines: newHeap(func(a, b engineSlot) bool { return a.free < b.free || a.free == b.free && a.idx < b.idx }),
		fresh:   newHeap(func(a, b *release) bool { return a.ready < b.ready || a.ready == b.ready && a.seq < b.seq }),
		retries: newHeap(func(a, b job) bool { return a.ready < b.ready || a.ready == b.ready && a.seq < b.seq }),
		// Complete groups as the trainer takes them: by the time they
		// completed, then as they were drawn.
		complete: newHeap(func(a, b *group) bool { return a.done < b.done || a.done == b.done && a.idx < b.idx })}
	for i := range nEngines {
		tl.engines.items = append(tl.engines.items, engineSlot{idx: i})
	}
	heap.Init(tl.engines)
	if len(m.tasks) > 0 {
		tl.release(probeReleaseMS, 0, 1, len(m.tasks))
	}
	return tl
}

// now is a time no attempt is dispatched before any more: the earliest an
// engine is free, or never once every attempt is dispatched. Groups not
// complete yet complete after it.
func (tl *timeline) now() int64 {
	if tl.fresh.Len()+tl.retries.Len() == 0 {
		return math.MaxInt64
	}
	return tl.engines.peek().free
}

// until steps the timeline past t.
func (tl *timeline) until(t int64) {
	for tl.now() <= t && tl.step() {
	}
}

// next is the queue whose head an engine free at now should take: 0 for
// none ready yet, 1 for the retries, 2 for the fresh jobs.
func (tl *timeline) next(now int64) int {
	switch {
	case tl.retries.Len() > 0 && tl.retries.peek().ready <= now:
		return 1
	case tl.fresh.Len() > 0 && tl.fresh.peek().ready <= now:
		return 2
	}
	return 0
}

func (tl *timeline) earliest() int64 {
	t := int64(math.MaxInt64)
	if tl.retries.Len() > 0 {
		t = min(t, tl.retries.peek().ready)
	}
	if tl.fresh.Len() > 0 {
		t = min(t, tl.fresh.peek().ready)
	}
	return t
}

// step dispatches the next attempt, or lets the earliest free engine idle
// until a job is ready; false once every attempt is dispatched.
func (tl *timeline) step() bool {
	if tl.fresh.Len()+tl.retries.Len() == 0 {
		return false
	}
	defer tl.train()
	e := tl.engines.pop()
	var a *attempt
	switch tl.next(e.free) {
	case 0:
		// Idle until the earliest job is ready; engines that free up
		// earlier may still queue an earlier one.
		e.free = tl.earliest()
		tl.engines.push(e)
		return true
	case 1:
		a = tl.retries.pop().a
	default:
		a = tl.take()
	}
	g := a.group
	a.engine, a.start = e.idx, e.free
	end := a.start + a.duration
	e.free = end + engineGapMS
	tl.engines.push(e)
	if tl.onDispatch != nil {
		tl.onDispatch(a)
	}
	if !g.dispatched {
		g.dispatched, g.started = true, a.start
		if tl.onStart != nil {
			tl.onStart(g)
		}
		for _, idx := range g.releases {
			tl.release(a.start, idx, 1, idx+1)
		}
	}
	chain := g.slots[a.slot]
	if a.failed && a != chain[len(chain)-1] {
		next := slices.Index(chain, a) + 1
		tl.retries.push(job{a: chain[next], ready: end + retryDelayMS, seq: tl.seq})
		tl.seq++
		return true
	}
	// The slot's final attempt: rewarded, or its retries exhausted.
	if a.failed {
		g.lastFail = max(g.lastFail, end)
	} else {
		g.lastReward = max(g.lastReward, end+a.verifyMS)
	}
	if g.openSlots--; g.openSlots > 0 {
		return true
	}
	g.done = g.lastReward
	if g.closed {
		// The scheduler gives up after the other slots were rewarded.
		g.done = max(g.lastFail+closeDelayMS, g.lastReward+1000)
	}
	if tl.onDone != nil {
		tl.onDone(g)
	}
	switch {
	case g.purpose == events.PurposeTrain && g.drop == "":
		tl.complete.push(g)
	case g.purpose == events.PurposeProbe && g.task.admitted:
		// The task's train groups: every len(admitted)-th from its place.
		m := tl.m
		if i := slices.Index(m.admitted, g.task); i < m.trains {
			tl.release(g.done+admissionMS, len(m.tasks)+i, len(m.admitted), len(m.tasks)+m.trains)
		}
	}
	return true
}

// release queues the groups next, next+stride, ... below end, ready at at.
func (tl *timeline) release(at int64, next, stride, end int) {
	tl.fresh.push(&release{ready: at, seq: tl.seq, next: next, stride: stride, end: end})
	tl.seq++
}

// take is the next fresh job's attempt: the first of its group's next
// slot, the group drawn when it comes up.
func (tl *timeline) take() *attempt {
	r := tl.fresh.peek()
	if r.g == nil || r.slot == len(r.g.slots) {
		r.g, r.slot = tl.draw(r.next), 0
		r.next += r.stride
	}
	a := r.g.slots[r.slot][0]
	if r.slot++; r.slot == len(r.g.slots) && r.next >= r.end {
		tl.fresh.pop()
	}
	return a
}

// draw draws group idx in full as it is released to the engines.
func (tl *timeline) draw(idx int) *group {
	g := tl.m.newGroup(idx, tl.cfg, true)
	g.openSlots = len(g.slots)
	for e, ev := range tl.m.evals {
		if ev.trigger == idx {
			g.releases = append(g.releases, len(tl.m.tasks)+tl.m.trains+e)
		}
	}
	if tl.onDraw != nil {
		tl.onDraw(g)
	}
	return g
}

// train plays the trainer up to now: usable train groups fill batches in
// the order they complete (rule 7), a group none of whose turns would
// train is skipped as fully stale, and version k is published a training
// step after batch k is complete (or after version k-1, if the trainer is
// behind). A group is taken once no other can complete before it: when it
// completed at or before now.
func (tl *timeline) train() {
	for tl.complete.Len() > 0 && tl.complete.peek().done <= tl.now() {
		g := tl.complete.pop()
		// Every turn of g precedes g.done, so versions published later
		// cannot apply to it: the times known so far suffice.
		if !tl.trains(g) {
			g.drop = "fully_stale"
		} else {
			g.batch = tl.k
			if tl.filled++; tl.filled == tl.m.o.BatchGroups {
				tl.versions = append(tl.versions, max(g.done, tl.versions[tl.k-1])+trainStepMS)
				tl.k, tl.filled = tl.k+1, 0
				if tl.onPublish != nil {
					tl.onPublish(len(tl.versions) - 1)
				}
			}
		}
		if tl.onJudge != nil {
			tl.onJudge(g)
		}
	}
}

// trains says whether some turn of g's rewarded or final attempts would
// train in batch k, given the versions published so far.
func (tl *timeline) trains(g *group) bool {
	for _, chain := range g.slots {
		a := chain[len(chain)-1]
		turns := tl.m.turnsOf(a)
		for i := range turns {
			// The turn's newest segment is its least stale.
			segs := tl.m.turnSegments(tl.versions, a.start+turns[i].start, &turns[i])
			if s := int64(tl.k-1) - segs[len(segs)-1].PolicyVersion; s >= 0 && s <= int64(tl.cfg.MaxStaleness) {
				return true
			}
		}
	}
	return false
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
// apply: the trainer calls this only for turns that ended before them.
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
