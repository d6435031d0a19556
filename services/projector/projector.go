// Package projector runs the projections over the facts topic.
//
// # Exactly once
//
// For each partition it owns, the projector reads facts from the offset it
// stored itself (never Kafka's group offsets), through package consumer,
// whose Store contract its partition sessions keep. It folds a window of them into
// one Pebble batch — fold state, decisions, samples, and the next offset —
// writes the window's decisions to the decisions topic with acks=all, and
// only then commits the batch; a window that seals a batch is committed in
// parts, the first ending at the sealing fact. A crash before a commit
// re-reads from the last one and, the folds being deterministic, re-emits
// byte-identical decisions with the same ids, which consumers drop as
// duplicates. A crash after the commit resumes after it. Either way every
// fact is folded into the committed state exactly once.
package projector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"go.opentelemetry.io/otel/codes"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/consumer"
	"github.com/rolloutledger/rolloutledger/internal/foldstore"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// Options configure a Projector.
type Options struct {
	// Kafka locates the brokers and names the topics.
	Kafka kafkalog.Config
	// Dir is the Pebble directory of the projector's state.
	Dir string
	// Partitions of the facts topic this instance owns; nil means all.
	Partitions []int
	// Window bounds how many facts one Pebble batch folds; default 2,000.
	Window int
	// MinFreeBytes is the space the projector leaves free on the
	// filesystem of Dir: with less free it stops with an error naming the
	// directory instead of letting Pebble fail mid-commit. 0 means
	// [DefaultMinFreeBytes]; negative disables the check.
	MinFreeBytes int64
	// ArrowBodyBytes bounds the bytes of the sealed batches' Arrow bodies
	// kept beside the state (bodyfile.go): past it the oldest are removed,
	// and fetched again they are rendered from the stored samples. 0 means
	// [DefaultArrowBodyBytes]; negative keeps no files.
	ArrowBodyBytes int64
	// Logger; nil discards.
	Logger *slog.Logger
	// Telemetry receives the spans and metrics; nil records nothing.
	Telemetry *telemetry.Telemetry
	// CrashAfterEmits is fault injection for crash tests: when positive,
	// the process kills itself (SIGKILL) in the CrashAfterEmits-th window
	// (or part of one, see foldWindow) that emitted decisions, after Kafka
	// acknowledged them and before the state is committed — the one instant where a crash must not lose or
	// change a decision.
	CrashAfterEmits int
}

// DefaultMinFreeBytes is the free space the projector keeps unless
// configured: room for the flushes of two 64 MiB memtables (pebbleOptions)
// and the write-ahead log they were logged in.
const DefaultMinFreeBytes = 256 << 20

// Projector folds facts into decisions and serves what it concluded.
type Projector struct {
	o      Options
	log    *slog.Logger
	tel    *telemetry.Telemetry
	lag    *telemetry.Lag
	db     *pebble.DB
	out    *kafkalog.Writer
	notify *broadcast
	// progress wakes the waiters of an attempt lookup (attempts.go) at
	// every commit, decisions or not.
	progress *broadcast
	crash    func() // the commit point hook of CrashAfterEmits
	// committed, when set (by tests), hears of every commit of a
	// partition's state: the next offset and the decisions it held.
	committed func(part int, next int64, decided []projections.Decision)
	// partitions is the facts topic's partition count, checked against
	// the state's when Run starts; a record whose run maps to another
	// partition than the one it was read from is misrouted.
	partitions int

	// health is why the projector is not folding now (Kafka gone, say),
	// nil while it folds; see [Projector.Health].
	health struct {
		sync.Mutex
		err error
	}

	bodies arrowBodies // sealed batches' Arrow bodies (bodyfile.go)
}

