package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/consumer"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

type tp = kafkalog.TopicPartition

// memStore is a Store in memory: the values applied per partition and the
// stored offsets, committed together under one lock. It fails the
// session at chosen applies, after doing the "effects" (recording the
// values as seen) but before the commit, as a crash would.
type memStore struct {
	mu        sync.Mutex
	values    map[tp][]string // committed
	next      map[tp]int64    // committed
	marks     map[tp]consumer.Mark
	seen      int          // values applied, committed or not
	applies   int          // Apply calls
	failAt    map[int]bool // Apply calls that fail before committing
	opens     int
	rewinds   []tp
	idles     int
	prepared  int
	preparer  bool
	rewinder  bool
	maxWindow int
}

func newMemStore() *memStore {
	return &memStore{values: map[tp][]string{}, next: map[tp]int64{}, marks: map[tp]consumer.Mark{}, failAt: map[int]bool{}}
}

func (s *memStore) Open(_ context.Context, parts []tp) (consumer.Session, map[tp]consumer.Stored, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	out := map[tp]consumer.Stored{}
	for _, p := range parts {
		st := consumer.Stored{Next: s.next[p]}
		if m, ok := s.marks[p]; ok {
			st.Mark = &m
		}
		out[p] = st
	}
	var sess consumer.Session = &memSession{s: s}
	switch {
	case s.preparer && s.rewinder:
		sess = &fullSession{memSession{s: s}}
	case s.rewinder:
		sess = &rewindSession{memSession{s: s}}
	case s.preparer:
		sess = &prepSession{memSession{s: s}}
	}
	return sess, out, nil
}

type memSession struct{ s *memStore }

func (m *memSession) Apply(_ context.Context, w *consumer.Window) error {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applies++
	s.seen += len(w.Records)
	s.maxWindow = max(s.maxWindow, len(w.Records))
	if s.preparer && w.Prepared != len(w.Records) {
		return fmt.Errorf("window of %d records prepared as %v", len(w.Records), w.Prepared)
	}
	if s.failAt[s.applies] {
		return fmt.Errorf("injected failure at apply %d", s.applies)
	}
	staged := map[tp][]string{}
	for _, r := range w.Records {
		p := tp{Topic: r.Topic, Partition: r.Partition}
		staged[p] = append(staged[p], string(r.Value))
	}
	for p, r := range w.Partitions {
		if r.First != s.next[p] {
			return fmt.Errorf("%v: window starts at %d, stored offset is %d", p, r.First, s.next[p])
		}
		s.values[p] = append(s.values[p], staged[p]...)
		s.next[p] = r.Next
		if _, ok := s.marks[p]; !ok {
			s.marks[p] = r.Mark
		}
	}
	return nil
}

func (m *memSession) Close() error { return nil }

func (m *memSession) Idle(context.Context) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.idles++
	return nil
}

type prepSession struct{ memSession }

func (p *prepSession) Prepare(w *consumer.Window) {
	p.s.mu.Lock()
	p.s.prepared++
	p.s.mu.Unlock()
	w.Prepared = len(w.Records)
}

type rewindSession struct{ memSession }

func (r *rewindSession) Rewind(_ context.Context, p tp, from int64) error {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next[p] != from {
		return fmt.Errorf("%v moved", p)
	}
	s.rewinds = append(s.rewinds, p)
	s.next[p] = 0
	delete(s.values, p)
	delete(s.marks, p)
	return nil
}

type fullSession struct{ memSession }

func (f *fullSession) Prepare(w *consumer.Window) { (&prepSession{f.memSession}).Prepare(w) }
func (f *fullSession) Rewind(ctx context.Context, p tp, from int64) error {
	return (&rewindSession{f.memSession}).Rewind(ctx, p, from)
}

// idled says a session was told the log was idle.
func (s *memStore) idled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idles > 0
}

func (s *memStore) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.values {
		n += len(v)
	}
	return n
}

