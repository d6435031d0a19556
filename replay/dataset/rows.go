package dataset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"os"

	"github.com/cockroachdb/pebble/v2"
	json "github.com/segmentio/encoding/json"
)

// The rows of the per-turn tables wait on disk between the fold and the
// writers, so an export's memory does not grow with the run (docs/design.md
// §14.7): a temporary Pebble database in the scratch directory holds each
// turn and tool call as the fold meets it, keyed in the order a format
// writes them, and each turn's judgement as its batch seals, keyed by the
// turn's log position. A writer reads the rows back in key order and joins
// each turn with its judgement as it writes it. The attempts' summaries
// are kept here too, but for those in flight (attempts.go). What stays in
// memory is one entry per task and batch (their scalars, no lists of
// turns), each group's purpose and drop reason, and the text and sample
// windows.
//
// Keys (integers big-endian; a signed one with its sign bit flipped, so
// that byte order is numeric order):
//
//	't' seq                        a turn, for the turns table
//	'c' seq                        a tool call, for the tool_calls table
//	'T' ordinal turn seq           a turn, for its attempt's trajectory
//	'C' ordinal turn call seq      a tool call, for its attempt's trajectory
//	'j' partition offset           the judgement of the turn at that position
//	'J' ordinal partition offset   the same, for its attempt's trajectory
//
// An attempt's ordinal numbers it in the order the fold first met it
// (attempts.go), not by its id: the rows of the attempts in flight are then
// written at the end of the key space, and the trajectories, read in the
// order the attempts started, are read nearly in key order. Keyed by id
// (random), every write landed among all the rows before it, and at 50 M
// facts the store's compactions halved the messages export's rate.
const (
	keyTurn             = 't'
	keyCall             = 'c'
	keyAttemptTurn      = 'T'
	keyAttemptCall      = 'C'
	keyJudgement        = 'j'
	keyAttemptJudgement = 'J'
)

// rowStore is the temporary database; nothing is synced, and it is
// removed on close.
type rowStore struct {
	dir   string
	db    *pebble.DB
	batch *pebble.Batch
}

// rowBatchBytes is how much a write batch gathers before it is applied.
const rowBatchBytes = 4 << 20

func openRowStore(scratch string) (*rowStore, error) {
	dir, err := os.MkdirTemp(scratch, "rolloutledger-export-rows-")
	if err != nil {
		return nil, fmt.Errorf("dataset: row store: %w", err)
	}
	cache := pebble.NewCache(16 << 20)
	defer cache.Unref()
	// 64 MiB memtables. Every flush holds rows of all the attempts in
	// flight, whose earlier rows the next compaction writes again, so the
	// store's write amplification grows with its levels: with 16 MiB it
	// was 7.7 at 5 M facts (409 MB of rows, 3.1 GB written) and
	// compactions took 27% of a messages export's CPU, against 20% at
	// 1 M. With 64 MiB it is 4.6, and the 5 M-fact export ran 76-79 K
	// facts/s against 68-72 K, for 70 MiB more at its peak (BENCHMARKS.md,
	// "Scale"). 8 MiB had been a third of the CPU at 3 M facts.
	db, err := pebble.Open(dir, &pebble.Options{Cache: cache, MemTableSize: 64 << 20, DisableWAL: true, Logger: quietLogger{}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("dataset: row store: %w", err)
	}
	return &rowStore{dir: dir, db: db}, nil
}

// set stores v as JSON under key.
func (s *rowStore) set(key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.put(key, b)
}

// put stores b under key; b may be reused once put returns.
func (s *rowStore) put(key, b []byte) error {
	if s.batch == nil {
		s.batch = s.db.NewBatch()
	}
	if err := s.batch.Set(key, b, nil); err != nil {
		return err
	}
	if s.batch.Len() >= rowBatchBytes {
		return s.flush()
	}
	return nil
}

// flush applies the writes gathered; a reader flushes first.
func (s *rowStore) flush() error {
	if s.batch == nil {
		return nil
	}
	err := s.batch.Commit(pebble.NoSync)
	s.batch.Close()
	s.batch = nil
	if err != nil {
		return fmt.Errorf("dataset: row store: %w", err)
	}
	return nil
}

// get decodes the value of key into v; false when there is none.
func (s *rowStore) get(key []byte, v any) (bool, error) {
	b, closer, err := s.db.Get(key)
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dataset: row store: %w", err)
	}
	defer closer.Close()
	return true, json.Unmarshal(b, v)
}

