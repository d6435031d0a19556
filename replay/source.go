package replay

import (
	"bytes"
	"context"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Fact is one record of a run's history as a [Source] gives it.
type Fact struct {
	// Seq is the fact's position in the run's history, from 1: the fold's
	// fact sequence number and the fact tree's leaf index plus one.
	Seq uint64
	// Partition and Offset are where the record was in the facts topic.
	Partition int32
	Offset    int64
	// Value is the record value, the leaf's preimage. It is the caller's
	// to keep.
	Value []byte
	// Event is the decoded Value when the source decoded it already; its
	// zero value otherwise.
	Event events.Event
	// Repeat is set by Fold on a fact the fold ignored as a repeat of an
	// event id it folded before (projections.Fold.Repeat).
	Repeat bool
	// keyed says the Kafka record carried the run as its key (the Kafka
	// source's own bookkeeping).
	keyed bool
	// digests are Value's, when a decode worker computed them ahead of
	// the fold (see decoded).
	digests projections.Digests
}

// Record is the fact as the fold takes it.
func (f Fact) Record() projections.Record {
	return projections.Record{Value: f.Value, Event: f.Event, Partition: f.Partition, Offset: f.Offset, Digests: f.digests}
}

// leaf is the fact's leaf hash, computed once.
func (f *Fact) leaf() []byte {
	if f.digests.Set() {
		return f.digests.Leaf()
	}
	return projections.LeafHash(f.Value)
}

// Recorded is a decision as it was recorded: its value and where it was on
// the decisions topic.
type Recorded struct {
	Partition int32
	Offset    int64
	Value     []byte
}

// Source is a run's recorded history: its facts in log order and the
// decisions the projector recorded about them. The Kafka topics
// ([OpenKafka]) and an exported archive ([OpenArchive]) are the two; both
// pass one test suite.
type Source interface {
	// Run is the run the source holds.
	Run() string
	// Facts calls fn for every fact of the run, in log order, numbered
	// from 1. An error from fn ends the iteration and is returned as is.
	Facts(ctx context.Context, fn func(Fact) error) error
	// Decisions calls fn for every decision recorded about the run, in
	// the order recorded, identical re-emissions included. Each value is
	// fn's to keep. An error from fn ends the iteration and is returned
	// as is.
	Decisions(ctx context.Context, fn func(Recorded) error) error
	// Describe names the source for people.
	Describe() string
}

// FactsBounder is a Source that knows, before it is read, at most how many
// facts it holds (0: it cannot say). A pass over it sizes the filter of its
// dedup index by that bound (docs/design.md §14.2); a source wrapping
// another passes the other's bound on.
type FactsBounder interface {
	FactsBound() uint64
}

// LeafIndexer is a Source that also carries the leaf hashes its exporter
// computed, fact by fact, as it read the history (an archive's leaf index).
// Replay never takes them on trust: it recomputes every leaf from the
// facts, and believes the index only as far as the index reproduces the
// heads the projector recorded; then it can say exactly which fact of the
// history differs, and how.
type LeafIndexer interface {
	// Leaves calls fn for every leaf of the index, in order, from seq 1.
	Leaves(ctx context.Context, fn func(seq uint64, leaf []byte) error) error
}

// quickRun reads the run id of a canonically encoded event or decision
// ({"id":"<36>","run":"<run>",...}) without decoding it; ok is false when
// the value does not start that way and must be decoded to know.
func quickRun(value []byte) (run []byte, ok bool) {
	const head = len(`{"id":"`) + 36
	const mid = `","run":"`
	if len(value) < head+len(mid) || !bytes.HasPrefix(value, []byte(`{"id":"`)) || string(value[head:head+len(mid)]) != mid {
		return nil, false
	}
	rest := value[head+len(mid):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, false
	}
	return rest[:end], true
}
