package kafkalog

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// Trace headers replace a record's traceparent rather than add a second,
// and round-trip to the span context they came from.
func TestTraceHeadersRoundTrip(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: tracetest.NewInMemoryExporter(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ctx, span := tel.Tracer().Start(context.Background(), "send")
	defer span.End()
	th := traceHeaders(tel, ctx)
	h := []Header{{Key: HeaderType, Value: []byte("turn.generated")}, {Key: HeaderTraceparent, Value: []byte("stale")}}
	for _, x := range th {
		headerCarrier{&h}.Set(x.Key, string(x.Value))
	}
	n := 0
	for _, x := range h {
		if x.Key == HeaderTraceparent {
			n++
		}
	}
	if n != 1 || len(h) != 2 {
		t.Fatalf("headers %v: want type and one traceparent", h)
	}
	if got := SpanContext(tel, h); !got.Equal(span.SpanContext().WithRemote(true)) {
		t.Errorf("extracted %v, want %v", got, span.SpanContext())
	}
	if traceHeaders(tel, context.Background()) != nil {
		t.Error("a context without a span yields trace headers")
	}
	// What the writer sends: the record's own headers, the trace context
	// replacing a stale one, and the caller's slice untouched.
	sent := kafkaHeaders(h[:1:1], th)
	if len(sent) != 2 || sent[0].Key != HeaderType || sent[1].Key != HeaderTraceparent || string(sent[1].Value) == "stale" {
		t.Errorf("sent headers %v, want type then a fresh traceparent", sent)
	}
	stale := []Header{{Key: HeaderTraceparent, Value: []byte("stale")}}
	if sent := kafkaHeaders(stale, th); len(sent) != 1 || string(sent[0].Value) == "stale" || string(stale[0].Value) != "stale" {
		t.Errorf("sent %v from %v: want the stale traceparent replaced in the copy only", sent, stale)
	}
}

func TestTypeHeaders(t *testing.T) {
	h := TypeHeaders("batch.sealed", 1)
	if v, _ := HeaderValue(h, HeaderType); string(v) != "batch.sealed" {
		t.Errorf("type header %q, want batch.sealed", v)
	}
	if v, _ := HeaderValue(h, HeaderVersion); string(v) != "1" {
		t.Errorf("v header %q, want 1", v)
	}
	if _, ok := HeaderValue(h, HeaderTraceparent); ok {
		t.Error("type headers carry a traceparent")
	}
}
