package projections

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/rolloutledger/rolloutledger/events"
)

// Group completion (docs/design.md §6.1, rule 1).
//
// Facts about a group arrive from several producers in any order, so each
// one is stored where it belongs — a reward on its attempt even before the
// attempt.started that names the attempt's group, an attempt on its group
// even before group.started — and the group is evaluated again whenever one
// of its inputs changes.
//
// A slot is the root of a retry_of chain among the group's attempts. An
// attempt is complete at the first position where it has both its
// attempt.finished and a reward (whichever came later is its completing
// fact); a slot is complete when one of its attempts is, and is held by the
// attempt that completed first, by fold position. Every turn of an attempt
// precedes its attempt.finished in the worker's own order, so a group never
// completes while its turns are on their way, and where the verifier's
// reward lands among the worker's facts cannot change a decision.
//
// The group completes at the first record after which group.started is
// known and either `size` slots are complete, or group.closed is known: a
// close completes the group at the close's own position with the slots
// complete there, and never waits for a verdict still owed (the reward of an
// attempt that finished before the close and is rewarded after it is late).
// A closed group with fewer than min_group complete slots is infra_lost
// when it is a train group (batch.go); a closed probe group counts the
// slots it has.
//
// `size` is the group's own, from group.started; a size below 1 means the
// run's group_size.
//
// At completion the group is frozen: its included attempts are the holders
// of its complete slots, ordered by attempt id; its other attempts are
// discarded with their tokens; facts that arrive later about it or its
// attempts are findings.

func (c *applyCtx) groupStarted(d *events.GroupStarted) error {
	g, err := c.group(d.Group)
	if err != nil {
		return err
	}
	if g.started {
		return c.duplicate(Finding{Group: d.Group, Task: d.Task}, "group "+d.Group+" already started")
	}
	g.started, g.task, g.purpose, g.size = true, d.Task, d.Purpose, int64(d.Size)
	if err := c.putGroup(d.Group, &g); err != nil {
		return err
	}
	return c.evaluate(d.Group, &g)
}

func (c *applyCtx) attemptStarted(d *events.AttemptStarted) error {
	a, err := c.attempt(d.Attempt)
	if err != nil {
		return err
	}
	if a.started {
		return c.duplicate(Finding{Attempt: d.Attempt, Group: d.Group}, "attempt "+d.Attempt+" already started")
	}
	a.started, a.group, a.task, a.retryOf = true, d.Group, d.Task, d.RetryOf
	g, err := c.group(d.Group)
	if err != nil {
		return err
	}
	if g.done {
		// Whatever the attempt did, its group was judged without it.
		a.done = true
		if err := c.dropPayloads(d.Attempt, &a); err != nil {
			return err
		}
		frozen := attemptState{started: true, group: a.group, task: a.task, retryOf: a.retryOf,
			rewarded: a.rewarded, passed: a.passed, finished: a.finished, failed: a.failed, done: true}
		return c.late(d.Attempt, &frozen, "attempt.started")
	}
	g.members = append(g.members, d.Attempt)
	if err := c.putAttempt(d.Attempt, &a); err != nil {
		return err
	}
	if err := c.putGroup(d.Group, &g); err != nil {
		return err
	}
	return c.evaluate(d.Group, &g)
}