// produce appends n records per key to the facts topic; values are
// "<key>/<i>".
func produce(t *testing.T, kc kafkalog.Config, keys []string, n int) {
	t.Helper()
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	for i := range n {
		var recs []kafkalog.Record
		for _, k := range keys {
			recs = append(recs, kafkalog.Record{Key: []byte(k), Value: fmt.Appendf(nil, "%s/%04d", k, i)})
		}
		if _, err := w.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
}

func embedded(t *testing.T) kafkalog.Config {
	t.Helper()
	kc, _ := testenv.EmbeddedKafka(t, "")
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	return kc
}

// exactlyOnce checks that every partition holds each key's values once,
// in order.
func exactlyOnce(t *testing.T, s *memStore, keys []string, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	got := map[string][]string{}
	for _, vs := range s.values {
		for _, v := range vs {
			k := v[:strings.IndexByte(v, '/')]
			got[k] = append(got[k], v)
		}
	}
	for _, k := range keys {
		if len(got[k]) != n {
			t.Errorf("key %s: %d values committed, want %d", k, len(got[k]), n)
			continue
		}
		for i, v := range got[k] {
			if want := fmt.Sprintf("%s/%04d", k, i); v != want {
				t.Errorf("key %s: value %d is %s, want %s", k, i, v, want)
				break
			}
		}
	}
}

func runUntil(t *testing.T, s consumer.Store, o consumer.Options, done func() bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- consumer.Run(ctx, s, o) }()
	deadline := time.After(2 * time.Minute)
	for !done() {
		select {
		case err := <-ran:
			return err
		case <-deadline:
			t.Fatal("the consumer did not get there in 2 minutes")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run returned %v after ctx ended, want nil", err)
	}
	return nil
}

// Failed windows are not committed; with Restart every session resumes
// from the stored offsets, so each record is committed exactly once and
// in order, in both modes, with and without a Preparer.
func TestExactlyOnceAcrossFailedSessions(t *testing.T) {
	kc := embedded(t)
	keys := []string{"run-a", "run-b", "run-c", "run-d", "run-e", "run-f"}
	const n = 60
	produce(t, kc, keys, n)
	for _, tc := range []struct {
		name                   string
		perPartition, preparer bool
	}{{"merged", false, false}, {"merged prepared", false, true}, {"per partition", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemStore()
			s.preparer = tc.preparer
			for _, i := range []int{1, 3, 4, 9, 15} {
				s.failAt[i] = true
			}
			failures := 0
			var resumed []map[tp]int64
			var mu sync.Mutex
			o := consumer.Options{Kafka: kc, Topics: []string{kc.FactsTopic()}, PerPartition: tc.perPartition,
				Window:  kafkalog.WindowOptions{MaxRecords: 10, QuietGap: 2 * time.Millisecond, MaxAge: 10 * time.Millisecond},
				Restart: true, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
				OnFailure: func(error) { mu.Lock(); failures++; mu.Unlock() },
				OnResume:  func(m map[tp]int64) { mu.Lock(); resumed = append(resumed, m); mu.Unlock() },
			}
			if err := runUntil(t, s, o, func() bool { return s.total() == len(keys)*n }); err != nil {
				t.Fatal(err)
			}
			exactlyOnce(t, s, keys, n)
			mu.Lock()
			defer mu.Unlock()
			if failures != 5 || s.opens != len(resumed) || s.opens < 6 {
				t.Errorf("%d failures, %d sessions opened, %d resumed: want 5 failures and a session after each", failures, s.opens, len(resumed))
			}
			if s.seen <= len(keys)*n {
				t.Errorf("%d records applied for %d committed: the failed windows were not read again", s.seen, len(keys)*n)
			}
			if s.maxWindow > 10 {
				t.Errorf("a window of %d records, over the bound of 10", s.maxWindow)
			}
			if tc.preparer && s.prepared < s.applies {
				t.Errorf("%d windows prepared for %d applied", s.prepared, s.applies)
			}
		})
	}
}

// Without Restart the first failure ends Run with its error, naming the
// partition in PerPartition mode, and nothing after it is committed.
func TestFailureStopsWithoutRestart(t *testing.T) {
	kc := embedded(t)
	produce(t, kc, []string{"run-a"}, 20)
	s := newMemStore()
	s.failAt[1] = true
	p := kafkalog.PartitionOf([]byte("run-a"), kc.Partitions)
	err := consumer.Run(context.Background(), s, consumer.Options{Kafka: kc, Topics: []string{kc.FactsTopic()}, PerPartition: true,
		Window: kafkalog.WindowOptions{MaxRecords: 5}})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("partition %d: injected failure at apply 1", p)) {
		t.Fatalf("Run returned %v, want the injected failure of partition %d", err, p)
	}
	if s.total() != 0 || s.opens != kc.Partitions {
		t.Errorf("%d values committed, %d sessions: want none committed and one session per partition", s.total(), s.opens)
	}
}

