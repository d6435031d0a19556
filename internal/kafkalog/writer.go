package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
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
	// BatchTimeout bounds how long a record waits for its batch; default
	// 2 ms.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request; default 10 s.
	WriteTimeout time.Duration
	// MaxAttempts is how often a batch is tried before the Append fails;
	// default 5.
	MaxAttempts int
	// Logger receives kafka-go's error log; nil discards it.
	Logger *slog.Logger
	// Telemetry receives the produce spans and latency; nil records
	// nothing.
	Telemetry *telemetry.Telemetry
}

// Writer appends records to one topic with acks=all. It is safe for
// concurrent use. Use one Writer per ordered stream of records (a topic).
type Writer struct {
	w     *kafka.Writer
	tel   *telemetry.Telemetry
	topic string
	attrs []attribute.KeyValue // of every produce span
}

// NewWriter returns a Writer to topic configured as the package documentation
// describes.
func NewWriter(c Config, topic string, o WriterOptions) *Writer {
	if o.BatchTimeout == 0 {
		o.BatchTimeout = 2 * time.Millisecond
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	w := &kafka.Writer{
		Addr:                   kafka.TCP(c.Brokers...),
		Topic:                  topic,
		Balancer:               kafka.BalancerFunc(balance),
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           o.BatchTimeout,
		BatchSize:              4096,
		BatchBytes:             MaxMessageBytes / 2,
		WriteTimeout:           o.WriteTimeout,
		ReadTimeout:            o.WriteTimeout,
		MaxAttempts:            o.MaxAttempts,
		WriteBackoffMin:        50 * time.Millisecond,
		WriteBackoffMax:        time.Second,
		Compression:            compress.Lz4,
		AllowAutoTopicCreation: false,
		Completion:             recordPositions,
	}
	if c.TLS != nil || c.SASL != nil {
		w.Transport = c.Transport()
	}
	if o.Logger != nil {
		log := o.Logger.With("component", "kafka-writer", "topic", topic)
		w.ErrorLogger = kafka.LoggerFunc(func(format string, args ...any) {
			log.Warn(fmt.Sprintf(format, args...))
		})
	}
	return &Writer{w: w, tel: telemetry.OrNop(o.Telemetry), topic: topic, attrs: []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(topic),
		semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend,
	}}
}

// balance places a record as [PartitionOf] says, among the partitions
// kafka-go lists in ascending order.
func balance(m kafka.Message, partitions ...int) int {
	return partitions[PartitionOf(m.Key, len(partitions))]
}

// recordPositions copies the position Kafka gave each record of a written
// batch back to the slot its Append is waiting on. kafka-go calls it before
// it releases the batch's waiters, so the slots are filled when
// WriteMessages returns.
func recordPositions(msgs []kafka.Message, err error) {
	if err != nil {
		return
	}
	for i := range msgs {
		if slot, ok := msgs[i].WriterData.(*Position); ok {
			*slot = Position{Partition: int32(msgs[i].Partition), Offset: msgs[i].Offset}
		}
	}
}

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
	tc := traceHeaders(w.tel, ctx)
	pos := make([]Position, len(recs))
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		pos[i] = Position{Partition: -1, Offset: -1}
		msgs[i] = kafka.Message{Key: r.Key, Value: r.Value, Headers: kafkaHeaders(r.Headers, tc), WriterData: &pos[i]}
	}
	start := time.Now()
	err := w.w.WriteMessages(ctx, msgs...)
	w.tel.Metrics.Produce(ctx, w.topic, time.Since(start))
	if err != nil {
		first := firstError(err)
		if errors.Is(first, kafka.MessageSizeTooLarge) {
			first = tooLarge{first}
		}
		err = fmt.Errorf("%w: %w", ErrNotAcknowledged, first)
		span.RecordError(err)
		span.SetStatus(codes.Error, "not acknowledged")
		return nil, err
	}
	for i, p := range pos {
		if p.Offset < 0 {
			return nil, fmt.Errorf("%w: no position reported for record %d", ErrNotAcknowledged, i)
		}
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

// Close flushes and releases the writer.
func (w *Writer) Close() error { return w.w.Close() }

// firstError unpacks kafka-go's per-message WriteErrors to its first error,
// which is what a reader of the log needs.
func firstError(err error) error {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil {
				return e
			}
		}
	}
	return err
}
