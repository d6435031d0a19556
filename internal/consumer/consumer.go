package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// Options configure [Run]. Kafka, Topics and the Store are required; the
// zero value of every other field means its default.
type Options struct {
	// Kafka locates the brokers.
	Kafka kafkalog.Config
	// Topics are read, every partition of each unless Partitions says.
	Topics []string
	// Partitions, when set, limits every topic to these partitions.
	Partitions []int
	// PerPartition gives every partition a stream of its own: its own
	// session, windows of its records alone, applied in parallel with the
	// other partitions'. Otherwise one session reads every partition and
	// its windows mix them.
	PerPartition bool
	// Window says how records are cut into windows.
	Window kafkalog.WindowOptions
	// MaxWait is each fetch's [kafkalog.TailerOptions.MaxWait].
	MaxWait time.Duration
	// Restart makes a failed session end in a backoff and a new session,
	// resumed from the stored offsets, until ctx ends. Without it the
	// first failure ends [Run] with its error (in PerPartition mode, the
	// first partition's failure ends every partition).
	Restart bool
	// MinBackoff and MaxBackoff bound the wait before a new session
	// [100 ms, 5 s]; it doubles per failed session that committed nothing.
	MinBackoff, MaxBackoff time.Duration
	// Lag, when set, receives each partition's stored offset and log end:
	// on resume, on every commit, and from a poll of the end offsets.
	Lag *telemetry.Lag
	// Logger; nil discards.
	Logger *slog.Logger
	// OnResume, when set, is told where a session resumes each partition,
	// after the log check (see [Rewinder]).
	OnResume func(map[kafkalog.TopicPartition]int64)
	// OnFailure, when set, is told of each failed session (with Restart).
	OnFailure func(error)
	// CommitPoint, when set, is called at every [Window.CommitPoint]:
	// tests inject crashes there ([CrashAfter]).
	CommitPoint func()
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if err := o.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(o.Topics) == 0 {
		errs = append(errs, errors.New("consumer: no topics"))
	}
	if o.MinBackoff < 0 || o.MaxBackoff < 0 || o.MaxWait < 0 {
		errs = append(errs, errors.New("consumer: backoff and wait bounds must not be negative"))
	}
	for _, p := range o.Partitions {
		if p < 0 {
			errs = append(errs, fmt.Errorf("consumer: partition %d is negative", p))
		}
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Run reads the topics from the offsets the Store keeps and applies them
// window by window, as the [Store] contract says, until ctx ends (then it
// returns nil) or, without [Options.Restart], a session fails.
func Run(ctx context.Context, s Store, o Options) error {
	if s == nil {
		return errors.New("consumer: no store")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	c := &consumer{o: o.withDefaults(), store: s}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)
	if c.o.Lag != nil {
		wg.Go(func() { c.o.Lag.Poll(ctx, telemetry.LagPollInterval, c.ends) })
	}
	if !c.o.PerPartition {
		return c.stream(ctx, nil, nil)
	}
	ends, err := c.ends(ctx)
	if err != nil {
		return err
	}
	var running sync.WaitGroup
	for _, tp := range c.partitions(ends) {
		running.Go(func() {
			if err := c.stream(ctx, []kafkalog.TopicPartition{tp}, ends); err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("partition %d: %w", tp.Partition, err))
			}
		})
	}
	running.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

type consumer struct {
	o     Options
	store Store
}

// ends returns the log end of every partition of the topics.
func (c *consumer) ends(ctx context.Context) (map[string]map[int]int64, error) {
	out := map[string]map[int]int64{}
	for _, topic := range c.o.Topics {
		ends, err := kafkalog.EndOffsets(ctx, c.o.Kafka, topic)
		if err != nil {
			return nil, err
		}
		out[topic] = ends
	}
	return out, nil
}

// partitions lists the partitions read, by topic then partition.
func (c *consumer) partitions(ends map[string]map[int]int64) []kafkalog.TopicPartition {
	var out []kafkalog.TopicPartition
	for _, topic := range c.o.Topics {
		if c.o.Partitions != nil {
			for _, p := range c.o.Partitions {
				out = append(out, kafkalog.TopicPartition{Topic: topic, Partition: p})
			}
			continue
		}
		parts := make([]int, 0, len(ends[topic]))
		for p := range ends[topic] {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			out = append(out, kafkalog.TopicPartition{Topic: topic, Partition: p})
		}
	}
	return out
}

// stream runs sessions over parts (nil: every partition at each session's
// start) until ctx ends or, without Restart, one fails. ends, when set,
// are the log ends for the first session.
func (c *consumer) stream(ctx context.Context, parts []kafkalog.TopicPartition, ends map[string]map[int]int64) error {
	backoff := c.o.MinBackoff
	for {
		committed, err := c.session(ctx, parts, ends)
		ends = nil
		if ctx.Err() != nil {
			return nil
		}
		if !c.o.Restart {
			return err
		}
		if c.o.OnFailure != nil {
			c.o.OnFailure(err)
		}
		if committed {
			backoff = c.o.MinBackoff
		}
		c.o.Logger.Warn("session ended; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.o.MaxBackoff)
	}
}

// session opens the Store, resumes from its offsets, and applies windows
// until something fails or ctx ends. It reports whether it committed any.
func (c *consumer) session(ctx context.Context, parts []kafkalog.TopicPartition, ends map[string]map[int]int64) (committed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if ends == nil {
		if ends, err = c.ends(ctx); err != nil {
			return false, err
		}
	}
	if parts == nil {
		parts = c.partitions(ends)
	}
	sess, stored, err := c.store.Open(ctx, parts)
	if err != nil {
		return false, err
	}
	defer sess.Close()
	from, err := c.resume(ctx, sess, parts, stored, ends)
	if err != nil {
		return false, err
	}
	if c.o.Lag != nil {
		for tp, next := range from {
			c.o.Lag.Committed(tp.Topic, tp.Partition, next)
		}
	}
	if c.o.OnResume != nil {
		c.o.OnResume(from)
	}
	tail, err := kafkalog.NewTail(ctx, c.o.Kafka, from, kafkalog.TailOptions{Window: c.o.Window, MaxWait: c.o.MaxWait})
	if err != nil {
		return false, err
	}
	defer tail.Close()
	idler, _ := sess.(Idler)
	apply := func(w *Window) error {
		if len(w.Records) == 0 {
			if idler == nil {
				return nil
			}
			return idler.Idle(ctx)
		}
		if err := sess.Apply(ctx, w); err != nil {
			return err
		}
		committed = true
		c.committed(w)
		return nil
	}

	prep, pipelined := sess.(Preparer)
	if !pipelined {
		for {
			msgs, err := tail.Window(ctx)
			if err != nil {
				return committed, err
			}
			err = apply(newWindow(msgs, c.o.CommitPoint))
			tail.Release(msgs)
			if err != nil {
				return committed, err
			}
		}
	}

	// The next window is cut and prepared while the previous one is
	// applied.
	windows := make(chan *Window, 1)
	var preparing sync.WaitGroup
	defer preparing.Wait()
	defer cancel(nil)
	preparing.Go(func() {
		defer close(windows)
		for {
			msgs, err := tail.Window(ctx)
			if err != nil {
				cancel(err)
				return
			}
			w := newWindow(msgs, c.o.CommitPoint)
			if len(msgs) > 0 {
				prep.Prepare(w)
			}
			tail.Release(msgs)
			select {
			case windows <- w:
			case <-ctx.Done():
				return
			}
		}
	})
	for w := range windows {
		if err := apply(w); err != nil {
			return committed, err
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return committed, cause
	}
	return committed, ctx.Err()
}

// committed reports a committed window's offsets to the lag gauge.
func (c *consumer) committed(w *Window) {
	if c.o.Lag == nil {
		return
	}
	for tp, r := range w.Partitions {
		c.o.Lag.Committed(tp.Topic, tp.Partition, r.Next)
		c.o.Lag.Seen(tp.Topic, tp.Partition, r.HighWaterMark)
	}
}

// resume decides where each partition is read from: the stored offset,
// unless the partition holds another log than the one it counts in (see
// [Rewinder]).
func (c *consumer) resume(ctx context.Context, sess Session, parts []kafkalog.TopicPartition, stored map[kafkalog.TopicPartition]Stored, ends map[string]map[int]int64) (map[kafkalog.TopicPartition]int64, error) {
	from := make(map[kafkalog.TopicPartition]int64, len(parts))
	for _, tp := range parts {
		st := stored[tp]
		end, known := ends[tp.Topic][tp.Partition]
		same := !known || st.Next <= end
		if same && st.Mark != nil && st.Next > 0 {
			var err error
			if same, err = c.sameLog(ctx, tp, *st.Mark); err != nil {
				return nil, err
			}
		}
		if same {
			from[tp] = st.Next
			continue
		}
		rw, ok := sess.(Rewinder)
		if !ok {
			c.o.Logger.Warn("the partition holds another log than the one the stored offset counts in (re-created broker?); reading on from the stored offset",
				"topic", tp.Topic, "partition", tp.Partition, "stored_next", st.Next, "log_end", end)
			from[tp] = st.Next
			continue
		}
		c.o.Logger.Warn("the partition holds another log than the one the stored offset counts in (re-created broker?); reading it from the start",
			"topic", tp.Topic, "partition", tp.Partition, "stored_next", st.Next, "log_end", end)
		if err := rw.Rewind(ctx, tp, st.Next); err != nil {
			return nil, err
		}
		from[tp] = 0
	}
	return from, nil
}

// sameLog reports whether the record at the mark's offset is the one
// marked. When the log no longer holds that offset (retention removed it)
// there is nothing to compare: the stored offset is trusted.
func (c *consumer) sameLog(ctx context.Context, tp kafkalog.TopicPartition, mark Mark) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	m, ok, err := kafkalog.ReadAt(ctx, c.o.Kafka, tp, mark.Offset)
	if err != nil {
		return false, fmt.Errorf("read %s/%d at %d to check the log: %w", tp.Topic, tp.Partition, mark.Offset, err)
	}
	if !ok {
		return true, nil
	}
	return string(Fingerprint(m.Value)) == string(mark.Fingerprint), nil
}

// CrashAfter returns a [Options.CommitPoint] for crash tests that kills
// the process (SIGKILL) at its n-th call: between a window's effects and
// its commit, the one instant where a crash must not lose or change
// anything. The count is shared by every stream given the function. n <= 0
// returns nil: no crash.
func CrashAfter(n int, log *slog.Logger) func() {
	if n <= 0 {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var calls atomic.Int64
	return func() {
		if calls.Add(1) < int64(n) {
			return
		}
		log.Warn("fault injection: killing the process at the commit point", "after", n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