// Open opens (or creates) the projector's state.
func Open(o Options) (*Projector, error) {
	if o.Dir == "" {
		return nil, errors.New("projector: no state directory")
	}
	if err := o.Kafka.Validate(); err != nil {
		return nil, err
	}
	if o.Window <= 0 {
		o.Window = 2000
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = DefaultMinFreeBytes
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := pebble.Open(o.Dir, pebbleOptions(log, o.Dir))
	if err != nil {
		return nil, fmt.Errorf("projector: open state in %s: %w", o.Dir, err)
	}
	tel := telemetry.OrNop(o.Telemetry)
	return &Projector{
		o: o, log: log.With("component", "projector"), db: db,
		tel: tel, lag: tel.ConsumerLag(telemetry.ConsumerProjector),
		out:    kafkalog.NewWriter(o.Kafka, o.Kafka.DecisionsTopic(), kafkalog.WriterOptions{Logger: log, MaxAttempts: 10, Telemetry: tel}),
		notify: newBroadcast(), progress: newBroadcast(),
		crash: consumer.CrashAfter(o.CrashAfterEmits, log.With("component", "projector")),
	}, nil
}

// pebbleOptions tune Pebble for the fold's access pattern: a point read of
// a key that mostly does not exist yet (the fact dedup set, new attempts)
// for every fact. Without Bloom filters such a miss reads an index and a
// data block of every overlapping table; with them it is settled in
// memory. The block cache holds the hot state of the runs in flight.
//
// Memtables are 64 MiB, not Pebble's 4: Pebble stops writes while the
// memtables queued for flushing hold twice that, and a seal writes its
// samples (23 MB for a batch of 1.4 M tokens, hundreds of MB for a large
// one) and a window of token-bearing turns its arrays (some 9 MB). With
// 4 MiB the seal waited on flushes in the middle of its chunks: seal
// latency p50 376-391 ms and p99 1.05-1.19 s, against 298-299 and
// 0.47-0.59 s with 64 MiB (BENCHMARKS.md, "The projector's seal in
// bounded memory").
func pebbleOptions(log *slog.Logger, dir string) *pebble.Options {
	o := &pebble.Options{Logger: pebbleLogger{l: log.With("component", "pebble", "dir", dir), dir: dir}, CacheSize: 64 << 20, MemTableSize: 64 << 20}
	o.Levels[0].FilterPolicy = bloom.FilterPolicy(10) // later levels inherit it
	return o
}

// Close releases the state and the decisions writer.
func (p *Projector) Close() error {
	p.closeArrowBodies()
	return errors.Join(p.out.Close(), p.db.Close())
}

// Window bounds of the projector's consumer: a window collects the
// records that arrive within quietGap of the previous one, for at most
// maxWindowAge after its first, so a busy partition folds many records per
// commit and every decision still leaves within milliseconds of its fact.
const (
	maxWindowAge = 10 * time.Millisecond
	quietGap     = 2 * time.Millisecond
)

// Backoff bounds of [Projector.Run] between attempts to fold again after
// a failure: it doubles from the first to the second.
const (
	minRetryBackoff = 250 * time.Millisecond
	maxRetryBackoff = 5 * time.Second
)

// Run consumes the owned partitions until ctx ends (then it returns nil)
// or a failure that no retry can mend. Each partition is a stream of its
// own (package consumer): its windows are folded into the Pebble state and
// committed with the partition's next offset, in parallel with the other
// partitions'.
//
// Any other failure — Kafka gone, a broker restarting, a partition
// without a leader — ends the attempt with nothing committed past the
// last window, and Run tries again after a backoff, resuming from the
// stored offsets, until Kafka answers: a process that runs the projector
// stays up through a Kafka outage, [Projector.Health] saying why it does
// not fold meanwhile. The failures that stop it are the ones a retry
// repeats: [ErrPartitionCount], [ErrDecisionTooLarge] and [ErrDiskFull].
func (p *Projector) Run(ctx context.Context) error {
	backoff := minRetryBackoff
	for {
		folding, err := p.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("projector: the consumer stopped")
		}
		p.setHealth(err)
		if errors.Is(err, ErrPartitionCount) || errors.Is(err, ErrDecisionTooLarge) || errors.Is(err, ErrDiskFull) {
			return err
		}
		if folding {
			backoff = minRetryBackoff
		}
		p.log.Warn("not folding; trying again", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// Health is nil while the projector folds (or has not started), and
// otherwise the failure it is retrying after, or the one it stopped with.
func (p *Projector) Health() error {
	p.health.Lock()
	defer p.health.Unlock()
	return p.health.err
}

func (p *Projector) setHealth(err error) {
	p.health.Lock()
	defer p.health.Unlock()
	p.health.err = err
}

// runOnce is one attempt of Run: it ends at the first failure of any
// partition. folding reports whether it got as far as consuming.
func (p *Projector) runOnce(ctx context.Context) (bool, error) {
	if err := p.checkPartitions(ctx); err != nil {
		return false, err
	}
	var folding atomic.Bool
	err := consumer.Run(ctx, store{p}, consumer.Options{
		Kafka:        p.o.Kafka,
		Topics:       []string{p.o.Kafka.FactsTopic()},
		Partitions:   p.o.Partitions,
		PerPartition: true,
		Window:       kafkalog.WindowOptions{MaxRecords: p.o.Window, QuietGap: quietGap, MaxAge: maxWindowAge},
		MaxWait:      100 * time.Millisecond,
		Lag:          p.lag,
		Logger:       p.log,
		CommitPoint:  p.crash,
		OnResume: func(from map[kafkalog.TopicPartition]int64) {
			for tp, next := range from {
				p.log.Info("consuming", "partition", tp.Partition, "from", next)
			}
			folding.Store(true)
			p.setHealth(nil)
		},
	})
	if err != nil {
		return folding.Load(), fmt.Errorf("projector: %w", err)
	}
	return folding.Load(), nil
}

// ErrPartitionCount is returned by [Projector.Run] when the facts topic's
// partition count differs from the one the projector's state was built
// with.
var ErrPartitionCount = errors.New("projector: the facts topic's partition count changed")

// checkPartitions reads the facts topic's partition count and holds it to
// the count the state was built with, recording it on first use. A run's
// facts are ordered within the partition its id maps to; with another
// count runs map elsewhere, their new facts would be folded out of order
// with their old ones (docs/design.md §11.2), so the projector refuses to
// start rather than decide anything.
func (p *Projector) checkPartitions(ctx context.Context) error {
	topic := p.o.Kafka.FactsTopic()
	ends, err := kafkalog.EndOffsets(ctx, p.o.Kafka, topic)
	if err != nil {
		return fmt.Errorf("projector: partitions of %s: %w", topic, err)
	}
	n := len(ends)
	if n == 0 {
		return fmt.Errorf("projector: topic %s has no partitions", topic)
	}
	key := append([]byte{nsPartitions}, topic...)
	v, ok, err := get(p.db, key)
	if err != nil {
		return err
	}
	if ok {
		if len(v) != 4 {
			return fmt.Errorf("projector: the stored partition count of %s is %d bytes, want 4", topic, len(v))
		}
		if built := int(binary.BigEndian.Uint32(v)); built != n {
			return fmt.Errorf("%w: %s has %d partitions, but the projector's state in %s was built with %d; "+
				"runs would map to other partitions than their facts so far: refusing to fold", ErrPartitionCount, topic, n, p.o.Dir, built)
		}
	} else if err := p.db.Set(key, binary.BigEndian.AppendUint32(nil, uint32(n)), pebble.Sync); err != nil {
		return fmt.Errorf("projector: record the partition count: %w", err)
	}
	p.partitions = n
	return nil
}

// store is the projector's state as the consumer sees it: a partition's
// session folds its windows into Pebble.
type store struct{ p *Projector }

func (s store) Open(_ context.Context, parts []kafkalog.TopicPartition) (consumer.Session, map[kafkalog.TopicPartition]consumer.Stored, error) {
	if len(parts) != 1 {
		return nil, nil, fmt.Errorf("projector: a session folds one partition, not %d", len(parts))
	}
	next, err := s.p.Offset(parts[0].Partition)
	if err != nil {
		return nil, nil, err
	}
	sess := newSession(s.p, parts[0].Partition)
	return sess, map[kafkalog.TopicPartition]consumer.Stored{parts[0]: {Next: next}}, nil
}

// session folds one partition. It keeps the runs' folds between windows
// — a fold holds nothing of its own besides a cache of what it reads from
// the Store — and lets a run's fold go once the run has been idle for
// idleWindows windows, so that a partition that has seen many runs holds
// only those in flight. Evicting a fold changes no decision: the next
// record of the run makes a new one over the same stored state.
type session struct {
	p    *Projector
	part int
	rf   *runFolds
	// windows counts the windows folded; seen is, per run key, the last
	// window that held a record of it.
	windows     uint64
	seen        map[string]uint64
	idleWindows uint64
}

// idleWindows is how many windows without a record of a run its fold is
// kept for.
const idleWindows = 512

func newSession(p *Projector, part int) *session {
	return &session{p: p, part: part, rf: newRunFolds(), seen: map[string]uint64{}, idleWindows: idleWindows}
}

func (s *session) Apply(ctx context.Context, w *consumer.Window) error {
	if err := s.p.foldWindow(ctx, s.part, s.rf, w); err != nil {
		return err
	}
	s.evictIdle(w.Records)
	return nil
}

// evictIdle notes the runs a folded window held — by record key, the run
// ingest keys a fact with — and drops the folds of runs idle since
// idleWindows windows.
func (s *session) evictIdle(window []kafkalog.Message) {
	s.windows++
	for _, m := range window {
		if s.seen[string(m.Key)] != s.windows {
			s.seen[string(m.Key)] = s.windows
		}
	}
	for run := range s.rf.folds {
		if s.windows-s.seen[run] >= s.idleWindows {
			delete(s.rf.folds, run)
			delete(s.rf.explore, run)
		}
	}
	for run, last := range s.seen {
		if s.windows-last >= s.idleWindows {
			delete(s.seen, run)
		}
	}
}

func (s *session) Close() error { return nil }

// Prepare decodes and hashes a window's records ahead of its Apply, while
// the consumer's previous window is still being folded, emitted and
// committed (consumer.Preparer): the next window is cut and decoded in
// that time instead of after it, which is what a batch's seal latency
// waited for. Decoding reads no state; Apply folds what Prepare made, in
// order, exactly as it would have decoded it.
func (s *session) Prepare(w *consumer.Window) { w.Prepared = prepare(w.Records) }

// prepared is a record decoded (or refused) and hashed ahead of the fold.
type prepared struct {
	ev      events.Event
	err     error
	digests projections.Digests
}

func prepare(window []kafkalog.Message) []prepared {
	out := make([]prepared, len(window))
	for i, m := range window {
		out[i].ev, out[i].err = events.Decode(m.Value)
		if out[i].err == nil {
			out[i].digests = projections.HashValue(m.Value)
		}
	}
	return out
}

func offsetKey(topic string, part int) []byte {
	k := append([]byte{nsOffset}, topic...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(part))
}

// Offset is the next offset the projector will fold in a partition.
func (p *Projector) Offset(part int) (int64, error) {
	v, ok, err := get(p.db, offsetKey(p.o.Kafka.FactsTopic(), part))
	if err != nil || !ok {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// foldWindow folds a window, emits its decisions and commits it, in
// parts: a part ends at the fact that seals a batch, or at the window's
// end. Each part is one Pebble batch with the partition's next offset
// past it, committed once its decisions are acknowledged, so a sealed
// batch is committed — and announced to the trainers waiting for it — as
// soon as the fact that completes it is folded, not after the rest of
// its window.
func (p *Projector) foldWindow(ctx context.Context, part int, rf *runFolds, w *consumer.Window) error {
	window := w.Records
	ctx, span := p.startProcess(ctx, part, window)
	defer span.End()
	pre, _ := w.Prepared.([]prepared)
	if len(pre) != len(window) {
		pre = nil
	}
	for start := 0; start < len(window); {
		var head []prepared
		if pre != nil {
			head = pre[start:]
		}
		n, err := p.foldPart(ctx, part, rf, w, window[start:], head)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "fold failed")
			return err
		}
		start += n
	}
	return nil
}

// foldPart folds window (from its start) up to and including the first
// fact that seals a batch, or all of it, into one Pebble batch with the
// partition's next offset; emits the part's decisions, and only then
// commits the batch. It returns how many records the part held.
func (p *Projector) foldPart(ctx context.Context, part int, rf *runFolds, w *consumer.Window, window []kafkalog.Message, pre []prepared) (int, error) {
	began := time.Now()
	b := p.db.NewBatch()
	defer b.Close()
	decided, causes, err := p.foldPrepared(b, rf, window, pre, true)
	if err != nil {
		return 0, err
	}
	folded := time.Now()
	n := len(window)
	sealing := sealed(decided)
	if sealing {
		// The fold stopped after the sealing fact: the cause of the
		// part's last decision.
		n = causes[len(causes)-1] + 1
	}
	window = window[:n]
	seals := p.startSeals(ctx, window, decided, causes)
	defer seals.end()
	last := window[n-1].Offset
	if err := b.Set(offsetKey(p.o.Kafka.FactsTopic(), part), binary.BigEndian.AppendUint64(nil, uint64(last+1)), nil); err != nil {
		return 0, err
	}
	// Checked before the decisions leave: a part that cannot be
	// committed is not announced either, and a restart with space folds
	// it again.
	if err := p.checkSpace(); err != nil {
		return 0, err
	}
	if err := p.emit(ctx, decided); err != nil {
		return 0, err
	}
	acked := time.Now()
	if len(decided) > 0 {
		w.CommitPoint()
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("commit state: %w", err)
	}
	if p.committed != nil {
		p.committed(part, last+1, decided)
	}
	// Where a part's time went, and for one that seals a batch how old
	// its sealing fact was when the part began: the parts of a seal's
	// latency the projector owns.
	p.log.DebugContext(ctx, "window committed", "partition", part, "next", last+1, "facts", n, "decisions", len(decided),
		"sealed", sealing, "last_fact_age_ms", began.Sub(window[n-1].Time).Milliseconds(),
		"fold_ms", folded.Sub(began).Milliseconds(), "emit_ms", acked.Sub(folded).Milliseconds(), "commit_ms", time.Since(acked).Milliseconds())
	p.record(ctx, part, window, decided, causes, acked)
	if len(decided) > 0 {
		p.notify.fire()
	}
	p.progress.fire()
	return n, nil
}

// sealed reports whether decisions hold a batch.sealed.
func sealed(ds []projections.Decision) bool {
	for i := range ds {
		if ds[i].Kind == projections.KindBatchSealed {
			return true
		}
	}
	return false
}

// foldInto folds a window of records into the batch b: the runs' fold
// state, their decisions and samples. It returns the decisions made and,
// for each, the index in window of the record that caused it. The fold
// reads and writes its state in a window over the database, which goes
// into b once, at the end.
func (p *Projector) foldInto(b *pebble.Batch, rf *runFolds, window []kafkalog.Message) ([]projections.Decision, []int, error) {
	return p.foldPrepared(b, rf, window, nil, false)
}

// foldPrepared is foldInto with the records decoded ahead (pre, one per
// record of window), or decoded here when pre is nil. With untilSeal it
// stops after the first record whose decisions seal a batch: the records
// after it are left for another batch.
func (p *Projector) foldPrepared(b *pebble.Batch, rf *runFolds, window []kafkalog.Message, pre []prepared, untilSeal bool) ([]projections.Decision, []int, error) {
	var decided []projections.Decision
	var causes []int
	ws := newWindow(p.db)
	stores := map[string]*foldstore.PrefixStore{}
	// The run explorer's records of the runs the part holds, written
	// with the fold's state (docs/design.md §12.4).
	xstores := map[string]*foldstore.PrefixStore{}
	if len(pre) != len(window) {
		pre = nil
	}
	for i, m := range window {
		var ev events.Event
		var err error
		var dg projections.Digests
		if pre != nil {
			ev, err, dg = pre[i].ev, pre[i].err, pre[i].digests
		} else {
			ev, err = events.Decode(m.Value)
		}
		if err != nil {
			// Ingest only appends valid facts; a record that does not
			// decode was written around it. It is skipped, not folded, and
			// said loudly; replay reports it the same way.
			p.log.Error("undecodable record skipped", "partition", m.Partition, "offset", m.Offset, "err", err)
			continue
		}
		if want := kafkalog.PartitionOf([]byte(ev.Run), p.partitions); p.partitions > 0 && want != m.Partition {
			// Not the run's partition: not folded, reported by position
			// (projections.Misrouted), as replay reports it.
			d, err := projections.Misrouted(ev, projections.Record{Value: m.Value, Event: ev, Partition: int32(m.Partition), Offset: m.Offset}, want, p.partitions)
			if err != nil {
				return nil, nil, err
			}
			p.log.Warn("misrouted fact not folded", "run", ev.Run, "partition", m.Partition, "offset", m.Offset, "run_partition", want)
			if err := countMisrouted(ws, ev.Run); err != nil {
				return nil, nil, err
			}
			if err := explore.Misrouted(exploreStore(ws, ev.Run), d.Value); err != nil {
				return nil, nil, err
			}
			decided, causes = append(decided, d), append(causes, i)
			continue
		}
		f := rf.folds[ev.Run]
		if f == nil {
			f = projections.NewFoldWith(ev.Run, projections.FoldOptions{SamplesTo: rf.samplesTo(p.db, ev.Run, p.spaceCheck())})
			rf.folds[ev.Run] = f
			if err := noteRun(ws, ev.Run, ev.At); err != nil {
				return nil, nil, err
			}
		}
		st := stores[ev.Run]
		if st == nil {
			st = stateStore(ws, ev.Run)
			stores[ev.Run] = st
		}
		xw, xs, err := rf.explorer(ws, xstores, st, ev.Run)
		if err != nil {
			return nil, nil, err
		}
		rec := projections.Record{Value: m.Value, Event: ev, Partition: int32(m.Partition), Offset: m.Offset, Digests: dg}
		ds, err := f.Apply(st, rec)
		if err != nil {
			return nil, nil, fmt.Errorf("fold %s at %d/%d: %w", ev.Run, m.Partition, m.Offset, err)
		}
		if err := xw.Fact(xs, rec, f.Repeat(), m.Time); err != nil {
			return nil, nil, fmt.Errorf("explorer %s at %d/%d: %w", ev.Run, m.Partition, m.Offset, err)
		}
		for _, d := range ds {
			if err := xw.Decided(xs, d); err != nil {
				return nil, nil, fmt.Errorf("explorer %s at %d/%d: %w", ev.Run, m.Partition, m.Offset, err)
			}
			if err := b.Set(decisionKey(d.Run, d.Kind, d.Seq), d.Value, nil); err != nil {
				return nil, nil, err
			}
			if d.Kind == projections.KindBatchSealed {
				chunks, err := rf.takeSamples(p.db, b, d.Run, d.Seq)
				if err != nil {
					return nil, nil, fmt.Errorf("batch %d of %s: %w", d.Seq, d.Run, err)
				}
				// Stored as the API serves it, so that a GET copies bytes
				// instead of decoding the decision.
				m := d.Data
				if m == nil {
					if m, err = manifestData(d.Value); err != nil {
						return nil, nil, fmt.Errorf("batch %d of %s: %w", d.Seq, d.Run, err)
					}
				}
				if err := b.Set(manifestKey(d.Run, d.Seq), m, nil); err != nil {
					return nil, nil, err
				}
				p.writeArrowBody(d.Run, d.Seq, m, chunks)
			}
			causes = append(causes, i)
		}
		decided = append(decided, ds...)
		if untilSeal && sealed(ds) {
			break
		}
	}
	for run, xs := range xstores {
		if err := rf.explore[run].Flush(xs); err != nil {
			return nil, nil, fmt.Errorf("explorer %s: %w", run, err)
		}
	}
	if err := ws.Flush(b); err != nil {
		return nil, nil, err
	}
	return decided, causes, nil
}

// emit writes decisions to the decisions topic before the state that
// produced them is committed, retrying until Kafka acknowledges: a
// decision must never be committed as made and then be missing.
func (p *Projector) emit(ctx context.Context, ds []projections.Decision) error {
	if len(ds) == 0 {
		return nil
	}
	recs := make([]kafkalog.Record, len(ds))
	for i, d := range ds {
		recs[i] = kafkalog.Record{Key: []byte(d.Run), Value: d.Value, Headers: kafkalog.TypeHeaders(string(d.Kind), 1)}
	}
	backoff := 100 * time.Millisecond
	for {
		_, err := p.out.Append(ctx, recs)
		if err == nil {
			return nil
		}
		if errors.Is(err, kafkalog.ErrRecordTooLarge) {
			// No retry can succeed: stop, loudly, with nothing committed,
			// so a restart after raising the limit resumes exactly here.
			big := 0
			for i := range ds {
				if len(ds[i].Value) > len(ds[big].Value) {
					big = i
				}
			}
			d := ds[big]
			return fmt.Errorf("%w: the largest of %d decisions, %s %d of run %s, is %d bytes: raise max.message.bytes of %s (kafkalog.MaxMessageBytes for new topics) or seal smaller batches: %v",
				ErrDecisionTooLarge, len(ds), d.Kind, d.Seq, d.Run, len(d.Value), p.o.Kafka.DecisionsTopic(), err)
		}
		p.log.Warn("emitting decisions failed; retrying", "decisions", len(ds), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// ErrDecisionTooLarge is wrapped by the error the projector stops with when
// Kafka refuses its decisions as too large: retrying cannot help.
var ErrDecisionTooLarge = errors.New("projector: decision too large for the decisions topic")

// ErrDiskFull is wrapped by the error the projector stops with when the
// filesystem of its state directory is (nearly) full.
var ErrDiskFull = errors.New("projector: state directory out of space")

// checkSpace fails when the filesystem of the state directory has less
// than MinFreeBytes free. Pebble treats a failed WAL write as fatal and
// aborts the process mid-commit; stopping before that is a clean stop, and
// the committed state stays as it was for a restart once space is freed.
func (p *Projector) checkSpace() error {
	if p.o.MinFreeBytes < 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p.o.Dir, &st); err != nil {
		return fmt.Errorf("projector: free space of state directory %s: %w", p.o.Dir, err)
	}
	free := int64(uint64(st.Bavail) * uint64(st.Bsize))
	if free < p.o.MinFreeBytes {
		return fmt.Errorf("%w: %s has %d bytes free on its filesystem, less than the %d kept in reserve; free space (or move the state) and restart: nothing committed is lost",
			ErrDiskFull, p.o.Dir, free, p.o.MinFreeBytes)
	}
	return nil
}

// spaceCheck is checkSpace for a projector with a state directory, nil
// for one without (a test's fold over a bare database).
func (p *Projector) spaceCheck() func() error {
	if p.o.Dir == "" {
		return nil
	}
	return p.checkSpace
}

// noteRun indexes a run by the producer clock of its first fact seen. The
// index only orders GET /v1/runs; no projection reads it.
func noteRun(w *window, run string, at time.Time) error {
	k := append([]byte{nsRun}, run...)
	if _, ok, err := w.Get(k); err != nil || ok {
		return err
	}
	w.Set(k, binary.BigEndian.AppendUint64(nil, uint64(at.UnixNano())))
	return nil
}

// countMisrouted adds one to the run's misrouted findings, committed with
// the window: no fold numbers them, so this count is what status reads.
func countMisrouted(w *window, run string) error {
	k := append([]byte{nsMisrouted}, run...)
	v, ok, err := w.Get(k)
	if err != nil {
		return err
	}
	var n uint64
	if ok && len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	w.Set(k, binary.BigEndian.AppendUint64(nil, n+1))
	return nil
}

func decisionKey(run string, kind events.Type, seq uint64) []byte {
	k := append([]byte{nsDecision}, run...)
	k = append(k, 0)
	k = append(k, kind...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func manifestKey(run string, seq uint64) []byte {
	k := append([]byte{nsManifest}, run...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func legacySamplesKey(run string, seq uint64) []byte { return batchKey(nsLegacySamples, run, seq) }

func batchKey(ns byte, run string, seq uint64) []byte {
	k := append([]byte{ns}, run...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// broadcast wakes every waiter when new decisions are committed.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// pebbleLogger sends Pebble's log to slog: its info lines at debug level.
type pebbleLogger struct {
	l   *slog.Logger
	dir string
}

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf("pebble, state directory %s: "+format, append([]any{p.dir}, args...)...))
}
