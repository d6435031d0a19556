package projector

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/projections"
)

// maxSealLinks bounds the facts a seal span links to: the one that
// completed the batch, then other facts of its run in the same window.
const maxSealLinks = 16

// startProcess starts the consumer span of a window, linked to the trace
// context of (at most telemetry.MaxLinks of) its records. With tracing off
// it does nothing, not even read the headers.
func (p *Projector) startProcess(ctx context.Context, part int, window []kafkalog.Message) (context.Context, trace.Span) {
	if !p.tel.Tracing() {
		return ctx, trace.SpanFromContext(ctx)
	}
	links := telemetry.NewLinks(telemetry.MaxLinks)
	for i := range window {
		links.Add(kafkalog.SpanContext(p.tel, window[i].Headers))
	}
	topic := p.o.Kafka.FactsTopic()
	return p.tel.Tracer().Start(ctx, "process "+topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links.Links()...),
		trace.WithAttributes(
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationPartitionID(strconv.Itoa(part)),
			semconv.MessagingBatchMessageCount(len(window)),
			semconv.MessagingKafkaOffset(int(window[0].Offset)),
			attribute.Int("rolloutledger.links_dropped", links.Dropped),
		))
}

// seals are the spans of the batches a window sealed; they end once the
// window is committed.
type seals []trace.Span

func (s seals) end() {
	for _, sp := range s {
		sp.End()
	}
}

// startSeals starts a span per batch.sealed decision of the window, child
// of the window's span and linked to the fact that completed the batch (and
// to other facts of its run in the window).
func (p *Projector) startSeals(ctx context.Context, window []kafkalog.Message, decided []projections.Decision, causes []int) seals {
	if !p.tel.Tracing() {
		return nil
	}
	var out seals
	for i, d := range decided {
		if d.Kind != projections.KindBatchSealed {
			continue
		}
		cause := window[causes[i]]
		links := telemetry.NewLinks(maxSealLinks)
		links.Add(kafkalog.SpanContext(p.tel, cause.Headers))
		for j := causes[i] - 1; j >= 0; j-- {
			if string(window[j].Key) == d.Run {
				links.Add(kafkalog.SpanContext(p.tel, window[j].Headers))
			}
		}
		_, span := p.tel.Tracer().Start(ctx, "seal batch",
			trace.WithLinks(links.Links()...),
			trace.WithAttributes(
				attribute.String("rolloutledger.run", d.Run),
				attribute.Int64("rolloutledger.batch.seq", int64(d.Seq)),
				attribute.String("rolloutledger.decision.id", d.ID),
				attribute.Int("rolloutledger.fact.partition", cause.Partition),
				attribute.Int64("rolloutledger.fact.offset", cause.Offset),
			))
		out = append(out, span)
	}
	return out
}

// record counts a committed window: facts folded, decisions by type, and
// what the sealed batches and findings say. acked is when Kafka
// acknowledged the window's decisions.
func (p *Projector) record(ctx context.Context, part int, window []kafkalog.Message, decided []projections.Decision, causes []int, acked time.Time) {
	m := p.tel.Metrics
	m.FactsFolded(ctx, part, len(window))
	for i := 0; i < len(decided); {
		j := i + 1
		for j < len(decided) && decided[j].Kind == decided[i].Kind {
			j++
		}
		m.DecisionsEmitted(ctx, string(decided[i].Kind), j-i)
		i = j
	}
	for i, d := range decided {
		switch d.Kind {
		case projections.KindBatchSealed:
			at := window[causes[i]].Time
			m.BatchSealed(ctx, acked.Sub(at), !at.IsZero())
			man, err := projections.ManifestOf(d.Value)
			if err != nil {
				p.log.WarnContext(ctx, "sealed batch not counted: manifest does not decode", "run", d.Run, "seq", d.Seq, "err", err)
				continue
			}
			type turnKey struct {
				staleness int64
				masked    bool
			}
			turns := map[turnKey]int{}
			for _, g := range man.Groups {
				for _, a := range g.Attempts {
					for _, t := range a.Turns {
						turns[turnKey{min(max(t.Staleness, 0), 8), !t.Trained}]++
					}
				}
			}
			for k, n := range turns {
				m.BatchTurns(ctx, k.staleness, k.masked, n)
			}
			for _, g := range man.Dropped {
				m.GroupDropped(ctx, g.Reason)
			}
		case projections.KindAuditFinding:
			var f struct {
				Data struct {
					Kind string `json:"kind"`
				} `json:"data"`
			}
			if json.Unmarshal(d.Value, &f) == nil && f.Data.Kind != "" {
				m.Finding(ctx, f.Data.Kind)
			}
		}
	}
}