func (c *applyCtx) turnGenerated(d *events.TurnGenerated) error {
	a, err := c.attempt(d.Attempt)
	if err != nil {
		return err
	}
	if a.done {
		return c.late(d.Attempt, &a, fmt.Sprintf("turn %d", d.Turn))
	}
	i, found := turnIndex(a.turns, int64(d.Turn))
	if found {
		return c.duplicate(Finding{Attempt: d.Attempt, Turns: []int64{int64(d.Turn)}}, fmt.Sprintf("attempt %s already has turn %d", d.Attempt, d.Turn))
	}
	m := turnMeta{
		turn: int64(d.Turn), version: d.PolicyVersion(), completion: d.CompletionTokens,
		partition: c.pos.Partition, offset: c.pos.Offset,
		payload: len(d.ObservationTokenIDs) > 0 || len(d.TokenIDs) > 0,
	}
	if len(d.VersionSegments) > 1 {
		m.later = make([]events.VersionSegment, len(d.VersionSegments)-1)
		for i, vs := range d.VersionSegments[1:] {
			// How a version was known does not change a rule.
			m.later[i] = events.VersionSegment{Start: vs.Start, PolicyVersion: vs.PolicyVersion}
		}
	}
	if c.ev.V >= 3 {
		m.shape = &turnShape{Parent: -1, Prefix: d.PrefixTokens, Prompt: d.PromptTokens, Diverged: d.Diverged != nil, Temperature: 1}
		if d.Parent != nil {
			m.shape.Parent = int64(*d.Parent)
		}
		if temp, ok := d.Temperature(); ok {
			m.shape.Temperature = float32(temp)
		}
		m.refused = d.HasTag(events.TagRefused)
	}
	if m.payload && !a.started {
		// The worker writes attempt.started before its turns, so only a
		// producer out of its own order sends tokens for an attempt not
		// started: nothing would ever delete them if it never starts.
		m.payload = false
		if err := c.unstartedTokens(d.Attempt, &a, d.Turn); err != nil {
			return err
		}
	}
	a.turns = slices.Insert(a.turns, i, m)
	if m.payload {
		p := payload{observation: d.ObservationTokenIDs, tokens: d.TokenIDs, logprobs: d.Logprobs}
		if err := c.s.Set(turnKey(d.Attempt, m.turn), p.encode()); err != nil {
			return err
		}
	}
	return c.putAttempt(d.Attempt, &a)
}

// turnIndex finds turn n among an attempt's turns, ordered by number: its
// index, or the index it would take. Turns nearly always come in order, a
// new one after the last, and that is looked at first; the search reads
// only the turns' numbers (a turn's record is 88 bytes, and was
// copied for each comparison of slices.BinarySearchFunc's).
func turnIndex(turns []turnMeta, n int64) (int, bool) {
	if len(turns) == 0 || turns[len(turns)-1].turn < n {
		return len(turns), false
	}
	i := sort.Search(len(turns), func(i int) bool { return turns[i].turn >= n })
	return i, turns[i].turn == n
}

func (c *applyCtx) contextCompacted(d *events.ContextCompacted) error {
	a, err := c.attempt(d.Attempt)
	if err != nil {
		return err
	}
	if a.done {
		return c.late(d.Attempt, &a, fmt.Sprintf("compaction after turn %d", d.Turn))
	}
	i, found := slices.BinarySearch(a.compactions, int64(d.Turn))
	if found {
		return c.duplicate(Finding{Attempt: d.Attempt, Turns: []int64{int64(d.Turn)}}, fmt.Sprintf("attempt %s was already compacted after turn %d", d.Attempt, d.Turn))
	}
	a.compactions = slices.Insert(a.compactions, i, int64(d.Turn))
	return c.putAttempt(d.Attempt, &a)
}

// late reports the first fact about an attempt that arrives after its group
// completed; the attempt's later facts are ignored without another finding,
// so a straggler costs one finding, not one per turn.
func (c *applyCtx) late(attempt string, a *attemptState, what string) error {
	if a.late {
		return nil
	}
	a.late = true
	if err := c.putAttempt(attempt, a); err != nil {
		return err
	}
	return c.finding(Finding{Kind: FindingLateFact, Event: c.ev.ID, Type: c.ev.Type, Group: a.group, Attempt: attempt,
		Detail: what + " of attempt " + attempt + " arrived after group " + a.group + " completed; it and the attempt's later turns are ignored"})
}

// unstartedTokens reports, once per attempt, inline tokens that arrived
// before the attempt's attempt.started. The fold keeps the turn but not its
// tokens: an attempt that never starts would otherwise hold them forever,
// and a rule that deleted them later would make the samples depend on how
// long the attempt.started took (docs/design.md §6.1).
func (c *applyCtx) unstartedTokens(attempt string, a *attemptState, turn int) error {
	if a.unstarted {
		return nil
	}
	a.unstarted = true
	return c.finding(Finding{Kind: FindingUnstartedTokens, Event: c.ev.ID, Type: c.ev.Type, Attempt: attempt, Turns: []int64{int64(turn)},
		Detail: fmt.Sprintf("turn %d of attempt %s carries inline tokens before the attempt started; the turn is kept without them, and so are the attempt's later turns until it starts", turn, attempt)})
}

