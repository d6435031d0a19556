package simulate

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"slices"
	"strconv"

	"github.com/rolloutledger/rolloutledger/events"
)

// Source is a run generated a piece at a time: the events of [Plan.All],
// in that order and with the same content, without holding them. It keeps
// the run's tasks and a few words a group (where its attempts' serials
// start, and its [GroupInfo]); [Source.Events] plays the run's timeline
// again as it goes, drawing each group when it is dispatched and letting it
// go once its events are read. So a run of any length fits in memory: what
// it holds at any moment grows with the attempts in flight, not with the
// run's length, its events or its tokens.
type Source struct {
	// Run, Options, Engines, Tasks and Groups are as in [Plan].
	Run     string
	Options Options
	Engines int
	Tasks   []TaskInfo
	Groups  []GroupInfo

	m       *model
	names   []string
	streams int // producers with at least one event
}

// NewSource generates the run o describes, as [Generate] does, for reading in
// order with [Source.Events]. It plays the run's timeline once, keeping
// none of it, for what it must tell before the events: each group's
// expected fate and batch, and how many producers have events.
func NewSource(o Options, run string) (*Source, error) {
	m, infos, err := newRun(o, run)
	if err != nil {
		return nil, err
	}
	sum, err := m.play(infos, nil)
	if err != nil {
		return nil, err
	}
	engines := sum.engines
	s := &Source{Run: run, Options: m.o, Engines: engines, Tasks: sum.tasks, Groups: sum.groups, m: m}
	s.names = make([]string, engines+3)
	s.names[0], s.names[engines+1], s.names[engines+2] = scheduler, verifier, trainer
	for i := range engines {
		s.names[1+i] = fmt.Sprintf("engine-%02d", i)
	}
	s.streams = 1 // the scheduler
	for _, used := range sum.used {
		if used {
			s.streams++ // an engine that ran something
		}
	}
	s.streams++ // the trainer
	if sum.attempts > 0 {
		s.streams++ // the verifier
	}
	return s, nil
}

// Streams is how many producers have events: [Plan.Streams]' length.
func (s *Source) Streams() int { return s.streams }

// keyed is an event with its place in the merged order: virtual time, raw
// stream (scheduler 0, engine i at 1+i, verifier, trainer), the rank of
// what emitted it (an attempt's or a group's) and its position there. In a
// stream this is the order of [Plan]'s (virtual time, emission order).
type keyed struct {
	vt           int64
	stream, rank int
	local        int
	ev           events.Event
}

func (a *keyed) compare(b *keyed) int {
	return cmp.Or(cmp.Compare(a.vt, b.vt), cmp.Compare(a.stream, b.stream), cmp.Compare(a.rank, b.rank), cmp.Compare(a.local, b.local))
}

// pending is the events of one attempt (or of the header, or of a group)
// generated and not yet read, in order, and for an attempt the rest of
// its facts, not generated yet.
type pending struct {
	evs  []keyed
	rank int
	rest *attemptFacts
}