// scan calls fn with each value under prefix, in key order.
func (s *rowStore) scan(prefix []byte, fn func(v []byte) error) error {
	return s.scanKeys(prefix, func(_, v []byte) error { return fn(v) })
}

// scanKeys is scan with each value's key.
func (s *rowStore) scanKeys(prefix []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(prefixBounds(prefix))
	if err != nil {
		return fmt.Errorf("dataset: row store: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("dataset: row store: %w", err)
	}
	return nil
}

// prefixBounds are the bounds of an iterator over the keys under prefix.
func prefixBounds(prefix []byte) *pebble.IterOptions {
	upper := append([]byte(nil), prefix...)
	for i := len(upper) - 1; i >= 0; i-- {
		if upper[i]++; upper[i] != 0 {
			return &pebble.IterOptions{LowerBound: prefix, UpperBound: upper[:i+1]}
		}
	}
	return &pebble.IterOptions{LowerBound: prefix}
}

func (s *rowStore) close() error {
	if s.batch != nil {
		s.batch.Close()
		s.batch = nil
	}
	err := s.db.Close()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

func appendSigned(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)^1<<63) }

// attemptPrefix is the start of an attempt's summary key, by its id
// (length-prefixed, so no id's key falls among another's).
func attemptPrefix(k byte, attempt string) []byte {
	b := binary.AppendUvarint([]byte{k}, uint64(len(attempt)))
	return append(b, attempt...)
}

// ordinalPrefix is the start of the keys of kind k of the attempt with
// ordinal ord.
func ordinalPrefix(k byte, ord uint64) []byte { return binary.BigEndian.AppendUint64([]byte{k}, ord) }

func turnKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte{keyTurn}, seq) }
func callKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte{keyCall}, seq) }

func attemptTurnKey(ord uint64, t *Turn) []byte {
	return binary.BigEndian.AppendUint64(appendSigned(ordinalPrefix(keyAttemptTurn, ord), int64(t.Turn)), t.Seq)
}

func attemptCallKey(ord uint64, c *ToolCall) []byte {
	b := appendSigned(appendSigned(ordinalPrefix(keyAttemptCall, ord), int64(c.Turn)), int64(c.Call))
	return binary.BigEndian.AppendUint64(b, c.Seq)
}

// judgementPrefix is the start of the judgement keys of one partition.
func judgementPrefix(partition int32) []byte {
	return binary.BigEndian.AppendUint32([]byte{keyJudgement}, uint32(partition))
}

func judgementKey(partition int32, offset int64) []byte {
	return appendSigned(judgementPrefix(partition), offset)
}

func attemptJudgementKey(ord uint64, partition int32, offset int64) []byte {
	return appendSigned(binary.BigEndian.AppendUint32(ordinalPrefix(keyAttemptJudgement, ord), uint32(partition)), offset)
}

// judgement is what the last batch that judged a turn concluded of it.
type judgement struct {
	Batch            uint64
	Staleness        int64
	Trained          bool
	SegmentStaleness []int64
	SegmentTrained   []bool
}

// judgements joins the turns of the turns table, read in log order, with
// their judgements. Within a partition a turn's offset grows with its
// place in the log, so one iterator a partition, each moving forward
// only, finds every turn's judgement in one pass over them. A point read
// a turn went through the store's indexes again each time: at 1 M facts
// those reads were half the Parquet export's time (BENCHMARKS.md, "The
// exports: judgements joined by scan").
type judgements struct {
	s   *rowStore
	its map[int32]*pebble.Iterator
}

func (s *rowStore) judgements() *judgements {
	return &judgements{s: s, its: map[int32]*pebble.Iterator{}}
}

