package kafkalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/semaphore"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int
}

// TailerOptions tune a [Tailer]; the zero value is the documented defaults.
type TailerOptions struct {
	// MaxWait bounds how long the broker holds a fetch that finds no new
	// record [250 ms]. A fetch returns as soon as one record is there, so
	// this bounds idle polling, not latency.
	MaxWait time.Duration
}

// fetchSlack is how late a fetch's answer may arrive, beyond the time the
// broker may hold it, before the fetch is given up and its connection
// redialled. kafka-go derives both from one setting: the broker holds a
// fetch for ReaderConfig.MaxWait less the smaller of one second and a
// quarter of it, and the connection times out at MaxWait. With MaxWait
// at the 250 ms the broker should hold a fetch, a reply later than 62 ms
// — any reply on a loaded machine — dropped the connection and the
// records it carried; every retry redialled and fetched again, so a
// reader stayed at its offset for as long as the load lasted, and its
// redials loaded the broker further. ReaderConfig.MaxWait is therefore
// the broker's wait plus this second, kafka-go's largest allowance.
const fetchSlack = time.Second

// fetchBytes bounds what one fetch asks of a partition. The broker builds
// and sends a fetch's answer whole before its first byte arrives, so the
// answer's size is time against fetchSlack: 16 MiB answers, built again
// after each drop, took longer than that on a loaded machine and a read
// from the start of a large partition never finished. A record larger
// than this is still read: the broker always answers with the first batch
// whole.
const fetchBytes = 1 << 20

// Tailer reads one partition in offset order, from a given offset on,
// waiting at the log end for what is appended next. It is not safe for
// concurrent use.
type Tailer struct {
	r  *kafka.Reader
	tp TopicPartition
}

// NewTailer returns a Tailer of tp starting at offset from. An offset
// below the log start (removed by retention) reads from the log start; an
// offset past the log end waits until the log reaches it.
func NewTailer(c Config, tp TopicPartition, from int64, o TailerOptions) (*Tailer, error) {
	if o.MaxWait <= 0 {
		o.MaxWait = 250 * time.Millisecond
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: c.Brokers, Topic: tp.Topic, Partition: tp.Partition,
		MinBytes: 1, MaxBytes: fetchBytes, MaxWait: o.MaxWait + fetchSlack,
		ReadLagInterval: -1, Dialer: c.Dialer(),
	})
	if err := r.SetOffset(from); err != nil {
		r.Close()
		return nil, fmt.Errorf("kafkalog: seek %s/%d to %d: %w", tp.Topic, tp.Partition, from, err)
	}
	return &Tailer{r: r, tp: tp}, nil
}

// Next blocks until the next record is read, or ctx ends (then it returns
// ctx's error as is).
func (t *Tailer) Next(ctx context.Context) (Message, error) {
	m, err := t.r.ReadMessage(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Message{}, ctx.Err()
		}
		return Message{}, fmt.Errorf("kafkalog: read %s/%d: %w", t.tp.Topic, t.tp.Partition, err)
	}
	return message(m), nil
}

// Close releases the tailer's connections.
func (t *Tailer) Close() error { return t.r.Close() }

func message(m kafka.Message) Message {
	var h []Header
	if len(m.Headers) > 0 {
		h = make([]Header, len(m.Headers))
		for i, x := range m.Headers {
			h[i] = Header(x)
		}
	}
	return Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, HighWaterMark: m.HighWaterMark,
		Time: m.Time, Key: m.Key, Value: m.Value, Headers: h}
}

