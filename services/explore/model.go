package explore

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Model is one run's history as the explorer reads it: every fact joined
// to the decisions the projector recorded about it. Feed it the run's facts
// in log order with [Model.Fact] and its decisions with [Model.Decision];
// a decision may come any time after the fact that caused it. Facts are
// numbered as the fold numbers them (duplicates included), so positions in
// the views are the decisions' positions.
//
// Like every projection it is a fold that does not care in which order
// causally related facts of different producers arrive (docs/design.md
// §5.3): a turn, tool call, finish, failure or reward that comes before
// its attempt.started is kept on the attempt it names and shown once the
// attempt starts, so every figure the views show is the same whatever the
// order.
//
// The model keeps what the views show — turns with their tokens, tool
// calls, rewards — so it grows with the run; it is rebuilt, never stored.
type Model struct {
	run string

	facts      uint64
	firstAt    time.Time
	lastAt     time.Time
	arrivedAt  time.Time   // the latest a fact reached the log ([Model.Arrived])
	versions   map[int]int // catalogue version → facts
	configured bool
	config     events.Config

	tasks     map[string]*task
	taskOrder []string
	groups    map[string]*group
	groupList []string
	attempts  map[string]*attempt // started or only named so far
	attList   []string            // the started ones, in the order they started
	retries   map[string]*attempt // retries seen before the attempt they retry, by its id

	batches   []*batch // by seq-1; nil where not yet recorded
	gradients map[int64]gradient
	policies  []policy
	findings  []Finding
	decided   map[string]bool // decision ids seen
	kindSeq   map[events.Type]uint64
	admitted  int
	rejected  int
	// vocabs are the engines' vocabularies, by engine, in the order first
	// registered.
	vocabs     map[string]*vocabulary
	vocabOrder []string

	audit *projections.Audit
}

type task struct {
	events.TaskRegistered
	registered  bool
	fact        projections.FactPosition
	groups      []string
	decision    string
	decisionSeq uint64
	decidedAt   projections.FactPosition
	admission   projections.Admission
}

type group struct {
	events.GroupStarted
	fact     projections.FactPosition
	members  []string
	closed   string
	batch    uint64 // the batch that used it
	dropped  string // the reason it was dropped
	dropSeal uint64 // the batch whose manifest lists the drop
	slots    int
}

type attempt struct {
	events.AttemptStarted
	started   bool // its attempt.started was applied
	fact      projections.FactPosition
	slot      int
	retriedBy string
	turns     []*turn
	outcome   string
	failed    string
	reward    *events.RewardComputed
	batch     uint64
	judged    *projections.BatchAttempt
}

type turn struct {
	events.TurnGenerated
	generated  bool // its turn.generated was applied
	fact       projections.FactPosition
	tools      []events.ToolCalled // by call
	compaction *events.ContextCompacted
}

type batch struct {
	projections.Manifest
	decision projections.FactPosition
	trend    trend
}

type gradient struct {
	events.GradientApplied
	fact projections.FactPosition
}

type policy struct {
	events.PolicyPublished
	fact projections.FactPosition
}

// Finding is an audit.finding decision and the fact that caused it. Seq
// is 0, and Fact names a position with no fact sequence number, for a
// misrouted finding, which no fold numbers.
type Finding struct {
	Seq  uint64                   `json:"seq"`
	Fact projections.FactPosition `json:"fact"`
	projections.Finding
}

// NewModel returns an empty model of run.
func NewModel(run string) *Model {
	return &Model{run: run, versions: map[int]int{}, config: events.DefaultConfig(),
		tasks: map[string]*task{}, groups: map[string]*group{}, attempts: map[string]*attempt{}, retries: map[string]*attempt{},
		gradients: map[int64]gradient{}, decided: map[string]bool{}, kindSeq: map[events.Type]uint64{}, vocabs: map[string]*vocabulary{},
		audit: projections.NewAudit(run)}
}

// Run is the run the model holds.
func (m *Model) Run() string { return m.run }

// Facts is the number of facts applied.
func (m *Model) Facts() uint64 { return m.facts }

