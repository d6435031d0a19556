package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	metaAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// ErrNotAcknowledged wraps every failure of [Writer.Append]: Kafka did not
// acknowledge all records. Some may nonetheless have been appended; appending
// the same records again is the way to recover, and is safe for facts.
var ErrNotAcknowledged = errors.New("kafkalog: not acknowledged")

// ErrRecordTooLarge is also wrapped by an [Writer.Append] failure when the
// broker refused a record as larger than the topic's max.message.bytes:
// no retry can succeed.
var ErrRecordTooLarge = errors.New("kafkalog: record too large for the topic")

// tooLarge marks the broker's refusal as [ErrRecordTooLarge] without
// changing what the error says.
type tooLarge struct{ err error }

func (e tooLarge) Error() string        { return e.err.Error() }
func (e tooLarge) Unwrap() error        { return e.err }
func (e tooLarge) Is(target error) bool { return target == ErrRecordTooLarge }

// WriterOptions tune a [Writer]; the zero value is right for ingest.
type WriterOptions struct {
	// WriteTimeout bounds one produce request; default 10 s.
	WriteTimeout time.Duration
	// MaxAttempts is how often a partition's batch is tried before the
	// Appends waiting on it fail; default 5.
	MaxAttempts int
	// Logger receives the writer's retries; nil discards them.
	Logger *slog.Logger
	// Telemetry receives the produce spans and latency; nil records
	// nothing.
	Telemetry *telemetry.Telemetry
}

