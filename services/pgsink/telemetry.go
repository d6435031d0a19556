package pgsink

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// startWrite starts the client span of one transaction, following the
// database semantic conventions, linked to (at most telemetry.MaxLinks of)
// the trace contexts of the records it stores.
func (s *Sink) startWrite(ctx context.Context, win *window) (context.Context, trace.Span) {
	if !s.tel.Tracing() {
		return ctx, trace.SpanFromContext(ctx)
	}
	var links []trace.Link
	dropped := 0
	if win.links != nil {
		links, dropped = win.links.Links(), win.links.Dropped
	}
	// The transaction copies and inserts into several tables and moves
	// the offsets: a batch of operations on the schema.
	attrs := []attribute.KeyValue{
		semconv.DBSystemNamePostgreSQL,
		semconv.DBOperationName("BATCH INSERT"),
		attribute.String("rolloutledger.pg.schema", s.o.Schema),
		attribute.Int("rolloutledger.records", win.records),
		attribute.Int("rolloutledger.links_dropped", dropped),
	}
	if s.database != "" {
		attrs = append(attrs, semconv.DBNamespace(s.database))
	}
	return s.tel.Tracer().Start(ctx, "BATCH INSERT "+s.o.Schema,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...),
		trace.WithAttributes(attrs...))
}

// noteSpanTables adds the tables a committed transaction wrote to its span:
// db.collection.name when it was one table (besides the offsets).
func (s *Sink) noteSpanTables(span trace.Span, staged []tableID, rows int64) {
	if !span.IsRecording() {
		return
	}
	names := make([]string, len(staged))
	for i, id := range staged {
		names[i] = tables[id].name
	}
	span.SetAttributes(
		semconv.DBOperationBatchSize(len(staged)+1),
		attribute.StringSlice("rolloutledger.pg.tables", names),
		attribute.Int64("rolloutledger.pg.rows", rows),
	)
	if len(names) == 1 {
		span.SetAttributes(semconv.DBCollectionName(names[0]))
	}
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, "transaction not committed")
	}
	span.End()
}
