package simulate

import (
	"cmp"
	"container/heap"
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
// the run's shape (tasks, groups, each attempt's timing: tens of bytes an
// attempt) and, at any moment, the events of the attempts in flight; an
// attempt's turns are drawn again from its own stream when it starts. So a
// run of any length fits in memory: what it holds grows with the attempts,
// not with their events or tokens.
type Source struct {
	// Run, Options, Engines, Tasks and Groups are as in [Plan].
	Run     string
	Options Options
	Engines int
	Tasks   []TaskInfo
	Groups  []GroupInfo

	m        *model
	versions []int64
	names    []string
	streams  int // producers with at least one event
}

// NewSource generates the run o describes, as [Generate] does, for reading in
// order with [Source.Events].
func NewSource(o Options, run string) (*Source, error) {
	m, engines, versions, err := draw(o, run)
	if err != nil {
		return nil, err
	}
	s := &Source{Run: run, Options: m.o, Engines: engines, m: m, versions: versions}
	s.names = make([]string, engines+3)
	s.names[0], s.names[engines+1], s.names[engines+2] = scheduler, verifier, trainer
	for i := range engines {
		s.names[1+i] = fmt.Sprintf("engine-%02d", i)
	}
	used := map[int]bool{}
	rank := 0
	for _, g := range m.groups {
		if !g.dispatched {
			return nil, fmt.Errorf("simulate: group %s was never dispatched", g.id)
		}
		for _, chain := range g.slots {
			for _, a := range chain {
				a.rank = rank
				rank++
				used[a.engine] = true
			}
		}
		s.Groups = append(s.Groups, GroupInfo{
			Group: g.id, Task: g.task.id, Purpose: g.purpose, Size: g.size,
			Rewarded: g.rewarded, Closed: g.closed, Drop: g.drop, Batch: g.batch,
		})
	}
	for _, t := range m.tasks {
		s.Tasks = append(s.Tasks, TaskInfo{Task: t.id, PassProb: t.passProb, Probes: t.probes, ProbePasses: t.passes, Admitted: t.admitted})
	}
	s.streams = 1 + len(used) + 1 // the scheduler, the engines that ran something, the trainer
	if rank > 0 {
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
// not yet read, in order.
type pending []keyed

type pendingHeap []*pending

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return (*h[i])[0].compare(&(*h[j])[0]) < 0 }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(*pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Events yields the run's events in [Plan.All]'s order. Each call
// generates them again; the ids are new each time.
func (s *Source) Events() iter.Seq[events.Event] {
	return func(yield func(events.Event) bool) {
		m := s.m
		engines := s.Engines
		sched, ver, tr := 0, engines+1, engines+2
		// The scheduler's opening and the trainer's versions, rank 0.
		em := &emitter{run: s.Run, v: m.o.FactVersion, bufs: make([][]record, engines+3)}
		cfg := m.config()
		em.add(sched, 0, scheduler, m.runStarted(cfg, engines))
		for _, t := range m.tasks {
			em.add(sched, 0, scheduler, m.taskRegistered(t))
		}
		for v, at := range s.versions {
			em.add(tr, at, trainer, policyPublished(m.seed, v))
		}
		h := &pendingHeap{}
		head := collect(em, 0)
		if len(head) > 0 {
			heap.Push(h, &head)
		}
		// Groups' own facts, and attempts, each in the order they start.
		type start struct {
			vt   int64
			rank int
			g    *group
			a    *attempt
		}
		var starts []start
		for _, g := range m.groups {
			starts = append(starts, start{vt: g.started, rank: 1 + g.idx, g: g})
			for _, chain := range g.slots {
				for _, a := range chain {
					starts = append(starts, start{vt: a.start, rank: a.rank, a: a})
				}
			}
		}
		slices.SortStableFunc(starts, func(x, y start) int { return cmp.Compare(x.vt, y.vt) })
		next := 0
		for {
			// Everything that starts at or before the earliest pending
			// event may come before it: open it first.
			for next < len(starts) && (h.Len() == 0 || starts[next].vt <= (*(*h)[0])[0].vt) {
				st := starts[next]
				next++
				em := &emitter{run: s.Run, v: m.o.FactVersion, bufs: make([][]record, engines+3)}
				rank := st.rank
				if st.g != nil {
					g := st.g
					em.add(sched, g.started, scheduler, &events.GroupStarted{Group: g.id, Task: g.task.id, Size: g.size, Purpose: g.purpose})
					if g.closed {
						em.add(sched, g.done, scheduler, &events.GroupClosed{Group: g.id, Reason: "retries_exhausted"})
					}
				} else {
					a := st.a
					m.emitAttempt(em, a, 1+a.engine, s.names[1+a.engine], ver, s.versions)
				}
				p := collect(em, rank)
				if len(p) > 0 {
					heap.Push(h, &p)
				}
			}
			if h.Len() == 0 {
				return
			}
			p := (*h)[0]
			k := (*p)[0]
			(*p)[0] = keyed{} // let the event go once read
			*p = (*p)[1:]
			if len(*p) == 0 {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
			if !yield(k.ev) {
				return
			}
		}
	}
}

// collect takes what em gathered as keyed events of one rank, in order.
func collect(em *emitter, rank int) pending {
	var out pending
	for stream, buf := range em.bufs {
		for _, r := range buf {
			out = append(out, keyed{vt: r.vt, stream: stream, rank: rank, local: r.seq, ev: r.ev})
		}
	}
	slices.SortFunc(out, func(a, b keyed) int { return a.compare(&b) })
	return out
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
