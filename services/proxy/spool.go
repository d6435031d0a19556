package proxy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// The spool's key spaces (one Pebble database under --spool):
//
//	q <seq:8>            a fact waiting for the ledger: run, NUL, its record
//	d <seq:8>            a fact the ledger refused: run, NUL, record, NUL, why
//	a <run> NUL <attempt> the attempt's state (attemptState, JSON)
//	s <run> NUL <attempt> the attempt's last whole sequence, int32 LE
//	v <run> NUL <engine> NUL <model>  the run's vocabulary is spooled
//	i <answered at:8> <run> NUL <attempt>  expiry index: the attempt's last answer (Unix ms)
//	I                    the expiry index covers every attempt
//	h <seq:8>            a held turn: an answer given before its prompt's ids were known (held.go)
//
// A turn's facts, its attempt's state and its sequence are written in one
// synced batch: after a crash either all of a turn is in the spool, and the
// harness may have had its answer, or none of it is, and the harness never
// had its last byte. A held turn (held.go) is in the spool as its request
// and answer before the harness has its last byte, and its facts replace
// that record in one synced batch. Pebble commits concurrent synced
// batches with one fsync (group commit).
const (
	prefixQueue   = 'q'
	prefixDead    = 'd'
	prefixAttempt = 'a'
	prefixSeq     = 's' // an attempt's whole sequence in one value (before chunks)
	prefixChunk   = 'S' // a piece of an attempt's sequence, keyed by its offset
	prefixVocab   = 'v'
	prefixExpiry  = 'i'
	prefixHeld    = 'h'
)

// indexedKey marks a spool whose expiry index covers every attempt (a
// spool written before the index had none: openSpool builds it once).
var indexedKey = []byte{'I'}

// ErrSpoolFull is returned when the facts waiting for the ledger exceed
// the spool's cap: the ledger has been away too long.
var ErrSpoolFull = errors.New("proxy: spool full")

// spool is the proxy's durable store.
type spool struct {
	db      *pebble.DB
	max     int64
	mu      sync.Mutex // guards nextSeq, inflight and floor
	nextSeq uint64
	// inflight counts the commits whose numbers are taken but which are
	// not visible yet, by their first number.
	inflight map[uint64]int
	// floor is a number below which no fact waits or will ever be
	// written: head reads from there, not from the queue's first key, past
	// the removals of every fact delivered since Pebble last compacted
	// them away (thousands under load, each a skipped key per read).
	floor uint64
	// beforeCommit, when set (tests), runs between taking a commit's
	// numbers and committing it.
	beforeCommit func(first uint64)
	queued       atomic.Int64 // bytes of q values
	count        atomic.Int64 // q entries
	dead         atomic.Int64 // d entries
	held         atomic.Int64 // h entries
	heldSeq      atomic.Uint64
	notify       chan struct{}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("proxy spool: "+format, args...))
}

func openSpool(dir string, maxBytes int64) (*spool, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("proxy: open spool %s: %w", dir, err)
	}
	s := &spool{db: db, max: maxBytes, notify: make(chan struct{}, 1), inflight: map[uint64]int{}}
	for _, p := range []byte{prefixQueue, prefixDead, prefixHeld} {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
		if err != nil {
			db.Close()
			return nil, err
		}
		for it.First(); it.Valid(); it.Next() {
			seq := binary.BigEndian.Uint64(it.Key()[1:])
			if p == prefixHeld {
				s.held.Add(1)
				s.heldSeq.Store(max(s.heldSeq.Load(), seq+1))
				continue
			}
			if seq >= s.nextSeq {
				s.nextSeq = seq + 1
			}
			if p == prefixQueue {
				s.queued.Add(int64(len(it.Value())))
				s.count.Add(1)
			} else {
				s.dead.Add(1)
			}
		}
		if err := it.Close(); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := s.buildExpiryIndex(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// expiryKey is the expiry index's entry of an attempt last answered at
// (Unix ms).
func expiryKey(at int64, id identity) []byte {
	return append(expiryPrefix(at), id.key()...)
}

// expiryPrefix is where the expiry index's entries of time at begin.
func expiryPrefix(at int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixExpiry}, uint64(max(at, 0)))
}