// WindowOptions say how a [Tail] cuts the records it reads into windows.
// A window is cut when it holds MaxRecords records or MaxBytes bytes of
// values, when QuietGap passes without a new record, or when MaxAge has
// passed since its first record, whichever comes first — unless the
// window is catching up (see CatchUp).
type WindowOptions struct {
	// MaxRecords bounds a window's records [1,000].
	MaxRecords int
	// MaxBytes bounds the bytes of a window's values; 0 means no bound.
	// A window always takes its first record, however large.
	MaxBytes int
	// QuietGap is how long a window waits for one more record after the
	// last; 0 takes only records already read, without waiting.
	QuietGap time.Duration
	// MaxAge bounds how long a window keeps waiting for more records after
	// its first; 0 means no bound besides QuietGap.
	MaxAge time.Duration
	// Idle, when positive, is how long [Tail.Window] waits for a first
	// record before it returns an empty window; 0 waits for ever.
	Idle time.Duration
	// CatchUp bounds how long a window keeps growing, past QuietGap and
	// MaxAge, while its last record says the log already holds more (the
	// record's offset is below its partition's high watermark less one)
	// [250 ms; negative: never]. Those records exist and are on their
	// way, so a pause before them is the reader's, not the log's: on a
	// loaded machine, cutting there folded a backlog in windows of one or
	// two records, each paying a whole commit, and a consumer behind the
	// log fell further behind the busier the machine was. Caught up, a
	// window is cut as QuietGap and MaxAge say. A window never waits on
	// more than half the prefetch bounds, which its own records hold.
	CatchUp time.Duration
}

// defaultCatchUp is WindowOptions.CatchUp's default.
const defaultCatchUp = 250 * time.Millisecond

// TailOptions tune a [Tail]; the zero value is the documented defaults.
type TailOptions struct {
	Window WindowOptions
	// MaxWait is each partition's [TailerOptions.MaxWait].
	MaxWait time.Duration
	// PrefetchRecords bounds the records read ahead of the windows and not
	// yet released [2×Window.MaxRecords].
	PrefetchRecords int
	// PrefetchBytes bounds their value bytes [2×Window.MaxBytes, or
	// MaxMessageBytes when windows have no byte bound].
	PrefetchBytes int64
}

