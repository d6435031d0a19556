package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestSpoolConcurrentCommits: attempts committing at once (their fsyncs
// shared) lose nothing and duplicate nothing, and each attempt's facts
// leave the spool in the order it committed them, whatever the order
// between attempts.
func TestSpoolConcurrentCommits(t *testing.T) {
	sp, err := openSpool(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	const attempts, turns = 8, 40
	var wg sync.WaitGroup
	for a := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := identity{Run: "run-1", Attempt: "attempt-" + strconv.Itoa(a)}
			for turn := range turns {
				// Two facts a turn: a tool call of the previous turn, then the turn.
				facts := []pending{{run: id.Run, record: fmt.Appendf(nil, "%d/%d/tool", a, turn)}, {run: id.Run, record: fmt.Appendf(nil, "%d/%d/turn", a, turn)}}
				if err := sp.commit(id, &attemptState{NextTurn: turn + 1}, nil, []int32{int32(turn)}, facts); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := sp.count.Load(); got != 2*attempts*turns {
		t.Fatalf("%d facts counted waiting, want %d", got, 2*attempts*turns)
	}
	next := make([]int, attempts) // each attempt's next fact, 2 per turn
	total := 0
	for {
		facts, err := sp.head(sendEvents, sendBytes)
		if err != nil {
			t.Fatal(err)
		}
		if len(facts) == 0 {
			break
		}
		for _, f := range facts {
			var a, turn int
			var kind string
			if _, err := fmt.Sscanf(string(f.record), "%d/%d/%s", &a, &turn, &kind); err != nil {
				t.Fatalf("record %q: %v", f.record, err)
			}
			want := fmt.Sprintf("%d/%d/%s", a, next[a]/2, [...]string{"tool", "turn"}[next[a]%2])
			if string(f.record) != want {
				t.Fatalf("attempt %d: got %q, want %q next", a, f.record, want)
			}
			next[a]++
			total++
		}
		if err := sp.done(facts); err != nil {
			t.Fatal(err)
		}
	}
	if total != 2*attempts*turns || sp.count.Load() != 0 || sp.queued.Load() != 0 {
		t.Fatalf("%d facts left the spool, want %d; %d counted, %d bytes still waiting", total, 2*attempts*turns, sp.count.Load(), sp.queued.Load())
	}
}

// BenchmarkSpoolCommit: one turn's synced commit (state, sequence, two
// facts of 4 KiB) from 1 and from 8 attempts per CPU at once. Concurrent commits
// sharing one fsync show as ns/op falling with parallelism.
func BenchmarkSpoolCommit(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run("attempts_per_cpu="+strconv.Itoa(par), func(b *testing.B) {
			sp, err := openSpool(b.TempDir(), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			record := make([]byte, 4096)
			var n atomic.Int64
			b.SetParallelism(par)
			b.RunParallel(func(pb *testing.PB) {
				id := identity{Run: "run-1", Attempt: "attempt-" + strconv.FormatInt(n.Add(1), 10)}
				seq := make([]int32, 512)
				for turn := 0; pb.Next(); turn++ {
					if err := sp.commit(id, &attemptState{NextTurn: turn + 1}, nil, seq, []pending{{run: id.Run, record: record}, {run: id.Run, record: record}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestSpoolLateLowerCommit: a commit that took lower numbers but becomes
// visible after a later one is still read, although the sender has
// already read past the later one (and so moved the point it reads from).
func TestSpoolLateLowerCommit(t *testing.T) {
	sp, err := openSpool(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	taken, release := make(chan struct{}), make(chan struct{})
	sp.beforeCommit = func(first uint64) {
		if first == 0 {
			close(taken)
			<-release
		}
	}
	slow := make(chan error, 1)
	go func() {
		slow <- sp.commitQueued(sp.db.NewBatch(), []pending{{run: "r", record: []byte("slow-0")}, {run: "r", record: []byte("slow-1")}})
	}()
	<-taken
	if err := sp.commitQueued(sp.db.NewBatch(), []pending{{run: "r", record: []byte("fast-2")}}); err != nil {
		t.Fatal(err)
	}
	read := func() []string {
		facts, err := sp.head(sendEvents, sendBytes)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range facts {
			out = append(out, string(f.record))
		}
		if err := sp.done(facts); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := read(); len(got) != 1 || got[0] != "fast-2" {
		t.Fatalf("first read %q, want the visible commit [fast-2]", got)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 2 || got[0] != "slow-0" || got[1] != "slow-1" {
		t.Fatalf("second read %q, want the late commit's [slow-0 slow-1]", got)
	}
	if got := read(); len(got) != 0 || sp.count.Load() != 0 {
		t.Fatalf("third read %q with %d counted waiting, want nothing", got, sp.count.Load())
	}
}

// BenchmarkSpoolDrain: the sender's cycle under a steady load, one turn's
// two facts committed (not synced, so the disk does not dominate), read and
// removed at a time: the read starts at the oldest waiting fact, not at the
// removals of every fact delivered before it.
func BenchmarkSpoolDrain(b *testing.B) {
	sp, err := openSpool(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	rec := make([]byte, 1024)
	for b.Loop() {
		batch := sp.db.NewBatch()
		sp.mu.Lock()
		seq := sp.nextSeq
		sp.nextSeq += 2
		sp.mu.Unlock()
		for i := range uint64(2) {
			_ = batch.Set(seqKey(prefixQueue, seq+i), append([]byte("run\x00"), rec...), nil)
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		sp.count.Add(2)
		facts, err := sp.head(sendEvents, sendBytes)
		if err != nil || len(facts) != 2 {
			b.Fatalf("head: %d facts, %v", len(facts), err)
		}
		if err := sp.done(facts); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSpoolSequenceChunks: an attempt's sequence read back after each
// commit is the one committed, whether it extended the last (only its new
// tokens written), diverged from it, emptied it, or follows a whole
// sequence an earlier version of the spool wrote in one value; and one
// attempt's pieces never mix with those of another whose id extends it.
func TestSpoolSequenceChunks(t *testing.T) {
	sp, err := openSpool(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	id, other := identity{Run: "r", Attempt: "att"}, identity{Run: "r", Attempt: "att-2"}
	if err := sp.commit(other, &attemptState{NextTurn: 1}, nil, []int32{7, 7, 7}, nil); err != nil {
		t.Fatal(err)
	}
	pieces := func() (n int) {
		lo, hi := chunkRange(id)
		it, _ := sp.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n
	}
	var prev []int32
	for i, step := range []struct {
		seq    []int32
		pieces int
	}{
		{[]int32{1, 2, 3}, 1},
		{[]int32{1, 2, 3, 4, 5}, 2}, // extends: a piece of two
		{[]int32{1, 2, 3, 4, 5}, 2}, // unchanged: nothing written
		{[]int32{1, 2, 3, 4, 5, 6}, 3},
		{[]int32{1, 9}, 1}, // diverges: replaces the pieces
		{[]int32{1, 9, 8}, 2},
		{[]int32{}, 1}, // emptied: the next prompt relates to nothing
		{[]int32{4}, 1},
	} {
		if err := sp.commit(id, &attemptState{NextTurn: i + 1}, prev, step.seq, nil); err != nil {
			t.Fatal(err)
		}
		_, got, err := sp.loadAttempt(id)
		if err != nil || got == nil || !slices.Equal(got, step.seq) {
			t.Fatalf("step %d: read back %v (%v), want %v", i, got, err, step.seq)
		}
		if n := pieces(); n != step.pieces {
			t.Errorf("step %d: %d pieces, want %d", i, n, step.pieces)
		}
		prev = step.seq
	}
	// A whole sequence in one value, as the spool wrote before pieces:
	// extended by a piece, then replaced.
	legacy := identity{Run: "r", Attempt: "old"}
	if err := sp.db.Set(attemptKey(prefixSeq, legacy), encodeIDs([]int32{4, 4}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][2][]int32{{{4, 4}, {4, 4, 5}}, {{4, 4, 5}, {6}}} {
		if err := sp.commit(legacy, &attemptState{NextTurn: 1}, step[0], step[1], nil); err != nil {
			t.Fatal(err)
		}
		if _, got, err := sp.loadAttempt(legacy); err != nil || !slices.Equal(got, step[1]) {
			t.Fatalf("after a whole-value sequence: read back %v (%v), want %v", got, err, step[1])
		}
	}
	if _, got, _ := sp.loadAttempt(other); !slices.Equal(got, []int32{7, 7, 7}) {
		t.Fatalf("the other attempt's sequence is %v, want [7 7 7]", got)
	}
	if _, got, _ := sp.loadAttempt(identity{Run: "r", Attempt: "new"}); got != nil {
		t.Fatalf("an attempt never committed has sequence %v, want none", got)
	}
}

// BenchmarkSpoolLongAttempt: the synced commits of one attempt's turns as
// its context grows by a real turn (380 completion and 200 observation
// tokens) per turn, over an 80-turn attempt, then the next attempt.
func BenchmarkSpoolLongAttempt(b *testing.B) {
	sp, err := openSpool(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	record := make([]byte, 4096)
	var prev []int32
	attempt := 0
	turn := 0
	for b.Loop() {
		if turn == 80 {
			attempt, turn, prev = attempt+1, 0, nil
		}
		id := identity{Run: "run-1", Attempt: "attempt-" + strconv.Itoa(attempt)}
		seq := append(slices.Clone(prev), make([]int32, 580)...)
		if err := sp.commit(id, &attemptState{NextTurn: turn + 1}, prev, seq, []pending{{run: id.Run, record: record}}); err != nil {
			b.Fatal(err)
		}
		prev = seq
		turn++
	}
}

// Expiry frees an idle attempt's sequence and marks and keeps its
// numbering; an entry of an attempt answered since is passed over; and a
// spool written before the expiry index gets one when opened.
func TestSpoolExpiry(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, recent := identity{Run: "r", Attempt: "old"}, identity{Run: "r", Attempt: "recent"}
	marks := []turnMark{markOf(0, []int32{1, 2, 3})}
	for _, c := range []struct {
		id identity
		at int64
	}{{old, 1000}, {recent, 5000}} {
		if err := sp.commit(c.id, &attemptState{NextTurn: 1, Marks: marks, AnsweredAt: c.at}, nil, []int32{1, 2, 3}, nil); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	hold := func(identity) func() { held++; return func() { held-- } }
	expect := func(id identity, nextTurn int, marks int, seq []int32) {
		t.Helper()
		st, got, err := sp.loadAttempt(id)
		if err != nil || st.NextTurn != nextTurn || len(st.Marks) != marks || !slices.Equal(got, seq) {
			t.Errorf("%s: next turn %d, %d marks, sequence %v (%v); want %d, %d, %v", id.Attempt, st.NextTurn, len(st.Marks), got, err, nextTurn, marks, seq)
		}
	}
	if n, err := sp.expire(3000, hold); n != 1 || err != nil || held != 0 {
		t.Fatalf("expired %d (%v), %d still held; want 1", n, err, held)
	}
	expect(old, 1, 0, nil)
	expect(recent, 1, 1, []int32{1, 2, 3})
	if n, _ := sp.expire(3000, hold); n != 0 {
		t.Errorf("a second pass expired %d, want 0", n)
	}
	// Answered again: its old entry goes, the new one is past the cutoff.
	if err := sp.commit(recent, &attemptState{NextTurn: 2, Marks: marks, AnsweredAt: 9000, replaces: 5000}, nil, []int32{1, 2, 3, 4}, nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := sp.expire(8000, hold); n != 0 {
		t.Errorf("an attempt answered after the cutoff was expired (%d)", n)
	}
	expect(recent, 2, 1, []int32{1, 2, 3, 4})

	// A spool without the index (written before it): built on open.
	b := sp.db.NewBatch()
	if err := b.DeleteRange([]byte{prefixExpiry}, []byte{prefixExpiry + 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(indexedKey, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if n, _ := sp.expire(1<<62, hold); n != 0 {
		t.Fatalf("without an index, expired %d", n)
	}
	sp.Close()
	if sp, err = openSpool(dir, 0); err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if n, err := sp.expire(10_000, hold); n != 1 || err != nil {
		t.Fatalf("after the index was built, expired %d (%v); want 1", n, err)
	}
	expect(recent, 2, 0, nil)
}