// Bounds of the produce requests a [Writer] sends.
const (
	// maxPartitionBytes bounds the records of one partition in one
	// request, which are one compressed record batch; a partition's first
	// record always goes, however large. A reader of one record decodes its
	// whole batch (the explorer reads turns' token arrays back one by one:
	// docs/design.md §12.4), so batches stay near this size: at 8 MiB an
	// attempt of 28 turns read 93 ms of batches, nearly all lz4.
	maxPartitionBytes = 1 << 20
	// maxRequestBytes bounds the records of one request across its
	// partitions; a request always takes its first partition. Requests
	// are sent concurrently, each compressed on its own goroutine: at
	// 16 MiB a leader's backlog of large records (turns with tokens) went
	// out in one request at a time, and the ingest of 64 such records a
	// call reached 0.57-0.84 of kafka-go's own writer, against 0.85-1.13
	// at 1 MiB (BENCHMARKS.md, "Ingest of large records").
	maxRequestBytes = 1 << 20
	// minBackoff and maxBackoff bound the wait before a batch is tried
	// again; it doubles per attempt.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// Writer appends records to one topic with acks=all. It is safe for
// concurrent use. Use one Writer per ordered stream of records (a topic).
//
// It speaks kafka-go's protocol layer directly: records of every Append
// wait in a queue per partition, and one sender takes, for each partition
// not already in a request, everything queued there (up to a batch's
// bound), and sends the partitions that share a leader in produce requests
// of up to maxRequestBytes, concurrently. While a request is in flight the
// next Appends queue behind it, so concurrent Appends share requests
// (batching across requests), one request carries many partitions
// (pipelining across partitions) and a backlog goes out in several
// requests at once, with no timer to wait on when the writer is idle. A
// partition is in at most one request at a time, so its records land in
// the order they were queued, retries included.
type Writer struct {
	tr    kafka.RoundTripper
	addr  net.Addr
	topic string
	o     WriterOptions
	log   *slog.Logger
	tel   *telemetry.Telemetry
	attrs []attribute.KeyValue // of every produce span

	mu     sync.Mutex
	queued map[int32][]entry // per partition, in the order appended
	busy   map[int32]bool    // partitions in a request now
	// leaders are the partitions' leaders as the last Append's metadata
	// said: partitions of one leader share a request.
	leaders map[int32]int32
	closed  bool
	wake    chan struct{} // the sender has work (capacity 1)
	stopped chan struct{} // closed when the sender ended
	sending sync.WaitGroup
}

// entry is one record waiting for its acknowledgment.
type entry struct {
	key, value []byte
	headers    []kafka.Header
	slot       *Position
	app        *pendingAppend
}

// pendingAppend is an Append waiting for its records; left and err are
// guarded by the writer's mutex.
type pendingAppend struct {
	left int
	err  error
	done chan struct{}
}

// NewWriter returns a Writer to topic configured as the package documentation
// describes.
func NewWriter(c Config, topic string, o WriterOptions) *Writer {
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	log := slog.New(slog.DiscardHandler)
	if o.Logger != nil {
		log = o.Logger.With("component", "kafka-writer", "topic", topic)
	}
	w := &Writer{
		tr: c.Transport(), addr: kafka.TCP(c.Brokers...), topic: topic, o: o, log: log,
		tel:    telemetry.OrNop(o.Telemetry),
		queued: map[int32][]entry{}, busy: map[int32]bool{}, leaders: map[int32]int32{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		attrs: []attribute.KeyValue{
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationName("send"),
			semconv.MessagingOperationTypeSend,
		},
	}
	go w.run()
	return w
}

// errClosed is what an Append after Close fails with.
var errClosed = errors.New("kafkalog: writer closed")

// Append writes recs and returns each record's position once Kafka
// acknowledged all of them. On error, nothing is known of which records were
// appended; the error wraps [ErrNotAcknowledged].
//
// The write is a producer span, child of ctx's span, and the trace context
// of ctx (that span's when tracing is on) is set in every record's headers,
// replacing a traceparent the record had; the record values are untouched.
func (w *Writer) Append(ctx context.Context, recs []Record) ([]Position, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	ctx, span := w.tel.Tracer().Start(ctx, "send "+w.topic, trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	start := time.Now()
	pos, err := w.append(ctx, recs, traceHeaders(w.tel, ctx))
	w.tel.Metrics.Produce(ctx, w.topic, time.Since(start))
	if err != nil {
		if errors.Is(err, kafka.MessageSizeTooLarge) {
			err = tooLarge{err}
		}
		err = fmt.Errorf("%w: %w", ErrNotAcknowledged, err)
		span.RecordError(err)
		span.SetStatus(codes.Error, "not acknowledged")
		return nil, err
	}
	if span.IsRecording() {
		span.SetAttributes(w.attrs...)
		if len(recs) > 1 {
			span.SetAttributes(semconv.MessagingBatchMessageCount(len(recs)))
		}
		if samePartition(pos) {
			// For a batch, the offset of its first record.
			span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(int(pos[0].Partition))),
				semconv.MessagingKafkaOffset(int(pos[0].Offset)))
		}
	}
	return pos, nil
}

// append queues recs on their partitions and waits for the sender to have
// every one acknowledged.
func (w *Writer) append(ctx context.Context, recs []Record, tc []Header) ([]Position, error) {
	leaders, err := w.partitions(ctx)
	if err != nil {
		return nil, err
	}
	n := len(leaders)
	pos := make([]Position, len(recs))
	app := &pendingAppend{left: len(recs), done: make(chan struct{})}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, errClosed
	}
	for i, r := range recs {
		pos[i] = Position{Partition: -1, Offset: -1}
		p := int32(PartitionOf(r.Key, n))
		w.queued[p] = append(w.queued[p], entry{key: r.Key, value: r.Value, headers: kafkaHeaders(r.Headers, tc), slot: &pos[i], app: app})
	}
	for p, l := range leaders {
		w.leaders[p] = l
	}
	w.mu.Unlock()
	w.poke()
	select {
	case <-app.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if app.err != nil {
		return nil, app.err
	}
	for i, p := range pos {
		if p.Offset < 0 {
			return nil, fmt.Errorf("no position reported for record %d", i)
		}
	}
	return pos, nil
}

// partitions returns the leader of each of the topic's partitions, from
// the transport's cached metadata.
func (w *Writer) partitions(ctx context.Context) (map[int32]int32, error) {
	r, err := w.tr.RoundTrip(ctx, w.addr, &metaAPI.Request{TopicNames: []string{w.topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", w.topic, err)
	}
	for _, t := range r.(*metaAPI.Response).Topics {
		if t.Name != w.topic {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, fmt.Errorf("metadata of %s: %w", w.topic, kafka.Error(t.ErrorCode))
		}
		if len(t.Partitions) == 0 {
			break
		}
		out := make(map[int32]int32, len(t.Partitions))
		for _, p := range t.Partitions {
			out[p.PartitionIndex] = p.LeaderID
		}
		return out, nil
	}
	return nil, fmt.Errorf("metadata of %s: %w", w.topic, kafka.UnknownTopicOrPartition)
}

func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the sender: whenever woken it sends what is queued on partitions
// not in a request, until the writer is closed and everything queued has
// been answered.
func (w *Writer) run() {
	defer close(w.stopped)
	for range w.wake {
		reqs, done := w.take()
		for _, r := range reqs {
			w.sending.Go(func() { w.send(r) })
		}
		if done {
			return
		}
	}
}

// batch is the records of one partition in one request.
type batch struct {
	partition int32
	entries   []entry
}

// take moves what is queued on partitions not in a request into requests,
// one per leader (more when a leader's records exceed maxRequestBytes),
// and marks those partitions busy. done is true once the writer is closed
// and nothing is queued or in a request.
func (w *Writer) take() (reqs [][]batch, done bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byLeader := map[int32][]batch{}
	size := map[int32]int{}
	for p, q := range w.queued {
		if len(q) == 0 || w.busy[p] {
			continue
		}
		n, bytes := 0, 0
		for n < len(q) && (n == 0 || bytes+len(q[n].value) <= maxPartitionBytes) {
			bytes += len(q[n].key) + len(q[n].value)
			n++
		}
		b := batch{partition: p, entries: q[:n:n]}
		if n == len(q) {
			delete(w.queued, p)
		} else {
			w.queued[p] = q[n:]
		}
		w.busy[p] = true
		l, ok := w.leaders[p]
		if !ok {
			l = -1
		}
		if size[l] > 0 && size[l]+bytes > maxRequestBytes {
			reqs = append(reqs, byLeader[l])
			byLeader[l], size[l] = nil, 0
		}
		byLeader[l] = append(byLeader[l], b)
		size[l] += bytes
	}
	for _, r := range byLeader {
		if len(r) > 0 {
			reqs = append(reqs, r)
		}
	}
	return reqs, w.closed && len(w.queued) == 0 && len(w.busy) == 0 && len(reqs) == 0
}

// send produces a request's batches, trying again those whose partition
// answered a retriable error (or all, when the request failed as a whole)
// up to MaxAttempts times, and completes their Appends.
func (w *Writer) send(batches []batch) {
	for attempt := 1; len(batches) > 0; attempt++ {
		if attempt > 1 {
			time.Sleep(min(maxBackoff, minBackoff<<(attempt-2)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.o.WriteTimeout)
		r, err := w.tr.RoundTrip(ctx, w.addr, w.produceRequest(batches))
		cancel()
		last := attempt >= w.o.MaxAttempts
		var again []batch
		if err != nil {
			var ke kafka.Error
			if last || (errors.As(err, &ke) && !ke.Temporary()) {
				for _, b := range batches {
					w.complete(b, 0, err)
				}
				return
			}
			w.log.Warn("produce failed; trying again", "attempt", attempt, "partitions", len(batches), "err", err)
			continue
		}
		answers := map[int32]produceAPI.ResponsePartition{}
		if res, ok := r.(*produceAPI.Response); ok {
			for _, t := range res.Topics {
				if t.Topic == w.topic {
					for _, p := range t.Partitions {
						answers[p.Partition] = p
					}
				}
			}
		}
		for _, b := range batches {
			a, ok := answers[b.partition]
			var perr error
			switch {
			case !ok:
				perr = fmt.Errorf("partition %d of %s: no answer to the produce request", b.partition, w.topic)
			case a.ErrorCode != 0:
				perr = kafka.Error(a.ErrorCode)
				if a.ErrorMessage != "" {
					perr = fmt.Errorf("%w: %s", perr, a.ErrorMessage)
				}
			}
			var ke kafka.Error
			switch {
			case perr == nil:
				w.complete(b, a.BaseOffset, nil)
			case last || (errors.As(perr, &ke) && !ke.Temporary()):
				w.complete(b, 0, perr)
			default:
				w.log.Warn("produce failed; trying again", "attempt", attempt, "partition", b.partition, "records", len(b.entries), "err", perr)
				again = append(again, b)
			}
		}
		batches = again
	}
}

// produceRequest is the produce request of batches: acks=all, lz4, one
// record set per partition, the values passed to the encoder as they are.
func (w *Writer) produceRequest(batches []batch) *produceAPI.Request {
	parts := make([]produceAPI.RequestPartition, len(batches))
	for i, b := range batches {
		recs := make([]protocol.Record, len(b.entries))
		for j, e := range b.entries {
			recs[j] = protocol.Record{Key: protocol.NewBytes(e.key), Value: protocol.NewBytes(e.value), Headers: e.headers}
		}
		parts[i] = produceAPI.RequestPartition{Partition: b.partition, RecordSet: protocol.RecordSet{
			Attributes: protocol.Attributes(compress.Lz4) & 0x7,
			Records:    protocol.NewRecordReader(recs...),
		}}
	}
	return &produceAPI.Request{
		Acks:    int16(kafka.RequireAll),
		Timeout: int32(w.o.WriteTimeout / time.Millisecond),
		Topics:  []produceAPI.RequestTopic{{Topic: w.topic, Partitions: parts}},
	}
}

// complete settles a batch: its records' positions from base, or err for
// the Appends waiting on them; and frees its partition for the next
// request.
func (w *Writer) complete(b batch, base int64, err error) {
	w.mu.Lock()
	for i, e := range b.entries {
		if err == nil {
			*e.slot = Position{Partition: b.partition, Offset: base + int64(i)}
		} else if e.app.err == nil {
			e.app.err = fmt.Errorf("partition %d: %w", b.partition, err)
		}
		if e.app.left--; e.app.left == 0 {
			close(e.app.done)
		}
	}
	delete(w.busy, b.partition)
	w.mu.Unlock()
	w.poke()
}

// kafkaHeaders returns h with the trace headers set (replacing any of the
// same key), in a new slice: the caller's records are not modified.
func kafkaHeaders(h, trace []Header) []kafka.Header {
	if len(h)+len(trace) == 0 {
		return nil
	}
	out := make([]kafka.Header, 0, len(h)+len(trace))
	for _, x := range h {
		if !slices.ContainsFunc(trace, func(t Header) bool { return t.Key == x.Key }) {
			out = append(out, kafka.Header(x))
		}
	}
	for _, x := range trace {
		out = append(out, kafka.Header(x))
	}
	return out
}

func samePartition(pos []Position) bool {
	for _, p := range pos[1:] {
		if p.Partition != pos[0].Partition {
			return false
		}
	}
	return true
}

// Close sends what is queued, waits for every request's answer, and
// releases the writer. Appends after Close fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.poke()
	<-w.stopped
	w.sending.Wait()
	return nil
}
