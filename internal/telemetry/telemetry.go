// Package telemetry sets up the ledger's OpenTelemetry tracing and metrics
// from the standard OTEL_* environment variables, and holds the instruments
// every service records into.
//
// # Tracing
//
// Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER
// names otlp, or it is unset and an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off. When off
// the tracer is OpenTelemetry's no-op one and the services skip the work of
// building span attributes and reading trace context from Kafka headers, so
// tracing costs nothing; a W3C traceparent a client sent is still copied
// into the records it produced. When on, spans go to an OTLP exporter
// (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the default, or grpc) which
// reads its endpoint, headers and timeouts from the environment, behind a
// batch span processor (OTEL_BSP_*), sampled per OTEL_TRACES_SAMPLER.
//
// # Metrics
//
// Metrics are always recorded (unless OTEL_SDK_DISABLED=true) and served
// for Prometheus by [Telemetry.MetricsHandler], with the Go runtime and
// process collectors, under the exact names of [Metrics]: no unit or _total
// suffixes are added and no scope labels.
//
// # Resource
//
// service.name is OTEL_SERVICE_NAME, else Config.ServiceName;
// OTEL_RESOURCE_ATTRIBUTES adds attributes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the ledger's spans and metrics.
const ScopeName = "github.com/rolloutledger/rolloutledger"

// DefaultServiceName is service.name when neither OTEL_SERVICE_NAME nor
// Config.ServiceName says otherwise.
const DefaultServiceName = "rolloutledger"

// Config says how to build a [Telemetry]. Its zero value reads the process
// environment.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME is set; default
	// [DefaultServiceName].
	ServiceName string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// SpanExporter, when set, turns tracing on whatever the environment
	// says and exports every ended span to it synchronously: for tests,
	// with the SDK's in-memory exporter.
	SpanExporter sdktrace.SpanExporter
}

// Telemetry is a process's tracer and meter providers, the Prometheus
// registry its metrics are served from, and the ledger's instruments.
type Telemetry struct {
	tracing    bool
	tp         trace.TracerProvider
	sdkTP      *sdktrace.TracerProvider
	mp         *sdkmetric.MeterProvider
	propagator propagation.TextMapPropagator
	registry   *prometheus.Registry
	tracer     trace.Tracer

	// Metrics are the ledger's instruments.
	Metrics *Metrics
	lags    *lagSet
}

// New builds the providers the environment asks for.
func New(ctx context.Context, c Config) (*Telemetry, error) {
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	name := c.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	disabled := strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
	tracing, err := tracingWanted(getenv)
	if err != nil {
		return nil, err
	}
	tracing = (tracing && !disabled) || c.SpanExporter != nil

	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	t := &Telemetry{
		tracing:    tracing,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		registry:   prometheus.NewRegistry(),
		tp:         tracenoop.NewTracerProvider(),
	}
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if tracing {
		exp := c.SpanExporter
		opt := sdktrace.WithSyncer(exp)
		if exp == nil {
			if exp, err = otlpExporter(ctx, getenv); err != nil {
				return nil, err
			}
			opt = sdktrace.WithBatcher(exp)
		}
		t.sdkTP = sdktrace.NewTracerProvider(opt, sdktrace.WithResource(res))
		t.tp = t.sdkTP
	}
	t.tracer = t.tp.Tracer(ScopeName)

	var meter metric.Meter = metricnoop.NewMeterProvider().Meter(ScopeName)
	if !disabled {
		exp, err := otelprom.New(
			otelprom.WithRegisterer(t.registry),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
			otelprom.WithoutScopeInfo(),
			otelprom.WithoutTargetInfo(),
		)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("telemetry: prometheus exporter: %w", err), t.shutdownTraces(ctx))
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
		meter = t.mp.Meter(ScopeName)
	}
	t.lags = newLagSet()
	if t.Metrics, err = newMetrics(meter, t.lags); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	return t, nil
}

var nop = func() *Telemetry {
	meter := metricnoop.NewMeterProvider().Meter(ScopeName)
	lags := newLagSet()
	m, err := newMetrics(meter, lags)
	if err != nil {
		panic(err)
	}
	tp := tracenoop.NewTracerProvider()
	return &Telemetry{
		tp: tp, tracer: tp.Tracer(ScopeName), Metrics: m, lags: lags,
		propagator: propagation.TraceContext{},
		registry:   prometheus.NewRegistry(),
	}
}()

// Nop is telemetry that records nothing: no spans, no metrics. Services
// given no Telemetry use it.
func Nop() *Telemetry { return nop }

// OrNop returns t, or [Nop] when t is nil.
func OrNop(t *Telemetry) *Telemetry {
	if t == nil {
		return nop
	}
	return t
}

// tracingWanted reads whether the environment asks for traces.
func tracingWanted(getenv func(string) string) (bool, error) {
	v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	}
	on := false
	for e := range strings.SplitSeq(v, ",") {
		switch strings.TrimSpace(e) {
		case "otlp":
			on = true
		case "none", "":
		default:
			return false, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER %q: want otlp or none", v)
		}
	}
	return on, nil
}

// otlpExporter builds the OTLP span exporter of the configured protocol;
// it reads its endpoint, headers, TLS and timeouts from the environment.
func otlpExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("telemetry: OTLP protocol %q: want http/protobuf or grpc", proto)
}

// Tracing reports whether spans are recorded. Services skip span-only work
// (attributes, reading trace context from Kafka headers) when it is false.
func (t *Telemetry) Tracing() bool { return t.tracing }

// Tracer is the ledger's tracer; a no-op one when tracing is off.
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// TracerProvider is the provider behind [Telemetry.Tracer].
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// Propagator carries trace context in HTTP and Kafka headers (W3C
// traceparent, tracestate and baggage).
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// MetricsHandler serves the metrics for Prometheus (GET /metrics).
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes the spans not exported yet and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nop {
		return nil
	}
	err := t.shutdownTraces(ctx)
	if t.mp != nil {
		err = errors.Join(err, t.mp.Shutdown(ctx))
	}
	return err
}

func (t *Telemetry) shutdownTraces(ctx context.Context) error {
	if t.sdkTP == nil {
		return nil
	}
	return t.sdkTP.Shutdown(ctx)
}
