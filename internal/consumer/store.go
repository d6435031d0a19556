package consumer

import (
	"context"
	"crypto/sha256"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// Store is the state a consumer keeps: what it has made of the records it
// read, and, inside that same state, the offset of the next record of
// every partition it reads. The consumer never stores an offset anywhere
// else (not in Kafka's consumer groups): the offsets are the Store's.
//
// The contract, which every Store and [Session] must keep for the
// consumer's exactly-once promise to hold:
//
//   - Offsets and state move together. [Session.Apply] commits a window's
//     effects and the partitions' next offsets ([Window.Partitions]) in
//     one atomic step — one Pebble batch, one Postgres transaction. After a
//     crash the Store holds either both or neither.
//   - Apply is deterministic in what it commits: the same records in the
//     same per-partition order, on the same committed state, commit the
//     same state. Windows may be cut differently after a restart (their
//     bounds depend on timing), so the outcome must not depend on where a
//     window starts or ends, only on the records in order.
//   - Effects outside the commit (the projector's decisions written to
//     Kafka) happen before it and must be safe to repeat: a crash between
//     them and the commit replays the window from the stored offsets, so
//     they happen again, and must then be identical (same ids, same bytes)
//     for downstream consumers to drop. Such a Session calls
//     [Window.CommitPoint] between them and the commit, which is where
//     crash tests kill the process.
//   - A window that fails is not committed. The session ends; the consumer
//     either stops ([Options.Restart] false) or opens a new session, which
//     reads from the offsets the Store holds, so nothing is skipped.
//   - A Store must tolerate a record read again (the window after the last
//     commit is read again by the next session) but never commits one
//     twice: that is what storing the offsets with the state buys.
type Store interface {
	// Open begins a session over parts and returns, for each of them,
	// where the Store's committed state says to read from. A partition
	// missing from the map is read from offset 0. Open may fail; with
	// [Options.Restart] the consumer tries again after a backoff.
	Open(ctx context.Context, parts []kafkalog.TopicPartition) (Session, map[kafkalog.TopicPartition]Stored, error)
}

// Stored is what a Store says of one partition when a session opens.
type Stored struct {
	// Next is the offset of the next record to apply.
	Next int64
	// Mark, when set, is a record the Store applied from this partition
	// (the first it ever read there, see [Range.Mark]). The consumer reads
	// it back to check that the partition still holds the log the offsets
	// count in.
	Mark *Mark
}

// Mark identifies one record of a partition by its offset and the
// SHA-256 of its value.
type Mark struct {
	Offset      int64
	Fingerprint []byte
}

// Fingerprint is the fingerprint of a record's value in a [Mark].
func Fingerprint(value []byte) []byte {
	s := sha256.Sum256(value)
	return s[:]
}

// Session is one life of a Store's connection to its state: from Open
// until a failure or the consumer's end, when Close is called. The
// consumer calls Apply (and Idle, Rewind) from one goroutine, one call at
// a time.
type Session interface {
	// Apply applies a window of records and commits it with the next
	// offsets of its partitions, atomically (see [Store]). A nil return
	// means both are committed.
	Apply(ctx context.Context, w *Window) error
	// Close releases the session. The consumer calls it once, after the
	// last Apply returned.
	Close() error
}

// Preparer is a Session that does part of a window's work ahead of Apply,
// without touching the state: the sink decodes the next window's rows on
// every core while the previous one is being written. Prepare runs on
// another goroutine than Apply, concurrently with the Apply of the
// previous window; it may set [Window.Prepared] for Apply to use. A
// Session that is not a Preparer has each window cut only after the
// previous one is committed.
type Preparer interface {
	Prepare(w *Window)
}

// Idler is a Session that wants to hear when the log is quiet:
// [kafkalog.WindowOptions.Idle] passed without a record. The sink checks
// that its stored offsets were not moved by another writer. An error ends
// the session.
type Idler interface {
	Idle(ctx context.Context) error
}

// Rewinder is a Session that can start a partition over: when the
// partition holds another log than the one its stored offset counts in —
// the log is shorter than the offset, or the marked record differs, as
// when a development broker is re-created under the same topic names —
// the consumer calls Rewind and reads the partition from offset 0.
// Rewind must move the stored offset from `from` to 0 atomically, and fail
// if it is no longer `from`. A Session that is not a Rewinder keeps its
// offset: the consumer logs the mismatch and reads from the stored offset
// (the log may yet grow to it), since a state folded from records it can no
// longer read cannot be rebuilt by reading them again.
type Rewinder interface {
	Rewind(ctx context.Context, tp kafkalog.TopicPartition, from int64) error
}

// Window is a run of records read together and applied in one commit.
type Window struct {
	// Records in per-partition offset order; records of different
	// partitions interleave.
	Records []kafkalog.Message
	// Partitions is how the window advances each partition it holds.
	Partitions map[kafkalog.TopicPartition]Range
	// Prepared is what a [Preparer] made of the window, for Apply.
	Prepared any

	commitPoint func()
}

// Range is a window's records of one partition.
type Range struct {
	// First is the offset of the first record, Next the offset past the
	// last: the partition's stored offset once the window is committed.
	First, Next int64
	// HighWaterMark is the highest log end read with the records.
	HighWaterMark int64
	// Mark identifies the first record; a Store that keeps the first mark
	// of each partition lets the consumer recognise a re-created log.
	Mark Mark
}

// CommitPoint marks the instant between a window's effects outside the
// commit and the commit itself, where a crash must lose and change
// nothing. Sessions call it right before committing; crash tests inject
// their kill there ([Options.CommitPoint], [CrashAfter]).
func (w *Window) CommitPoint() {
	if w.commitPoint != nil {
		w.commitPoint()
	}
}

func newWindow(msgs []kafkalog.Message, commitPoint func()) *Window {
	w := &Window{Records: msgs, Partitions: map[kafkalog.TopicPartition]Range{}, commitPoint: commitPoint}
	for i := range msgs {
		m := &msgs[i]
		tp := kafkalog.TopicPartition{Topic: m.Topic, Partition: m.Partition}
		r, ok := w.Partitions[tp]
		if !ok {
			r = Range{First: m.Offset, Mark: Mark{Offset: m.Offset, Fingerprint: Fingerprint(m.Value)}}
		}
		r.Next = m.Offset + 1
		r.HighWaterMark = max(r.HighWaterMark, m.HighWaterMark)
		w.Partitions[tp] = r
	}
	return w
}
