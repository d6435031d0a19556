package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// discard is a span exporter that drops what it is given: the cost of
// recording spans without the cost of shipping them.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkIngestTracing measures POST /v1/events (8 events, acknowledged
// by Kafka) with tracing off (the default) and on (every span recorded,
// exported to a discarding exporter), against each Kafka backend.
//
//	go test -run='^$' -bench=IngestTracing -benchmem ./services/stack/
func BenchmarkIngestTracing(b *testing.B) {
	for _, be := range testenv.KafkaBackends() {
		for _, on := range []bool{false, true} {
			name := "off"
			if on {
				name = "on"
			}
			b.Run(be.Name+"/tracing-"+name, func(b *testing.B) { benchIngest(b, be.Kafka(b), on) })
		}
	}
}

func benchIngest(b *testing.B, kc kafkalog.Config, tracing bool) {
	cfg := telemetry.Config{Getenv: func(string) string { return "" }}
	if tracing {
		cfg.SpanExporter = discard{}
	}
	tel, err := telemetry.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest}, Telemetry: tel})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	client := &http.Client{}
	bodies := make([][]byte, 64)
	for i := range bodies {
		evs := runEvents(fmt.Sprintf("bench-%d", i), 8)
		vals, err := events.EncodeBatch(evs)
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = append(append([]byte("["), bytes.Join(vals, []byte(","))...), ']')
	}
	i := 0
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/events", bytes.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		i++
	}
}
