package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Links collects distinct span contexts as span links, up to a bound: a
// window of thousands of records links to the requests that wrote them
// without making a span of unbounded size.
type Links struct {
	max   int
	seen  map[[24]byte]struct{}
	links []trace.Link
	// Dropped counts distinct contexts left out by the bound.
	Dropped int
}

// MaxLinks bounds the links of one span.
const MaxLinks = 64

// NewLinks returns an empty collection bounded at max links.
func NewLinks(max int) *Links { return &Links{max: max, seen: map[[24]byte]struct{}{}} }

// Add adds sc unless it is invalid or already present.
func (l *Links) Add(sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	var k [24]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(k[:16], tid[:])
	copy(k[16:], sid[:])
	if _, ok := l.seen[k]; ok {
		return
	}
	l.seen[k] = struct{}{}
	if len(l.links) >= l.max {
		l.Dropped++
		return
	}
	l.links = append(l.links, trace.Link{SpanContext: sc})
}

// Links returns the collected links.
func (l *Links) Links() []trace.Link { return l.links }

// HTTPHandler wraps a server's handler: with tracing on, every request
// but the scrapes of /metrics and /healthz gets a server span following
// the HTTP semantic conventions (otelhttp), continuing a trace the client
// sent; with tracing off, only the client's trace context is read, so that
// a traceparent it sent still reaches the Kafka records it caused.
func (t *Telemetry) HTTPHandler(h http.Handler) http.Handler {
	if !t.tracing {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			h.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.propagator),
		// The ledger's own metrics cover its requests.
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz"
		}),
	)
}