// decodeTurn reads a stored turn of the turns table and joins it with its
// judgement, if any.
func (j *judgements) decodeTurn(v []byte) (*Turn, error) {
	t, err := decodeTurnRecord(v)
	if err != nil {
		return nil, err
	}
	it := j.its[t.Partition]
	if it == nil {
		if it, err = j.s.db.NewIter(prefixBounds(judgementPrefix(t.Partition))); err != nil {
			return nil, fmt.Errorf("dataset: row store: %w", err)
		}
		j.its[t.Partition] = it
	}
	// A seek to a key past the one sought last steps forward from where
	// the iterator is (Pebble's SeekGE), which is where the partition's
	// turn before this one left it; a seek back would be slower, not
	// wrong.
	key := judgementKey(t.Partition, t.Offset)
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("dataset: row store: %w", err)
		}
		return t, nil
	}
	jd, err := decodeJudgement(it.Value())
	if err != nil {
		return nil, err
	}
	jd.apply(t)
	return t, nil
}

// close closes the iterators.
func (j *judgements) close() error {
	var first error
	for _, it := range j.its {
		if err := it.Close(); err != nil && first == nil {
			first = fmt.Errorf("dataset: row store: %w", err)
		}
	}
	return first
}

func (j *judgement) apply(t *Turn) {
	t.Batch, t.Staleness, t.Trained, t.SegmentStaleness, t.SegmentTrained = j.Batch, j.Staleness, j.Trained, j.SegmentStaleness, j.SegmentTrained
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "dataset: row store: "+format+"\n", args...)
	os.Exit(1)
}

// errStop ends a scan early.
var errStop = errors.New("dataset: stop")

// scanRows yields each value under prefix, decoded by decode, as a row of
// run; false from yield stops it.
func scanRows[R any](run *Run, prefix []byte, decode func([]byte) (R, error), yield func(*row[R], error) bool) bool {
	err := run.rows.scan(prefix, func(v []byte) error {
		r, err := decode(v)
		if err != nil {
			return err
		}
		if !yield(&row[R]{run: run, r: r}, nil) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return false
	}
	if err != nil {
		yield(nil, err)
		return false
	}
	return true
}

// turnsOf and callsOf are the runs' turns and tool calls, in log order.
func turnsOf(runs []*Run) iter.Seq2[*row[*Turn], error] {
	return func(yield func(*row[*Turn], error) bool) {
		for _, run := range runs {
			j := run.rows.judgements()
			ok := scanRows(run, []byte{keyTurn}, j.decodeTurn, yield)
			if err := j.close(); err != nil && ok {
				yield(nil, err)
				return
			}
			if !ok {
				return
			}
		}
	}
}

func callsOf(runs []*Run) iter.Seq2[*row[*ToolCall], error] {
	return func(yield func(*row[*ToolCall], error) bool) {
		for _, run := range runs {
			if !scanRows(run, []byte{keyCall}, decodeCall, yield) {
				return
			}
		}
	}
}

// trajectory reads attempt a's turns, by turn index then log order, each
// with its judgement, and its tool calls, by turn and call, into a.turns
// and a.calls.
func (r *Run) trajectory(a *Attempt) error {
	a.turns, a.calls = a.turns[:0], a.calls[:0]
	// The attempt's judgements by key: a turn's is found under the key
	// its position makes.
	judged := map[string]judgement{}
	err := r.rows.scanKeys(ordinalPrefix(keyAttemptJudgement, a.ord), func(k, v []byte) error {
		j, err := decodeJudgement(v)
		judged[string(k)] = j
		return err
	})
	if err != nil {
		return err
	}
	err = r.rows.scan(ordinalPrefix(keyAttemptTurn, a.ord), func(v []byte) error {
		t, err := decodeTurnRecord(v)
		if err == nil {
			if j, ok := judged[string(attemptJudgementKey(a.ord, t.Partition, t.Offset))]; ok {
				j.apply(t)
			}
			a.turns = append(a.turns, t)
		}
		return err
	})
	if err != nil {
		return err
	}
	return r.rows.scan(ordinalPrefix(keyAttemptCall, a.ord), func(v []byte) error {
		c, err := decodeCall(v)
		a.calls = append(a.calls, c)
		return err
	})
}
