package stack_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// spans indexes exported spans by their span id.
type spans map[trace.SpanID]tracetest.SpanStub

func indexSpans(ss tracetest.SpanStubs) spans {
	out := spans{}
	for _, s := range ss {
		out[s.SpanContext.SpanID()] = s
	}
	return out
}

// ancestor reports whether a is s or one of its ancestors.
func (x spans) ancestor(a, s tracetest.SpanStub) bool {
	for {
		if s.SpanContext.Equal(a.SpanContext) {
			return true
		}
		p, ok := x[s.Parent.SpanID()]
		if !s.Parent.IsValid() || !ok || p.SpanContext.TraceID() != s.Parent.TraceID() {
			return false
		}
		s = p
	}
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// recordHeaders reads the headers of the record at partition/offset.
func recordHeaders(t *testing.T, kc kafkalog.Config, topic string, partition int, offset int64) map[string]string {
	t.Helper()
	h := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := kafkalog.ReadPartition(ctx, kc, topic, partition, offset, offset+1, func(m kafkalog.Message) error {
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// A fact's trace crosses Kafka: the ingest request's server span is the
// parent of the produce span, whose context the fact's record carries; the
// projector's span sealing the batch that fact completed links to it; the
// pgsink's write spans link to the produce spans of what they stored.
func TestTracePropagatesAcrossKafka(t *testing.T) {
	kc := testenv.RealKafka(t)
	db := testenv.Postgres(t)
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	schema := testenv.Schema(t, db)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
		DatabaseURL: db, PostgresSchema: schema, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		_ = tel.Shutdown(context.Background())
	})

	// A client's trace is continued: the record carries the client's
	// trace id with the produce span's id.
	const clientTrace = "4bf92f3577b34ca3a2b9e0d0f2b1c3d4"
	code, out := post(t, s.URL(), body(t, runEvents("traced-run", 2)), http.Header{"Traceparent": {"00-" + clientTrace + "-00f067aa0ba902b7-01"}})
	if code != http.StatusOK {
		t.Fatalf("POST: got %d %s", code, out)
	}
	rec := readFacts(t, kc, 2)[0]
	if tp := rec.headers["traceparent"]; !strings.HasPrefix(tp, "00-"+clientTrace+"-") || strings.Contains(tp, "00f067aa0ba902b7") {
		t.Errorf("record traceparent %q: want the client's trace %s with the produce span's id", tp, clientTrace)
	}

	const run = "traced-sim"
	res, err := simulate.Run(context.Background(), simulate.Options{URL: s.URL(), Run: run, Seed: 5, Tasks: 24, Steps: 2, BatchGroups: 4, MaxTurns: 40, Trainer: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 2 {
		t.Fatalf("trainer took %d steps, want 2", len(res.Steps))
	}
	sealName, sendFacts := "seal batch", "send "+kc.FactsTopic()
	var seal tracetest.SpanStub
	testenv.CheckFor(t, 30*time.Second, "no seal span for batch 1 exported", func() bool {
		for _, sp := range exp.GetSpans() {
			if v, ok := attr(sp, "rolloutledger.batch.seq"); ok && sp.Name == sealName && v.AsInt64() == 1 {
				if r, _ := attr(sp, "rolloutledger.run"); r.AsString() == run {
					seal = sp
					return true
				}
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Sink().WaitStored(ctx, mustEnds(t, kc)); err != nil {
		t.Fatal(err)
	}
	all := indexSpans(exp.GetSpans())

	// The seal links first to the fact that completed the batch; that
	// fact's record carries the produce span's context.
	if len(seal.Links) == 0 {
		t.Fatal("seal span has no links")
	}
	fact := seal.Links[0].SpanContext
	produce, ok := all[fact.SpanID()]
	if !ok || produce.Name != sendFacts || produce.SpanKind != trace.SpanKindProducer {
		t.Fatalf("seal links to %v, which is not an exported %q producer span (got %q)", fact, sendFacts, produce.Name)
	}
	if v, _ := attr(produce, "messaging.system"); v.AsString() != "kafka" {
		t.Errorf("produce span messaging.system = %q, want kafka", v.AsString())
	}
	part, _ := attr(seal, "rolloutledger.fact.partition")
	off, _ := attr(seal, "rolloutledger.fact.offset")
	h := recordHeaders(t, kc, kc.FactsTopic(), int(part.AsInt64()), off.AsInt64())
	if h["traceparent"] != traceparent(fact) {
		t.Errorf("completing fact's record traceparent %q, want the produce span's %q", h["traceparent"], traceparent(fact))
	}
	// The produce span descends from the ingest request's server span.
	var server tracetest.SpanStub
	for _, sp := range all {
		if sp.SpanKind == trace.SpanKindServer && all.ancestor(sp, produce) {
			server = sp
		}
	}
	if server.Name != "POST /v1/events" {
		t.Fatalf("no POST /v1/events server span is an ancestor of the produce span (found %q)", server.Name)
	}
	if v, _ := attr(server, "http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("server span status code %d, want 200", v.AsInt64())
	}
	// The seal is part of the window's consumer span, which also sent the
	// decisions.
	process, ok := all[seal.Parent.SpanID()]
	if !ok || process.SpanKind != trace.SpanKindConsumer || process.Name != "process "+kc.FactsTopic() {
		t.Fatalf("seal span's parent is %q (%v), want the consumer span process %s", process.Name, process.SpanKind, kc.FactsTopic())
	}
	sentDecisions := false
	for _, sp := range all {
		if sp.Name == "send "+kc.DecisionsTopic() && sp.Parent.SpanID() == process.SpanContext.SpanID() {
			sentDecisions = true
		}
	}
	if !sentDecisions {
		t.Error("the window that sealed the batch has no child span sending the decisions")
	}

	// pgsink transactions follow the database conventions and link to
	// the produce spans of the records they stored.
	writes, linked := 0, 0
	for _, sp := range all {
		if sp.Name != "BATCH INSERT "+schema {
			continue
		}
		writes++
		if v, _ := attr(sp, "db.system.name"); v.AsString() != "postgresql" || sp.SpanKind != trace.SpanKindClient {
			t.Errorf("pgsink span: db.system.name %q kind %v", v.AsString(), sp.SpanKind)
		}
		for _, l := range sp.Links {
			p, ok := all[l.SpanContext.SpanID()]
			if !ok || !strings.HasPrefix(p.Name, "send ") {
				t.Errorf("pgsink span links to %v, not a produce span", l.SpanContext)
			}
			linked++
		}
	}
	if writes == 0 || linked == 0 {
		t.Errorf("got %d pgsink write spans with %d links, want some of each", writes, linked)
	}
}

func mustEnds(t *testing.T, kc kafkalog.Config) map[pgsink.TopicPartition]int64 {
	t.Helper()
	ends, err := pgsink.EndOffsets(context.Background(), kc)
	if err != nil {
		t.Fatal(err)
	}
	return ends
}

// With tracing off, nothing is recorded and a request without trace
// context leaves its records without one.
func TestTracingOff(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
	} {
		tel, err := telemetry.New(context.Background(), telemetry.Config{Getenv: func(k string) string { return env[k] }})
		if err != nil {
			t.Fatal(err)
		}
		_, sp := tel.Tracer().Start(context.Background(), "x")
		if tel.Tracing() || sp.IsRecording() || sp.SpanContext().IsValid() {
			t.Errorf("env %v: tracing %v, span recording %v valid %v; want all off", env, tel.Tracing(), sp.IsRecording(), sp.SpanContext().IsValid())
		}
	}
	on, err := telemetry.New(context.Background(), telemetry.Config{Getenv: func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !on.Tracing() {
		t.Error("an OTLP endpoint alone should turn tracing on")
	}
	_ = on.Shutdown(context.Background())
	if _, err := telemetry.New(context.Background(), telemetry.Config{Getenv: func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}[k]
	}}); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("unsupported exporter: got %v, want an error naming OTEL_TRACES_EXPORTER", err)
	}

	kc, _ := testenv.EmbeddedKafka(t, "")
	s := startStack(t, kc)
	if code, out := post(t, s.URL(), body(t, runEvents("untraced", 3)), nil); code != 200 {
		t.Fatalf("POST: %d %s", code, out)
	}
	for _, r := range readFacts(t, kc, 3) {
		if tp, ok := r.headers["traceparent"]; ok {
			t.Errorf("record %d/%d carries traceparent %q with tracing off and none sent", r.partition, r.offset, tp)
		}
	}
}
