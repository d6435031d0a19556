package kafkalog

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// headerCarrier adapts record headers to a W3C trace-context carrier for
// telemetry's propagator. Set replaces a header of the same key, so a
// record never carries two traceparents.
type headerCarrier struct{ h *[]Header }

func (c headerCarrier) Get(key string) string {
	v, _ := HeaderValue(*c.h, key)
	return string(v)
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.h {
		if h.Key == key {
			(*c.h)[i].Value = []byte(value)
			return
		}
	}
	*c.h = append(*c.h, Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	out := make([]string, len(*c.h))
	for i, h := range *c.h {
		out[i] = h.Key
	}
	return out
}

// traceHeaders are the headers that carry ctx's trace context, computed
// once for all the records of one append; nil when ctx has none.
func traceHeaders(tel *telemetry.Telemetry, ctx context.Context) []Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	var h []Header
	tel.Propagator().Inject(ctx, headerCarrier{&h})
	return h
}

// SpanContext is the span context a record's headers carry (the one its
// append ran in); invalid when they carry none.
func SpanContext(tel *telemetry.Telemetry, headers []Header) trace.SpanContext {
	return trace.SpanContextFromContext(tel.Propagator().Extract(context.Background(), headerCarrier{&headers}))
}