// identityOf is the identity a spool key holds after its prefix bytes
// (identity.key's form); false when it holds none.
func identityOf(rest []byte) (identity, bool) {
	run, attempt, ok := strings.Cut(string(rest), "\x00")
	return identity{Run: run, Attempt: attempt}, ok
}

// buildExpiryIndex indexes every attempt's state by its last answer, once,
// for a spool written before the index existed.
func (s *spool) buildExpiryIndex() error {
	if _, closer, err := s.db.Get(indexedKey); err == nil {
		closer.Close()
		return nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixAttempt}, UpperBound: []byte{prefixAttempt + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		id, ok := identityOf(it.Key()[1:])
		var st attemptState
		if !ok || json.Unmarshal(it.Value(), &st) != nil {
			continue // read back and refused by loadAttempt, which names it
		}
		if err := b.Set(expiryKey(st.AnsweredAt, id), nil, nil); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := b.Set(indexedKey, nil, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// expire forgets what relates the prompts of attempts last answered before
// the cutoff (Unix ms) to their earlier turns: their marks and their last
// whole sequence, which grow with their turns and would otherwise stay in
// the spool for the life of the proxy. What numbers their turns and pairs
// their tool calls with outputs stays (a hundred bytes an attempt), so an
// attempt that comes back is numbered on, and its next prompt is recorded
// whole, as a first turn's is. hold locks an attempt against its own
// requests while it is expired and returns the unlock; it returns how many
// attempts were expired.
func (s *spool) expire(before int64, hold func(identity) func()) (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixExpiry}, UpperBound: expiryPrefix(before)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		key := slices.Clone(it.Key())
		id, ok := identityOf(key[1+8:]) // after the prefix and the time
		if !ok {
			continue
		}
		done, err := s.expireOne(id, key, before, hold)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, it.Error()
}

func (s *spool) expireOne(id identity, key []byte, before int64, hold func(identity) func()) (bool, error) {
	release := hold(id)
	defer release()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(key, nil); err != nil {
		return false, err
	}
	st, found, err := s.loadState(id)
	if err != nil {
		return false, err
	}
	// Past the cutoff, and with something to free (an attempt expired
	// before is passed over when a rebuilt index lists it again).
	expired := found && st.AnsweredAt < before && len(st.Marks) > 0
	if found && st.AnsweredAt < before {
		st.Marks = nil
		raw, err := json.Marshal(st)
		if err != nil {
			return false, err
		}
		if err := b.Set(attemptKey(prefixAttempt, id), raw, nil); err != nil {
			return false, err
		}
		lo, hi := chunkRange(id)
		if err := b.DeleteRange(lo, hi, nil); err != nil {
			return false, err
		}
		if err := b.Delete(attemptKey(prefixSeq, id), nil); err != nil {
			return false, err
		}
	}
	// An entry whose attempt was answered since is stale: the commit of
	// that answer indexed it anew.
	return expired, b.Commit(pebble.NoSync)
}

func (s *spool) Close() error { return s.db.Close() }

// full reports whether the waiting facts have reached the cap.
func (s *spool) full() bool { return s.max > 0 && s.queued.Load() >= s.max }

func seqKey(p byte, seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = p
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

func attemptKey(p byte, id identity) []byte { return append([]byte{p}, id.key()...) }

// pending is one fact to spool: its run and record.
type pending struct {
	run    string
	record []byte
}

// commit writes facts to the queue together with an attempt's new state
// and last sequence (seq nil: unchanged; prev: the sequence it replaces,
// as loadAttempt gave it or the last commit wrote it), synced.
//
// A sequence that extends prev, as a conversation's does turn after turn,
// is written as the new tokens only, a chunk keyed by its offset: writing
// the whole sequence again at every turn made a long attempt's commits
// grow with its context (a 100 K-token attempt: 400 KB synced a turn) and
// its writes with the square of its turns. Any other sequence replaces
// the chunks.
func (s *spool) commit(id identity, st *attemptState, prev, seq []int32, facts []pending) error {
	return s.commitTurn(id, st, prev, seq, facts, nil)
}

// commitTurn is commit that also removes a held turn (held: its key), in
// the same synced batch: the turn is then either held or recorded, never
// both and never neither.
func (s *spool) commitTurn(id identity, st *attemptState, prev, seq []int32, facts []pending, held []byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	if held != nil {
		if err := b.Delete(held, nil); err != nil {
			return err
		}
	}
	if st != nil {
		raw, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if err := b.Set(attemptKey(prefixAttempt, id), raw, nil); err != nil {
			return err
		}
		if st.replaces != st.AnsweredAt {
			if err := b.Delete(expiryKey(st.replaces, id), nil); err != nil {
				return err
			}
		}
		if err := b.Set(expiryKey(st.AnsweredAt, id), nil, nil); err != nil {
			return err
		}
	}
	if seq != nil {
		from := len(prev)
		if prev == nil || len(prev) > len(seq) || !slices.Equal(prev, seq[:len(prev)]) {
			from = 0
			lo, hi := chunkRange(id)
			if err := b.DeleteRange(lo, hi, nil); err != nil {
				return err
			}
			if err := b.Delete(attemptKey(prefixSeq, id), nil); err != nil {
				return err
			}
		}
		if from == 0 || from < len(seq) {
			if err := b.Set(chunkKey(id, uint64(from)), encodeIDs(seq[from:]), nil); err != nil {
				return err
			}
		}
	}
	if err := s.commitQueued(b, facts); err != nil {
		return err
	}
	if held != nil {
		s.held.Add(-1)
	}
	return nil
}

// chunkKey is the key of the piece of an attempt's sequence that starts
// at offset; chunkRange bounds all of an attempt's pieces (its key holds
// no NUL, so the NUL after it ends it).
func chunkKey(id identity, offset uint64) []byte {
	k := append(attemptKey(prefixChunk, id), 0)
	return binary.BigEndian.AppendUint64(k, offset)
}

func chunkRange(id identity) (lo, hi []byte) {
	k := attemptKey(prefixChunk, id)
	return append(slices.Clip(k), 0), append(k, 1)
}

// commitQueued adds facts to the queue in b and commits it, synced. The
// facts' sequence numbers are taken under the lock, but the commit is not:
// concurrent commits then share one fsync (Pebble's group commit) instead
// of waiting for each other's. A batch may so become visible before one
// with lower numbers; the two are of different attempts (an attempt's
// commits are ordered by its own lock), whose order means nothing, and the
// sender always starts from the lowest waiting number.
func (s *spool) commitQueued(b *pebble.Batch, facts []pending) error {
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq += uint64(len(facts))
	first := seq
	if len(facts) > 0 {
		s.inflight[first]++
		defer func() {
			s.mu.Lock()
			if s.inflight[first]--; s.inflight[first] == 0 {
				delete(s.inflight, first)
			}
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()
	if s.beforeCommit != nil {
		s.beforeCommit(first)
	}
	var bytes int64
	for _, f := range facts {
		v := make([]byte, 0, len(f.run)+1+len(f.record))
		v = append(append(append(v, f.run...), 0), f.record...)
		if err := b.Set(seqKey(prefixQueue, seq), v, nil); err != nil {
			return err
		}
		seq++
		bytes += int64(len(v))
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("proxy: spool commit: %w", err)
	}
	if len(facts) > 0 {
		s.queued.Add(bytes)
		s.count.Add(int64(len(facts)))
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
	return nil
}

// commitMarked writes facts to the queue together with a mark, synced:
// the mark says the facts were spooled, so they are not spooled again.
func (s *spool) commitMarked(mark []byte, facts []pending) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(mark, nil, nil); err != nil {
		return err
	}
	return s.commitQueued(b, facts)
}

// marked says whether a mark is in the spool.
func (s *spool) marked(mark []byte) (bool, error) {
	_, closer, err := s.db.Get(mark)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	closer.Close()
	return true, nil
}

// loadAttempt reads an attempt's state and last sequence; a new attempt
// has neither.
func (s *spool) loadAttempt(id identity) (*attemptState, []int32, error) {
	st, found, err := s.loadState(id)
	if err != nil || !found {
		return st, nil, err
	}
	// The sequence: a whole one written before chunks were (if any), then
	// the chunks in offset order, each starting where the last ended.
	var seq []int32
	v, closer, err := s.db.Get(attemptKey(prefixSeq, id))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, nil, err
	default:
		seq = decodeIDs(v)
		closer.Close()
	}
	lo, hi := chunkRange(id)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if off := binary.BigEndian.Uint64(k[len(k)-8:]); off != uint64(len(seq)) {
			return nil, nil, fmt.Errorf("proxy: spool: the sequence of attempt %q has a piece at %d after %d ids", id.Attempt, off, len(seq))
		}
		if seq == nil {
			seq = []int32{}
		}
		seq = append(seq, decodeIDs(it.Value())...)
	}
	return st, seq, it.Error()
}

// loadState reads an attempt's state; a new attempt has an empty one, and
// found false.
func (s *spool) loadState(id identity) (st *attemptState, found bool, err error) {
	st = &attemptState{}
	v, closer, err := s.db.Get(attemptKey(prefixAttempt, id))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return st, false, nil
	case err != nil:
		return nil, false, err
	}
	err = json.Unmarshal(v, st)
	closer.Close()
	if err != nil {
		return nil, false, fmt.Errorf("proxy: spool: attempt state of %q: %w", id.Attempt, err)
	}
	return st, true, nil
}

// queued is one waiting fact as the sender reads it.
type queuedFact struct {
	seq    uint64
	run    string
	record []byte
}

// head returns up to n waiting facts of one run, oldest first, at most
// maxBytes of records (at least one), from the oldest waiting fact on.
func (s *spool) head(n int, maxBytes int) ([]queuedFact, error) {
	// A commit not yet visible may hold lower numbers than one that is
	// (commitQueued): the floor may pass a number only once its commit is
	// visible, which every commit finished before the iterator is.
	s.mu.Lock()
	from, pendingFrom := s.floor, s.nextSeq
	for first := range s.inflight {
		pendingFrom = min(pendingFrom, first)
	}
	s.mu.Unlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: seqKey(prefixQueue, from), UpperBound: []byte{prefixQueue + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []queuedFact
	size := 0
	it.First()
	oldest := pendingFrom
	if it.Valid() {
		oldest = min(oldest, binary.BigEndian.Uint64(it.Key()[1:]))
	}
	if it.Error() == nil {
		s.mu.Lock()
		s.floor = max(s.floor, oldest)
		s.mu.Unlock()
	}
	for ; it.Valid() && len(out) < n; it.Next() {
		v := it.Value()
		i := indexByte(v, 0)
		if i < 0 {
			return nil, fmt.Errorf("proxy: spool entry %x has no run", it.Key())
		}
		run := string(v[:i])
		if len(out) > 0 && (run != out[0].run || size+len(v)-i > maxBytes) {
			break
		}
		out = append(out, queuedFact{seq: binary.BigEndian.Uint64(it.Key()[1:]), run: run, record: append([]byte(nil), v[i+1:]...)})
		size += len(v) - i
	}
	return out, it.Error()
}

// done removes delivered facts. Not synced: a removal lost in a crash only
// sends the facts again, which the ledger drops as duplicates.
func (s *spool) done(facts []queuedFact) error {
	b := s.db.NewBatch()
	defer b.Close()
	var bytes int64
	for _, f := range facts {
		if err := b.Delete(seqKey(prefixQueue, f.seq), nil); err != nil {
			return err
		}
		bytes += int64(len(f.run) + 1 + len(f.record))
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.queued.Add(-bytes)
	s.count.Add(-int64(len(facts)))
	return nil
}

// bury moves a fact the ledger refused to the dead letters, with why: it
// is kept, never resent, and counted in /healthz and /metrics.
func (s *spool) bury(f queuedFact, why string) error {
	b := s.db.NewBatch()
	defer b.Close()
	v := make([]byte, 0, len(f.run)+len(f.record)+len(why)+2)
	v = append(append(append(append(append(v, f.run...), 0), f.record...), 0), why...)
	if err := b.Set(seqKey(prefixDead, f.seq), v, nil); err != nil {
		return err
	}
	if err := b.Delete(seqKey(prefixQueue, f.seq), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.queued.Add(-int64(len(f.run) + 1 + len(f.record)))
	s.count.Add(-1)
	s.dead.Add(1)
	return nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func encodeIDs(ids []int32) []byte {
	out := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(id))
	}
	return out
}

func decodeIDs(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