// Fact applies the run's next fact, found at partition and offset. ev must
// be of the model's run.
func (m *Model) Fact(partition int32, offset int64, value []byte, ev events.Event) {
	m.facts++
	pos := projections.FactPosition{Seq: m.facts, Partition: partition, Offset: offset}
	if m.firstAt.IsZero() || ev.At.Before(m.firstAt) {
		m.firstAt = ev.At
	}
	if ev.At.After(m.lastAt) {
		m.lastAt = ev.At
	}
	m.versions[ev.V]++
	m.audit.Fact(projections.Record{Value: value, Event: ev, Partition: partition, Offset: offset})
	switch d := ev.Data.(type) {
	case *events.RunStarted:
		if cfg := d.Config.Resolve(); cfg.Validate() == nil {
			m.configured, m.config = true, cfg
		}
	case *events.TaskRegistered:
		t := m.task(d.Task)
		if !t.registered {
			t.TaskRegistered, t.registered, t.fact = *d, true, pos
		}
	case *events.GroupStarted:
		g := m.group(d.Group)
		if g.fact.Seq == 0 {
			g.GroupStarted, g.fact = *d, pos
			t := m.task(d.Task)
			t.groups = append(t.groups, d.Group)
		}
	case *events.AttemptStarted:
		a := m.attempt(d.Attempt)
		if a.started {
			return
		}
		g := m.group(d.Group)
		a.AttemptStarted, a.started, a.fact = *d, true, pos
		// A retry takes the slot of the attempt it retries, whichever of
		// the two the log holds first (producers race).
		if prev := m.attempts[d.RetryOf]; d.RetryOf != "" && prev != nil && prev.started {
			a.slot, prev.retriedBy = prev.slot, d.Attempt
		} else if retry := m.retries[d.Attempt]; retry != nil {
			a.slot, a.retriedBy = retry.slot, retry.Attempt
			delete(m.retries, d.Attempt)
		} else {
			a.slot = g.slots
			g.slots++
			if d.RetryOf != "" {
				m.retries[d.RetryOf] = a
			}
		}
		g.members = append(g.members, d.Attempt)
		m.attList = append(m.attList, d.Attempt)
	case *events.TurnGenerated:
		t := m.attempt(d.Attempt).turnAt(d.Turn)
		if t.generated {
			return
		}
		t.TurnGenerated, t.generated, t.fact = *d, true, pos
	case *events.ToolCalled:
		t := m.attempt(d.Attempt).turnAt(d.Turn)
		i := len(t.tools)
		for i > 0 && t.tools[i-1].Call > d.Call {
			i--
		}
		t.tools = slices.Insert(t.tools, i, *d)
	case *events.ContextCompacted:
		if t := m.attempt(d.Attempt).turnAt(d.Turn); t.compaction == nil {
			t.compaction = d
		}
	case *events.AttemptFinished:
		if a := m.attempt(d.Attempt); a.outcome == "" {
			a.outcome = d.Outcome
		}
	case *events.AttemptFailed:
		if a := m.attempt(d.Attempt); a.failed == "" {
			a.failed = d.Reason
		}
	case *events.RewardComputed:
		if a := m.attempt(d.Attempt); a.reward == nil {
			a.reward = d
		}
	case *events.GroupClosed:
		if g := m.group(d.Group); g.closed == "" {
			g.closed = d.Reason
		}
	case *events.PolicyPublished:
		m.policies = append(m.policies, policy{*d, pos})
	case *events.GradientApplied:
		if _, ok := m.gradients[d.Batch]; !ok {
			m.gradients[d.Batch] = gradient{*d, pos}
		}
	case *events.VocabularyRegistered:
		m.vocabularyFact(d)
	}
}

// Arrived says a fact of the run reached the log at t (the Kafka record's
// timestamp): a run being ingested is live by when its facts arrive,
// whatever clock its producers put in `at`.
func (m *Model) Arrived(t time.Time) {
	if t.After(m.arrivedAt) {
		m.arrivedAt = t
	}
}