// attemptSettled applies attempt.finished (failed false) or attempt.failed.
func (c *applyCtx) attemptSettled(attempt string, failed bool) error {
	a, err := c.attempt(attempt)
	if err != nil {
		return err
	}
	if failed && a.failed || !failed && a.finished {
		return c.duplicate(Finding{Attempt: attempt}, "attempt "+attempt+" already reported "+string(c.ev.Type))
	}
	if failed {
		a.failed = true
	} else {
		a.finished = true
		if a.rewarded {
			a.completedSeq = c.pos.Seq
		}
	}
	if err := c.putAttempt(attempt, &a); err != nil {
		return err
	}
	return c.evaluateAttemptGroup(&a)
}

func (c *applyCtx) rewardComputed(d *events.RewardComputed) error {
	a, err := c.attempt(d.Attempt)
	if err != nil {
		return err
	}
	if a.rewarded {
		return c.duplicate(Finding{Attempt: d.Attempt, Group: a.group}, "attempt "+d.Attempt+" was already rewarded")
	}
	if a.done {
		return c.finding(Finding{Kind: FindingLateReward, Event: c.ev.ID, Type: c.ev.Type, Group: a.group, Attempt: d.Attempt,
			Detail: "reward for attempt " + d.Attempt + " arrived after group " + a.group + " completed; it changes nothing"})
	}
	a.rewarded, a.passed = true, d.Passed
	a.testsPassed, a.testsTotal = int64(d.TestsPassed), int64(d.TestsTotal)
	if a.finished {
		a.completedSeq = c.pos.Seq
	}
	if err := c.putAttempt(d.Attempt, &a); err != nil {
		return err
	}
	return c.evaluateAttemptGroup(&a)
}

func (c *applyCtx) groupClosed(d *events.GroupClosed) error {
	g, err := c.group(d.Group)
	if err != nil {
		return err
	}
	if g.closed {
		return c.duplicate(Finding{Group: d.Group}, "group "+d.Group+" was already closed")
	}
	if g.done {
		// Completed with every slot complete before the scheduler gave
		// up: nothing left to close.
		return nil
	}
	g.closed = true
	if err := c.putGroup(d.Group, &g); err != nil {
		return err
	}
	return c.evaluate(d.Group, &g)
}

func (c *applyCtx) evaluateAttemptGroup(a *attemptState) error {
	if !a.started || a.done {
		return nil
	}
	g, err := c.group(a.group)
	if err != nil {
		return err
	}
	return c.evaluate(a.group, &g)
}

// member is one attempt of a group under evaluation.
type member struct {
	id string
	a  attemptState
}

// evaluate completes the group if its inputs now allow it.
func (c *applyCtx) evaluate(id string, g *groupState) error {
	if !g.started || g.done {
		return nil
	}
	members := make([]member, 0, len(g.members))
	complete := 0
	for _, m := range g.members {
		a, err := c.attempt(m)
		if err != nil {
			return err
		}
		if a.rewarded && a.finished {
			complete++
		}
		members = append(members, member{id: m, a: a})
	}
	size := g.size
	if size < 1 {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		size = int64(cfg.GroupSize)
	}
	// Each complete slot holds a complete attempt: with fewer of those
	// than size slots, an open group cannot complete, whatever its slots.
	if !g.closed && int64(complete) < size {
		return nil
	}
	index := make(map[string]int, len(members))
	for i := range members {
		index[members[i].id] = i
	}
	roots := slotRoots(members, index)
	// Each complete slot is held by its attempt that completed first.
	rep := map[string]int{}
	for i := range members {
		a := &members[i].a
		if !a.rewarded || !a.finished {
			continue
		}
		if j, ok := rep[roots[i]]; !ok || a.completedSeq < members[j].a.completedSeq {
			rep[roots[i]] = i
		}
	}
	closedEarly := false
	if int64(len(rep)) < size {
		if !g.closed {
			return nil
		}
		closedEarly = true
	}
	included := make([]int, 0, len(rep))
	for _, i := range rep {
		included = append(included, i)
	}
	slices.SortFunc(included, func(x, y int) int { return cmp.Compare(members[x].id, members[y].id) })
	return c.complete(id, g, members, included, closedEarly)
}