// Events yields the run's events in [Plan.All]'s order. Each call
// generates them again; the ids are new each time.
//
// It plays the run's timeline just far enough: an event is yielded once
// nothing still to be dispatched can come before it. An attempt's facts
// are generated a turn at a time, as the previous turn's are read, once
// the trainer is past the turn's end, so that the policy versions of its
// tokens are known. So the timeline runs ahead of the events by about a
// turn, and what is held at any moment is the attempts in flight, each
// with its turns and its next turn's facts.
func (s *Source) Events() iter.Seq[events.Event] {
	return func(yield func(events.Event) bool) {
		m := s.m
		engines := s.Engines
		sched, ver, tr := 0, engines+1, engines+2
		h := newHeap(func(a, b *pending) bool { return a.evs[0].compare(&b.evs[0]) < 0 })
		// One emitter for all: collect takes what it gathered each time.
		em := &emitter{run: s.Run, v: m.o.FactVersion, bufs: make([][]record, engines+3)}
		open := func(p *pending) {
			if p.evs = collect(em, p.rank, p.evs); len(p.evs) > 0 {
				h.push(p)
			}
		}
		// The scheduler's opening and the initial policy, rank 0.
		cfg := m.config()
		em.add(sched, 0, scheduler, m.runStarted(cfg, engines))
		for _, t := range m.tasks {
			em.add(sched, 0, scheduler, m.taskRegistered(t))
		}
		em.add(tr, 0, trainer, policyPublished(m.seed, 0))
		open(&pending{rank: 0})

		// Groups' own facts (rank 1+idx) as their times become known, the
		// later versions (rank 0, after the opening), and the attempts
		// (rank serial: groups, slots, retries) in the order they start.
		tl := m.newTimeline(engines)
		var started []*attempt
		tl.onDispatch = func(a *attempt) { started = append(started, a) }
		tl.onStart = func(g *group) {
			em.seq = 0
			em.add(sched, g.started, scheduler, &events.GroupStarted{Group: g.id, Task: g.task.id, Size: g.size, Purpose: g.purpose})
			open(&pending{rank: 1 + g.idx})
		}
		tl.onDone = func(g *group) {
			if g.closed {
				em.seq = 1
				em.add(sched, g.done, scheduler, &events.GroupClosed{Group: g.id, Reason: "retries_exhausted"})
				open(&pending{rank: 1 + g.idx})
			}
		}
		tl.onPublish = func(v int) {
			em.seq = 1 + len(m.tasks) + v
			em.add(tr, tl.versions[v], trainer, policyPublished(m.seed, v))
			open(&pending{rank: 0})
		}
		// more generates p's next facts; false if it has none left.
		more := func(p *pending) bool {
			if p.rest == nil {
				return false
			}
			if t, ok := p.rest.turnEnds(); ok {
				tl.until(t)
			}
			em.seq = p.rest.seq
			if !p.rest.next(em, tl.versions) {
				p.rest = nil
			} else {
				p.rest.seq = em.seq
			}
			p.evs = collect(em, p.rank, p.evs[:0])
			return true
		}
		for {
			for {
				switch {
				case len(started) > 0 && (h.Len() == 0 || started[0].start <= h.peek().evs[0].vt):
					// It may come before the earliest pending event: open it.
					a := started[0]
					started[0], started = nil, started[1:]
					em.seq = 0
					f := m.startAttempt(em, a, 1+a.engine, s.names[1+a.engine], ver)
					f.seq = em.seq
					open(&pending{rank: int(a.serial), rest: f})
					continue
				case h.Len() > 0 && tl.now() <= h.peek().evs[0].vt:
					// Something still to be dispatched may come before it.
					tl.step()
					continue
				case h.Len() == 0 && len(started) == 0 && tl.step():
					continue
				}
				break
			}
			if h.Len() == 0 {
				return
			}
			p := h.peek()
			k := p.evs[0]
			p.evs[0] = keyed{} // let the event go once read
			p.evs = p.evs[1:]
			if len(p.evs) == 0 {
				// Out of the heap while the timeline may add to it.
				h.pop()
				for len(p.evs) == 0 && more(p) {
				}
				if len(p.evs) > 0 {
					h.push(p)
				}
			} else {
				h.fix()
			}
			if !yield(k.ev) {
				return
			}
		}
	}
}

// collect appends what em gathered to dst as keyed events of one rank, in
// order, and empties em.
func collect(em *emitter, rank int, dst []keyed) []keyed {
	for _, stream := range em.touched {
		for _, r := range em.bufs[stream] {
			dst = append(dst, keyed{vt: r.vt, stream: stream, rank: rank, local: r.seq, ev: r.ev})
		}
		clear(em.bufs[stream])
		em.bufs[stream] = em.bufs[stream][:0]
	}
	em.touched = em.touched[:0]
	slices.SortFunc(dst, func(a, b keyed) int { return a.compare(&b) })
	return dst
}

func (m *model) runStarted(cfg events.Config, engines int) *events.RunStarted {
	return &events.RunStarted{
		Config: events.RunConfig{
			GroupSize: &cfg.GroupSize, BatchGroups: &cfg.BatchGroups, MinGroup: &cfg.MinGroup,
			MaxStaleness: &cfg.MaxStaleness, PassBand: cfg.PassBand[:], MinProbes: &cfg.MinProbes,
			EnforceAdmission: &cfg.EnforceAdmission, PartialCreditCap: &cfg.PartialCreditCap,
			EfficiencyWeight: &cfg.EfficiencyWeight, Advantage: &cfg.Advantage,
		},
		Model:   modelName,
		Harness: harnessName,
		Notes: fmt.Sprintf("synthetic FireFlash-shaped run, seed %d: %d tasks, %d steps of %d groups of %d, %d engines",
			m.seed, m.o.Tasks, m.o.Steps, m.o.BatchGroups, m.o.GroupSize, engines),
	}
}

func (m *model) taskRegistered(t *task) *events.TaskRegistered {
	gates := make([]events.Gate, len(gateNames))
	for i, name := range gateNames {
		gates[i] = events.Gate{Name: name, Passed: true}
	}
	tr := &events.TaskRegistered{Task: t.id, Source: t.source, Kind: t.kind, Tier: t.tier, Gates: gates}
	if m.o.Text {
		tr.Prompt, tr.PromptCut = taskPrompt(t, m.seed)
	}
	return tr
}

func policyPublished(seed uint64, v int) *events.PolicyPublished {
	sum := sha256.Sum256([]byte("rolloutledger-sim/" + strconv.FormatUint(seed, 10) + "/" + strconv.Itoa(v)))
	return &events.PolicyPublished{
		Version: int64(v), Checkpoint: fmt.Sprintf("ckpt/step-%d", v),
		Digest: "sha256:" + hex.EncodeToString(sum[:]), Precision: "fp8",
	}
}
