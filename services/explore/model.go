package explore

import (
	"fmt"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Model is one run's explorer records held in memory: a [Writer] over a
// map, for a run the projector's database does not hold (an archive's
// bundle, a run folded before the records were kept) and for tests. Feed
// it the run's facts in log order with [Model.Fact] and its decisions with
// [Model.Decision]; a decision may come any time after the fact that
// caused it. Facts are numbered as the fold numbers them (duplicates
// included), so positions in the views are the decisions' positions.
//
// Its views are those the server answers from the projector's database
// ([Snapshot]), made by the same code from the same records.
type Model struct {
	w  *Writer
	kv *memKV
	// seen holds the event id of every fact, to tell a repeat as the
	// fold does; decided the decisions' ids, kindSeq their numbers.
	seen    map[string]struct{}
	decided map[string]bool
	kindSeq map[events.Type]uint64
	vocabs  vocabCache
	err     error
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
	return &Model{w: NewWriter(run), kv: newMemKV(), seen: map[string]struct{}{}, decided: map[string]bool{},
		kindSeq: map[events.Type]uint64{}}
}

// Run is the run the model holds.
func (m *Model) Run() string { return m.w.run }

// Facts is the number of facts applied.
func (m *Model) Facts() uint64 {
	if m.w.sum == nil {
		return 0
	}
	return m.w.sum.Facts
}

// Fact applies the run's next fact, found at partition and offset. ev must
// be of the model's run.
func (m *Model) Fact(partition int32, offset int64, value []byte, ev events.Event) {
	_, repeat := m.seen[ev.ID]
	m.seen[ev.ID] = struct{}{}
	if err := m.w.Fact(m.kv, projections.Record{Value: value, Event: ev, Partition: partition, Offset: offset}, repeat, time.Time{}); err != nil && m.err == nil {
		m.err = err
	}
}

// Arrived says a fact of the run reached the log at t (the Kafka record's
// timestamp): a run being ingested is live by when its facts arrive,
// whatever clock its producers put in `at`.
func (m *Model) Arrived(t time.Time) {
	if err := m.w.Arrived(m.kv, t); err != nil && m.err == nil {
		m.err = err
	}
}

// Decision applies a decision the projector recorded about the run;
// re-emissions (the same id) are ignored.
func (m *Model) Decision(value []byte) error {
	var env projections.Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return fmt.Errorf("explore: decision does not decode: %w", err)
	}
	if env.Run != m.Run() || m.decided[env.ID] {
		return nil
	}
	m.decided[env.ID] = true
	var seq uint64
	if !projections.IsMisrouted(env) {
		m.kindSeq[env.Type]++
		seq = m.kindSeq[env.Type]
	}
	return m.w.Decision(m.kv, seq, value)
}

// Snapshot is the model's records as a view reads them, current with
// every fact and decision applied.
func (m *Model) Snapshot() (*Snapshot, error) {
	if m.err != nil {
		return nil, m.err
	}
	if err := m.w.Flush(m.kv); err != nil {
		return nil, err
	}
	s, ok, err := openSnapshot(m.Run(), m.kv, &m.vocabs)
	if err == nil && !ok {
		s = emptySnapshot(m.Run(), m.kv, &m.vocabs)
	}
	return s, err
}

// view runs fn on the model's snapshot; a model that cannot be read
// (which memory cannot fail) shows nothing.
func view[T any](m *Model, fn func(*Snapshot) (T, bool, error)) (T, bool) {
	var zero T
	s, err := m.Snapshot()
	if err != nil {
		return zero, false
	}
	v, ok, err := fn(s)
	if err != nil {
		return zero, false
	}
	return v, ok
}

// Summary is the run's line of the runs list; now decides live or idle.
func (m *Model) Summary(now time.Time) RunSummary {
	v, _ := view(m, func(s *Snapshot) (RunSummary, bool, error) { return s.Summary(now), true, nil })
	return v
}

// RunView builds the run view.
func (m *Model) RunView(now time.Time) RunView {
	v, _ := view(m, func(s *Snapshot) (RunView, bool, error) { v, err := s.RunView(now); return v, true, err })
	return v
}

// StepView builds the view of batch seq; ok is false when it is not sealed.
func (m *Model) StepView(seq uint64) (StepView, bool) {
	return view(m, func(s *Snapshot) (StepView, bool, error) { return s.StepView(seq) })
}

// GroupView builds the view of a group; ok is false when it is unknown.
func (m *Model) GroupView(id string) (GroupView, bool) {
	return view(m, func(s *Snapshot) (GroupView, bool, error) { return s.GroupView(id) })
}

// SideView builds a group's side-by-side view; ok is false when the group
// is unknown.
func (m *Model) SideView(id string) (SideView, bool) {
	return view(m, func(s *Snapshot) (SideView, bool, error) { return s.SideView(id) })
}

// AttemptView builds an attempt's timeline; ok is false when it is unknown.
func (m *Model) AttemptView(id string) (AttemptView, bool) {
	return view(m, func(s *Snapshot) (AttemptView, bool, error) { return s.AttemptView(id) })
}

// TaskView builds a task's view; ok is false when it is unknown.
func (m *Model) TaskView(id string) (TaskView, bool) {
	return view(m, func(s *Snapshot) (TaskView, bool, error) { return s.TaskView(id, "", 0) })
}

// Attempts lists every attempt of the run in the order started.
func (m *Model) Attempts() []AttemptRow {
	v, _ := view(m, func(s *Snapshot) ([]AttemptRow, bool, error) {
		p, err := s.Attempts("", 0)
		return p.Attempts, true, err
	})
	return v
}

// Tasks lists the run's tasks in the order first seen.
func (m *Model) Tasks() []TaskRow {
	v, _ := view(m, func(s *Snapshot) ([]TaskRow, bool, error) {
		p, err := s.Tasks("", 0)
		return p.Tasks, true, err
	})
	return v
}

// Search finds q in the run's text ([Snapshot.Search]).
func (m *Model) Search(q, cursor string, limit int) (SearchView, error) {
	s, err := m.Snapshot()
	if err != nil {
		return SearchView{}, err
	}
	return s.Search(q, cursor, limit)
}