// slotRoots names the slot of every member: the root of its retry_of chain
// within the group. An attempt outside the group (not started yet, or
// unknown) is the root of its chain, so a retry whose original arrives later
// lands in the same slot. Each member is visited once.
func slotRoots(members []member, index map[string]int) []string {
	const (
		unseen = iota
		walking
		resolved
	)
	roots := make([]string, len(members))
	state := make([]uint8, len(members))
	at := make([]int, len(members)) // position on the current walk
	var path []int
	for i := range members {
		path = path[:0]
		j, root := i, ""
		for {
			if state[j] == resolved {
				root = roots[j]
				break
			}
			if state[j] == walking {
				// Attempts retrying each other in a cycle: the smallest
				// id of the cycle names the slot, wherever a walk enters.
				root = members[j].id
				for _, k := range path[at[j]:] {
					root = min(root, members[k].id)
				}
				break
			}
			state[j], at[j] = walking, len(path)
			path = append(path, j)
			next := members[j].a.retryOf
			if next == "" {
				root = members[j].id
				break
			}
			k, ok := index[next]
			if !ok {
				root = next
				break
			}
			j = k
		}
		for _, k := range path {
			roots[k], state[k] = root, resolved
		}
	}
	return roots
}

// complete freezes a group and hands it to its purpose's rule.
func (c *applyCtx) complete(id string, g *groupState, members []member, included []int, closedEarly bool) error {
	g.done, g.members = true, nil
	if err := c.putGroup(id, g); err != nil {
		return err
	}
	in := make([]bool, len(members))
	for _, i := range included {
		in[i] = true
	}
	for i := range members {
		m := &members[i]
		if !in[i] {
			if err := c.dropPayloads(m.id, &m.a); err != nil {
				return err
			}
		}
		// A frozen attempt only needs to make later facts about it late;
		// its turns travel on in memory (and in the open batch).
		frozen := attemptState{started: true, group: m.a.group, task: m.a.task, retryOf: m.a.retryOf,
			rewarded: m.a.rewarded, passed: m.a.passed, finished: m.a.finished, failed: m.a.failed, done: true}
		if err := c.putAttempt(m.id, &frozen); err != nil {
			return err
		}
	}

	if err := c.checkEntities(id, g, members); err != nil {
		return err
	}
	kept := make([]member, len(included))
	for n, i := range included {
		kept[n] = members[i]
		if err := c.checkTurns(id, &kept[n]); err != nil {
			return err
		}
	}

	switch g.purpose {
	case events.PurposeTrain:
		return c.placeTrainGroup(id, g, kept, closedEarly)
	case events.PurposeProbe:
		if err := c.countProbes(g.task, kept); err != nil {
			return err
		}
	}
	for i := range kept {
		if err := c.dropPayloads(kept[i].id, &kept[i].a); err != nil {
			return err
		}
	}
	return nil
}

// checkEntities reports references, at completion, to entities the run
// never declared: the group's task, and attempts a member retries that are
// not attempts of the group.
func (c *applyCtx) checkEntities(id string, g *groupState, members []member) error {
	t, err := c.task(g.task)
	if err != nil {
		return err
	}
	if !t.registered {
		if err := c.finding(Finding{Kind: FindingUnknownEntity, Task: g.task, Group: id,
			Detail: "group " + id + " completed for task " + g.task + ", which was never registered"}); err != nil {
			return err
		}
	}
	known := make(map[string]bool, len(members))
	for _, m := range members {
		known[m.id] = true
	}
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(x, y member) int { return cmp.Compare(x.id, y.id) })
	for _, m := range sorted {
		if m.a.retryOf != "" && !known[m.a.retryOf] {
			if err := c.finding(Finding{Kind: FindingUnknownEntity, Group: id, Attempt: m.id,
				Detail: "attempt " + m.id + " retries " + m.a.retryOf + ", which is not an attempt of group " + id}); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropPayloads deletes the stored inline tokens of an attempt's turns.
func (c *applyCtx) dropPayloads(id string, a *attemptState) error {
	for i := range a.turns {
		if a.turns[i].payload {
			if err := c.s.Delete(turnKey(id, a.turns[i].turn)); err != nil {
				return err
			}
			a.turns[i].payload = false
		}
	}
	return nil
}
