package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

func traced(t *testing.T) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: tracetest.NewInMemoryExporter(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

// A log record made in a span's context names the span; one made outside
// any span does not.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	ctx, span := traced(t).Tracer().Start(context.Background(), "op")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")
	dec := json.NewDecoder(&buf)
	var in, out map[string]any
	if err := dec.Decode(&in); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	if in["trace_id"] != sc.TraceID().String() || in["span_id"] != sc.SpanID().String() || in["component"] != "x" {
		t.Errorf("inside a span: got %v, want trace_id %s span_id %s", in, sc.TraceID(), sc.SpanID())
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("outside a span: got %v, want no trace_id", out)
	}
}

// Links keep distinct contexts only, up to the bound, and count the rest.
func TestLinksBounded(t *testing.T) {
	tel := traced(t)
	l := telemetry.NewLinks(3)
	var first trace.SpanContext
	for i := range 5 {
		_, sp := tel.Tracer().Start(context.Background(), "r")
		if i == 0 {
			first = sp.SpanContext()
		}
		l.Add(sp.SpanContext())
		l.Add(sp.SpanContext())
		sp.End()
	}
	l.Add(trace.SpanContext{})
	if len(l.Links()) != 3 || l.Dropped != 2 || !l.Links()[0].SpanContext.Equal(first) {
		t.Errorf("got %d links (%d dropped), want 3 (2 dropped), first kept", len(l.Links()), l.Dropped)
	}
}