// Tail reads several partitions at once, each in offset order, and cuts
// what it reads into windows: a busy log is read in large windows, a quiet
// one within milliseconds of each record. Records of one partition keep
// their order within and across windows; records of different partitions
// interleave as they arrive. Reading runs ahead of the windows, bounded by
// the prefetch options: a window's records hold their share of the bound
// until [Tail.Release].
type Tail struct {
	o      TailOptions
	in     chan Message
	budget *semaphore.Weighted
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// NewTail starts reading each partition of from at its offset. Reading
// stops at [Tail.Close], when ctx ends, or at the first read error, which
// the next [Tail.Window] returns.
func NewTail(ctx context.Context, c Config, from map[TopicPartition]int64, o TailOptions) (*Tail, error) {
	if o.Window.MaxRecords <= 0 {
		o.Window.MaxRecords = 1000
	}
	if o.PrefetchRecords <= 0 {
		o.PrefetchRecords = 2 * o.Window.MaxRecords
	}
	if o.PrefetchBytes <= 0 {
		o.PrefetchBytes = MaxMessageBytes
		if o.Window.MaxBytes > 0 {
			o.PrefetchBytes = 2 * int64(o.Window.MaxBytes)
		}
	}
	t := &Tail{o: o, in: make(chan Message, o.PrefetchRecords), budget: semaphore.NewWeighted(o.PrefetchBytes)}
	t.ctx, t.cancel = context.WithCancelCause(ctx)
	tailers := make([]*Tailer, 0, len(from))
	for tp, next := range from {
		r, err := NewTailer(c, tp, next, TailerOptions{MaxWait: o.MaxWait})
		if err != nil {
			for _, r := range tailers {
				r.Close()
			}
			t.cancel(nil)
			return nil, err
		}
		tailers = append(tailers, r)
	}
	for _, r := range tailers {
		t.wg.Go(func() {
			defer r.Close()
			if err := t.read(r); err != nil {
				t.cancel(err)
			}
		})
	}
	return t, nil
}

func (t *Tail) read(r *Tailer) error {
	for {
		m, err := r.Next(t.ctx)
		if err != nil {
			if t.ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := t.budget.Acquire(t.ctx, t.cost(m)); err != nil {
			return nil
		}
		select {
		case t.in <- m:
		case <-t.ctx.Done():
			return nil
		}
	}
}

// cost is what a record holds of the prefetch bytes: its value's size,
// capped so that a record larger than the bound is still read.
func (t *Tail) cost(m Message) int64 { return min(int64(len(m.Value)), t.o.PrefetchBytes) }

// Window blocks for one record, then takes more as [WindowOptions] says,
// and returns them. With Window.Idle set it returns an empty window when
// no record arrived for that long. It returns ctx's error when ctx ends,
// and the read error when reading a partition failed.
func (t *Tail) Window(ctx context.Context) ([]Message, error) {
	w := t.o.Window
	var idle <-chan time.Time
	if w.Idle > 0 {
		timer := time.NewTimer(w.Idle)
		defer timer.Stop()
		idle = timer.C
	}
	var out []Message
	select {
	case m := <-t.in:
		out = append(out, m)
	case <-idle:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.ctx.Done():
		return nil, t.failure(ctx)
	}
	size := len(out[0].Value)
	full := func() bool { return len(out) >= w.MaxRecords || (w.MaxBytes > 0 && size >= w.MaxBytes) }
	// catchingUp says whether to wait for records the log is known to hold
	// (WindowOptions.CatchUp): the last record read is not its partition's
	// last, the bound has not passed, and this window holds less than half
	// of what may be read ahead, so the reader is not waiting on it.
	var until time.Time
	if w.CatchUp >= 0 {
		until = time.Now().Add(cmp.Or(w.CatchUp, defaultCatchUp))
	}
	catchingUp := func() bool {
		last := out[len(out)-1]
		return !until.IsZero() && last.Offset+1 < last.HighWaterMark && time.Now().Before(until) &&
			2*int64(size) < t.o.PrefetchBytes && 2*len(out) < t.o.PrefetchRecords
	}
	var catchUp <-chan time.Time // fires at until
	if !until.IsZero() {
		timer := time.NewTimer(time.Until(until))
		defer timer.Stop()
		catchUp = timer.C
	}
	// await takes the next record: one already read at once, else one that
	// comes before gap fires or, while catching up, before the catch-up
	// bound. It says whether one came.
	await := func(gap <-chan time.Time) (bool, error) {
		select {
		case m := <-t.in:
			out = append(out, m)
			size += len(m.Value)
			return true, nil
		default:
		}
		wait, bound := gap, (<-chan time.Time)(nil)
		for {
			select {
			case m := <-t.in:
				out = append(out, m)
				size += len(m.Value)
				return true, nil
			case <-wait:
				if !catchingUp() {
					return false, nil
				}
				wait, bound = nil, catchUp
			case <-bound:
				return false, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
	}
	if w.QuietGap <= 0 {
		closed := make(chan time.Time)
		close(closed)
		for !full() {
			ok, err := await(closed)
			if err != nil {
				t.Release(out)
				return nil, err
			}
			if !ok {
				break
			}
		}
		return out, nil
	}
	var deadline time.Time
	if w.MaxAge > 0 {
		deadline = time.Now().Add(w.MaxAge)
	}
	gap := time.NewTimer(w.QuietGap)
	defer gap.Stop()
	for !full() && (deadline.IsZero() || time.Now().Before(deadline) || catchingUp()) {
		gap.Reset(w.QuietGap)
		ok, err := await(gap.C)
		if err != nil {
			t.Release(out)
			return nil, err
		}
		if !ok {
			break
		}
	}
	return out, nil
}

// failure is why reading stopped: ctx's end, a partition's read error,
// or Close.
func (t *Tail) failure(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := context.Cause(t.ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return errors.New("kafkalog: tail closed")
}

// Release returns the prefetch bytes a window's records hold: call it once
// the window's values are no longer needed (or copied), so reading goes on.
func (t *Tail) Release(w []Message) {
	var n int64
	for _, m := range w {
		n += t.cost(m)
	}
	if n > 0 {
		t.budget.Release(n)
	}
}

// Close stops reading and waits for the partitions' readers to end.
func (t *Tail) Close() error {
	t.cancel(nil)
	t.wg.Wait()
	return nil
}
