package simulate

import (
	"cmp"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
)

// Plan is a whole synthetic run, generated without I/O.
type Plan struct {
	// Run is the run id every event carries.
	Run string
	// Options are the options the plan was generated with, defaults applied.
	Options Options
	// Engines is the number of virtual rollout engines attempts were
	// scheduled over (the engine streams are those that ran something).
	Engines int
	// Streams are the producers' event sequences: the scheduler first, then
	// the engines in order, the verifier and the trainer. Each is ordered
	// as its producer emits it; the ledger keeps only this order.
	Streams []Stream
	// Tasks and Groups are what the generator knows and the ledger must
	// infer: hidden pass probabilities, probe outcomes, and each group's
	// expected fate.
	Tasks  []TaskInfo
	Groups []GroupInfo
}

// Stream is one producer's events in the order it emits them.
type Stream struct {
	Producer string
	Events   []events.Event
}

// TaskInfo is the generator's view of a task.
type TaskInfo struct {
	Task string
	// PassProb is the hidden chance that an attempt solves the task.
	PassProb float64
	// Probes and ProbePasses count the probe group's rewarded attempts and
	// passes; Admitted applies the default pass band and minimum probes.
	Probes, ProbePasses int
	Admitted            bool
}

// GroupInfo is the generator's view of a group, predicted under the rules
// of docs/design.md §6 with the log in virtual-time order.
type GroupInfo struct {
	Group, Task, Purpose string
	Size                 int
	// Rewarded counts the slots whose final attempt was rewarded; Closed
	// says a slot exhausted its retries and the scheduler closed the group.
	Rewarded int
	Closed   bool
	// Drop is the expected reason a train group is not trained:
	// "zero_signal", "infra_lost", "fully_stale", or "" when it enters a
	// batch. Always "" for probe and eval groups that were not lost.
	Drop string
	// Batch is the expected batch (1-based) of a used train group, else 0;
	// groups past the last full batch name a batch that stays unsealed.
	Batch int
}

// Len is the number of events of the plan.
func (p *Plan) Len() int {
	n := 0
	for _, s := range p.Streams {
		n += len(s.Events)
	}
	return n
}

// ByType counts the plan's events by type.
func (p *Plan) ByType() map[events.Type]int {
	out := map[events.Type]int{}
	for _, s := range p.Streams {
		for _, ev := range s.Events {
			out[ev.Type]++
		}
	}
	return out
}

// All returns every event in one deterministic order: by virtual time
// (`at`), ties broken by stream and then position. It keeps each stream's
// order, so it is one of the logs the ledger may see, and the one closest
// to what happened.
func (p *Plan) All() []events.Event {
	refs := p.order()
	out := make([]events.Event, len(refs))
	for i, r := range refs {
		out[i] = p.Streams[r.stream].Events[r.pos]
	}
	return out
}

// batchedGroups counts the train groups expected in batches 1..Steps.
func (p *Plan) batchedGroups() int {
	n := 0
	for _, g := range p.Groups {
		if g.Batch >= 1 && g.Batch <= p.Options.Steps {
			n++
		}
	}
	return n
}

type eventRef struct{ stream, pos int }

// order is the merge behind [Plan.All]. Streams are sorted by `at`, so the
// sort keeps each one's order.
func (p *Plan) order() []eventRef {
	refs := make([]eventRef, 0, p.Len())
	for s, st := range p.Streams {
		for i := range st.Events {
			refs = append(refs, eventRef{s, i})
		}
	}
	slices.SortFunc(refs, func(a, b eventRef) int {
		ea, eb := &p.Streams[a.stream].Events[a.pos], &p.Streams[b.stream].Events[b.pos]
		return cmp.Or(ea.At.Compare(eb.At), cmp.Compare(a.stream, b.stream), cmp.Compare(a.pos, b.pos))
	})
	return refs
}