// A stored offset past the log end, or a marked record that is not the
// one in the log, means another log: a Rewinder reads it from 0, anything
// else reads on from its stored offset.
func TestAnotherLogUnderTheSameNames(t *testing.T) {
	kc := embedded(t)
	keys := []string{"run-a", "run-b", "run-c", "run-d"}
	produce(t, kc, keys, 10)
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	var used []int
	for p, end := range ends {
		if end > 0 {
			used = append(used, p)
		}
	}
	if len(used) < 2 {
		t.Fatalf("the keys landed in %d partitions, want 2 or more", len(used))
	}
	past := tp{Topic: kc.FactsTopic(), Partition: used[0]}    // stored offset past the log end
	changed := tp{Topic: kc.FactsTopic(), Partition: used[1]} // another record at the mark
	for _, rewinder := range []bool{true, false} {
		t.Run(fmt.Sprintf("rewinder=%v", rewinder), func(t *testing.T) {
			s := newMemStore()
			s.rewinder = rewinder
			s.next[past] = ends[past.Partition] + 5
			s.next[changed] = 2
			s.marks[changed] = consumer.Mark{Offset: 1, Fingerprint: consumer.Fingerprint([]byte("not this"))}
			o := consumer.Options{Kafka: kc, Topics: []string{kc.FactsTopic()}, Window: kafkalog.WindowOptions{MaxRecords: 100, Idle: 20 * time.Millisecond}}
			var total int64
			for _, end := range ends {
				total += end
			}
			want := int(total - 2) // without rewinding, two records of changed are skipped
			if rewinder {
				want = int(total)
			} else {
				want -= int(ends[past.Partition])
			}
			runUntil(t, s, o, func() bool { return s.total() >= want && s.idled() })
			if got := s.total(); got != want {
				t.Errorf("%d values committed, want %d", got, want)
			}
			if rewinder && len(s.rewinds) != 2 {
				t.Errorf("rewound %v, want %v and %v", s.rewinds, past, changed)
			}
			if !rewinder && s.next[past] != ends[past.Partition]+5 {
				t.Errorf("%v: stored offset %d, want it kept at %d", past, s.next[past], ends[past.Partition]+5)
			}
		})
	}
}

// The commit point hook is the session's to call; CrashAfter with n <= 0
// injects nothing.
func TestCommitPoint(t *testing.T) {
	if consumer.CrashAfter(0, nil) != nil {
		t.Error("CrashAfter(0) returned a hook")
	}
	kc := embedded(t)
	produce(t, kc, []string{"run-a"}, 30)
	var calls int
	var mu sync.Mutex
	s := &pointStore{newMemStore()}
	o := consumer.Options{Kafka: kc, Topics: []string{kc.FactsTopic()}, Window: kafkalog.WindowOptions{MaxRecords: 10},
		CommitPoint: func() { mu.Lock(); calls++; mu.Unlock() }}
	runUntil(t, s, o, func() bool { return s.total() == 30 })
	mu.Lock()
	defer mu.Unlock()
	if calls != s.applies || calls < 3 {
		t.Errorf("%d commit points for %d windows, want one each", calls, s.applies)
	}
}

type pointStore struct{ *memStore }

func (p *pointStore) Open(ctx context.Context, parts []tp) (consumer.Session, map[tp]consumer.Stored, error) {
	_, st, err := p.memStore.Open(ctx, parts)
	return &pointSession{memSession{s: p.memStore}}, st, err
}

type pointSession struct{ memSession }

func (p *pointSession) Apply(ctx context.Context, w *consumer.Window) error {
	w.CommitPoint()
	return p.memSession.Apply(ctx, w)
}

func TestOptionsValidate(t *testing.T) {
	err := consumer.Options{Partitions: []int{-1}, MinBackoff: -1}.Validate()
	for _, want := range []string{"no brokers", "no topics", "must not be negative", "partition -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to mention %q", err, want)
		}
	}
	if err := consumer.Run(context.Background(), nil, consumer.Options{}); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Errorf("Run without a store: got %v", err)
	}
}
