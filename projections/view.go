package projections

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
)

// StateView is a fold's state as people read it: where the run stood after
// the last record applied. It is read from the Store, never kept.
type StateView struct {
	// Facts is the fact sequence number of the last record applied.
	Facts uint64   `json:"facts"`
	Tree  TreeHead `json:"tree"`
	// Configured says run.started was applied; Config is in force either way.
	Configured bool          `json:"configured"`
	Config     events.Config `json:"config"`
	// Decisions counts the decisions issued so far, by kind.
	Decisions DecisionCounts `json:"decisions"`
	// Queue holds the groups placed in the open batch, Decisions.BatchSealed+1,
	// in the order they were placed; Dropped the train groups dropped since the
	// last seal.
	Queue   []QueuedGroup  `json:"queue"`
	Dropped []DroppedGroup `json:"dropped"`
	// InFlight lists the groups that have not completed, by group id.
	InFlight []GroupView `json:"in_flight"`
	// Tasks lists every task known, by task id.
	Tasks []TaskView `json:"tasks"`
	// AttemptsInFlight counts attempts whose group has not completed;
	// HeldTurnPayloads the turns whose inline tokens the state still holds.
	AttemptsInFlight int `json:"attempts_in_flight"`
	HeldTurnPayloads int `json:"held_turn_payloads"`
}

// QueuedGroup is a group placed in the open batch.
type QueuedGroup struct {
	Group        string      `json:"group"`
	Task         string      `json:"task"`
	Completed    LogPosition `json:"completed"`
	Attempts     int         `json:"attempts"`
	Turns        int         `json:"turns"`
	TrainedTurns int         `json:"trained_turns"`
}