// Decision applies a decision the projector recorded about the run;
// re-emissions (the same id) are ignored.
func (m *Model) Decision(value []byte) error {
	var env projections.Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return fmt.Errorf("explore: decision does not decode: %w", err)
	}
	if env.Run != m.run || m.decided[env.ID] {
		return nil
	}
	m.decided[env.ID] = true
	// A misrouted finding is made outside the run's fold, which numbers
	// every other decision (docs/design.md §11.2): it has no sequence
	// number, and takes none from the findings the fold numbers.
	var seq uint64
	if !projections.IsMisrouted(env) {
		m.kindSeq[env.Type]++
		seq = m.kindSeq[env.Type]
	}
	if err := m.audit.Decision(projections.Decision{ID: env.ID, Run: env.Run, Kind: env.Type, Seq: seq, Value: value}); err != nil {
		return err
	}
	switch env.Type {
	case projections.KindBatchSealed:
		var man projections.Manifest
		if err := json.Unmarshal(env.Data, &man); err != nil {
			return fmt.Errorf("explore: batch.sealed %s: %w", env.ID, err)
		}
		m.seal(&batch{Manifest: man, decision: env.Fact})
	case projections.KindTaskAdmitted, projections.KindTaskRejected:
		var ad projections.Admission
		if err := json.Unmarshal(env.Data, &ad); err != nil {
			return fmt.Errorf("explore: %s %s: %w", env.Type, env.ID, err)
		}
		t := m.task(ad.Task)
		t.admission, t.decidedAt, t.decisionSeq = ad, env.Fact, seq
		if env.Type == projections.KindTaskRejected {
			t.decision = "rejected"
			m.rejected++
		} else {
			t.decision = "admitted"
			m.admitted++
		}
	case projections.KindAuditFinding:
		var f projections.Finding
		if err := json.Unmarshal(env.Data, &f); err != nil {
			return fmt.Errorf("explore: audit.finding %s: %w", env.ID, err)
		}
		m.findings = append(m.findings, Finding{Seq: seq, Fact: env.Fact, Finding: f})
	}
	return nil
}

func (m *Model) seal(b *batch) {
	for len(m.batches) < int(b.Seq) {
		m.batches = append(m.batches, nil)
	}
	m.batches[b.Seq-1] = b
	for gi := range b.Groups {
		bg := &b.Groups[gi]
		m.group(bg.Group).batch = b.Seq
		for ai := range bg.Attempts {
			ba := &bg.Attempts[ai]
			a := m.attempt(ba.Attempt)
			a.batch, a.judged = b.Seq, ba
		}
	}
	for _, d := range b.Dropped {
		g := m.group(d.Group)
		g.dropped, g.dropSeal = d.Reason, b.Seq
	}
	b.trend = m.trendOf(b)
}

func (m *Model) task(id string) *task {
	t := m.tasks[id]
	if t == nil {
		t = &task{decision: "pending"}
		t.Task = id
		m.tasks[id] = t
		m.taskOrder = append(m.taskOrder, id)
	}
	return t
}

func (m *Model) group(id string) *group {
	g := m.groups[id]
	if g == nil {
		g = &group{}
		g.Group = id
		m.groups[id] = g
		m.groupList = append(m.groupList, id)
	}
	return g
}

// attempt is the attempt id names, made (not started yet) when no fact
// named it before.
func (m *Model) attempt(id string) *attempt {
	a := m.attempts[id]
	if a == nil {
		a = &attempt{}
		a.Attempt = id
		m.attempts[id] = a
	}
	return a
}

// turnAt is the attempt's turn n, made (not generated yet) when no fact
// named it before.
func (a *attempt) turnAt(n int) *turn {
	i, ok := slices.BinarySearchFunc(a.turns, n, func(t *turn, n int) int { return cmp.Compare(t.Turn, n) })
	if !ok {
		t := &turn{}
		t.Turn = n
		a.turns = slices.Insert(a.turns, i, t)
	}
	return a.turns[i]
}

// generated are the attempt's turns whose turn.generated was applied, by
// turn index.
func (a *attempt) generated() []*turn {
	out := make([]*turn, 0, len(a.turns))
	for _, t := range a.turns {
		if t.generated {
			out = append(out, t)
		}
	}
	return out
}

// judgedTurn is the batch's judgement of turn n, nil when none.
func (a *attempt) judgedTurn(n int) *projections.BatchTurn {
	if a.judged == nil {
		return nil
	}
	for i := range a.judged.Turns {
		if a.judged.Turns[i].Turn == int64(n) {
			return &a.judged.Turns[i]
		}
	}
	return nil
}

func (m *Model) sealed() int {
	n := 0
	for _, b := range m.batches {
		if b != nil {
			n++
		}
	}
	return n
}