// GroupView is a group that has not completed.
type GroupView struct {
	Group string `json:"group"`
	// Task, Purpose and Size are empty until group.started is applied.
	Task    string `json:"task,omitempty"`
	Purpose string `json:"purpose,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Started bool   `json:"started"`
	Closed  bool   `json:"closed"`
	// Attempts started in the group, and how many of them were rewarded,
	// finished and failed.
	Attempts int `json:"attempts"`
	Rewarded int `json:"rewarded"`
	Finished int `json:"finished"`
	Failed   int `json:"failed"`
}

// TaskView is a task's registration and admission.
type TaskView struct {
	Task       string `json:"task"`
	Registered bool   `json:"registered"`
	// Decision is "admitted", "rejected" or "pending".
	Decision string `json:"decision"`
	Probes   int64  `json:"probes"`
	Passes   int64  `json:"passes"`
}

// ViewSummary reads what a fold's header holds from s: the facts folded,
// whether the run was configured, the decisions counted, the effective
// config and the tree head. Unlike ViewState it lists nothing, so it reads
// any Store, a fold state on disk included.
func ViewSummary(s Store) (StateView, error) {
	c := &applyCtx{s: s}
	if err := c.loadHeader(); err != nil {
		return StateView{}, err
	}
	return c.viewSummary()
}

// viewSummary is ViewSummary of the state whose header c has loaded.
func (c *applyCtx) viewSummary() (StateView, error) {
	var v StateView
	s := c.s
	v.Facts, v.Configured = c.h.facts, c.h.configured
	v.Decisions = DecisionCounts{BatchSealed: c.h.sealed, TaskAdmitted: c.h.admitted, TaskRejected: c.h.rejected, AuditFinding: c.h.findings}
	cfg, err := c.config()
	if err != nil {
		return v, err
	}
	v.Config = cfg
	v.Tree = NewTree().Head()
	if b, ok, _ := s.Get([]byte(keyTree)); ok {
		t, err := decodeTree(b)
		if err != nil {
			return v, err
		}
		v.Tree = t.Head()
	}
	return v, nil
}

// ViewState reads a fold's state from s.
func ViewState(s *MemStore) (StateView, error) {
	c := &applyCtx{s: s}
	if err := c.loadHeader(); err != nil {
		return StateView{}, err
	}
	v, err := c.viewSummary()
	if err != nil {
		return v, err
	}

	for i := range c.h.open {
		b, ok, _ := s.Get(openKey(i))
		if !ok {
			return v, fmt.Errorf("%w: open batch entry %d missing", ErrCorruptState, i)
		}
		var e openGroup
		if err := json.Unmarshal(b, &e); err != nil {
			return v, fmt.Errorf("%w: open batch entry %d: %v", ErrCorruptState, i, err)
		}
		q := QueuedGroup{Group: e.Group.Group, Task: e.Group.Task, Completed: e.Group.Completed, Attempts: len(e.Group.Attempts)}
		for _, a := range e.Group.Attempts {
			for _, t := range a.Turns {
				q.Turns++
				if t.Trained {
					q.TrainedTurns++
				}
			}
		}
		v.Queue = append(v.Queue, q)
	}
	for i := range c.h.drops {
		b, ok, _ := s.Get(dropKey(i))
		if !ok {
			return v, fmt.Errorf("%w: dropped group %d missing", ErrCorruptState, i)
		}
		var d DroppedGroup
		if err := json.Unmarshal(b, &d); err != nil {
			return v, fmt.Errorf("%w: dropped group %d: %v", ErrCorruptState, i, err)
		}
		v.Dropped = append(v.Dropped, d)
	}

	tasks := map[string]*TaskView{}
	taskOf := func(id string) *TaskView {
		if tasks[id] == nil {
			tasks[id] = &TaskView{Task: id, Decision: "pending"}
		}
		return tasks[id]
	}
	for _, k := range s.KeysWithPrefix([]byte(pfxTask)) {
		b, _, _ := s.Get(k)
		t, err := decodeTask(b)
		if err != nil {
			return v, err
		}
		tv := taskOf(string(k[len(pfxTask):]))
		tv.Registered, tv.Probes, tv.Passes = t.registered, t.probes, t.passes
		switch t.decision {
		case admissionAdmitted:
			tv.Decision = "admitted"
		case admissionRejected:
			tv.Decision = "rejected"
		}
	}
	for _, k := range s.KeysWithPrefix([]byte(pfxGroup)) {
		b, _, _ := s.Get(k)
		g, err := decodeGroup(b)
		if err != nil {
			return v, err
		}
		if g.done {
			continue
		}
		gv := GroupView{Group: string(k[len(pfxGroup):]), Task: g.task, Purpose: g.purpose, Size: g.size,
			Started: g.started, Closed: g.closed, Attempts: len(g.members)}
		for _, m := range g.members {
			a, err := c.attempt(m)
			if err != nil {
				return v, err
			}
			v.AttemptsInFlight++
			if a.rewarded {
				gv.Rewarded++
			}
			if a.finished {
				gv.Finished++
			}
			if a.failed {
				gv.Failed++
			}
		}
		if g.task != "" {
			taskOf(g.task)
		}
		v.InFlight = append(v.InFlight, gv)
	}
	for _, id := range slices.Sorted(maps.Keys(tasks)) {
		v.Tasks = append(v.Tasks, *tasks[id])
	}
	v.HeldTurnPayloads = len(s.KeysWithPrefix([]byte(pfxTurn)))
	return v, nil
}

// AttemptView is what a fold knows of one attempt, as the API's attempt
// lookup reports it (docs/design.md §19.1): a recording proxy in strict
// mode asks it before an attempt's first turn.
type AttemptView struct {
	Attempt string `json:"attempt"`
	// Started says attempt.started was applied; an attempt the fold knows
	// only from its turns or its reward is not started.
	Started bool   `json:"started"`
	Group   string `json:"group,omitempty"`
	Task    string `json:"task,omitempty"`
	RetryOf string `json:"retry_of,omitempty"`
	// Turns is how many distinct turns of the attempt were applied.
	Turns    int  `json:"turns"`
	Finished bool `json:"finished"`
	Failed   bool `json:"failed"`
	Rewarded bool `json:"rewarded"`
	// Done says the attempt's group completed: the attempt is frozen, and
	// a later fact about it is late (docs/design.md §6.9).
	Done bool `json:"done"`
}

// ViewAttempt reads one attempt of the fold state in s; found is false when
// no fact has named it.
func ViewAttempt(s Store, attempt string) (v AttemptView, found bool, err error) {
	b, ok, err := s.Get(attemptKey(attempt))
	if err != nil || !ok {
		return AttemptView{Attempt: attempt}, false, err
	}
	a, err := decodeAttempt(b)
	if err != nil {
		return AttemptView{Attempt: attempt}, false, err
	}
	return AttemptView{Attempt: attempt, Started: a.started, Group: a.group, Task: a.task, RetryOf: a.retryOf,
		Turns: len(a.turns), Finished: a.finished, Failed: a.failed, Rewarded: a.rewarded, Done: a.done}, true, nil
}
