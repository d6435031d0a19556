package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The Prometheus names of the ledger's metrics, exactly as scraped. Labels
// are kept to a few values each: never a run, event or batch id.
const (
	NameIngestRequests    = "rolloutledger_ingest_requests_total"     // {outcome}
	NameIngestEvents      = "rolloutledger_ingest_events_total"       // {type,outcome}
	NameProduceDuration   = "rolloutledger_produce_duration_seconds"  // {topic}
	NameConsumerLag       = "rolloutledger_consumer_lag"              // {consumer,topic,partition}
	NameFactsFolded       = "rolloutledger_facts_folded_total"        // {partition}
	NameSealLatency       = "rolloutledger_seal_latency_seconds"      //
	NameBatchesSealed     = "rolloutledger_batches_sealed_total"      //
	NameBatchTurns        = "rolloutledger_batch_turns_total"         // {staleness,masked}
	NameGroupsDropped     = "rolloutledger_groups_dropped_total"      // {reason}
	NameFindings          = "rolloutledger_findings_total"            // {kind}
	NameDecisionsEmitted  = "rolloutledger_decisions_emitted_total"   // {type}
	NamePGWriteDuration   = "rolloutledger_pg_write_duration_seconds" //
	NamePGRowsWritten     = "rolloutledger_pg_rows_written_total"     // {table}
	ConsumerProjector     = "projector"
	ConsumerPgsink        = "pgsink"
	OutcomeOK             = "ok"
	OutcomeBadRequest     = "bad_request"
	OutcomeTooLarge       = "too_large"
	OutcomeUnsupported    = "unsupported_media"
	OutcomeUnauthorized   = "unauthorized"
	OutcomeForbidden      = "forbidden"
	OutcomeUnavailable    = "unavailable"
	EventOutcomeRejected  = "rejected"
	maxStalenessLabel     = 8 // staleness 8 and above share the label "8+"
	defaultLagPollSeconds = 5
)

// The health checks' and the gateway's metrics. Their labels are the few
// check names and configured upstream URLs; the reasons of failures go to
// the log.
const (
	NameHealthy          = "rolloutledger_healthy"                         // {check}
	NameUpstreamUp       = "rolloutledger_gateway_upstream_up"             // {upstream}
	NameUpstreamFailures = "rolloutledger_gateway_upstream_failures_total" // {upstream,stage}
	CheckKafka           = "kafka"
	CheckProjector       = "projector"
	CheckUpstreams       = "upstreams"
	StageCheck           = "check"
	StageRequest         = "request"
)

// LagPollInterval is how often consumers ask Kafka for the log end, so lag
// keeps growing while a consumer is stuck and reads nothing.
const LagPollInterval = defaultLagPollSeconds * time.Second

// Metrics are the ledger's instruments. Record through the methods, which
// keep label values to the documented sets.
type Metrics struct {
	ingestRequests   metric.Int64Counter
	ingestEvents     metric.Int64Counter
	produceDuration  metric.Float64Histogram
	factsFolded      metric.Int64Counter
	sealLatency      metric.Float64Histogram
	batchesSealed    metric.Int64Counter
	batchTurns       metric.Int64Counter
	groupsDropped    metric.Int64Counter
	findings         metric.Int64Counter
	decisionsEmitted metric.Int64Counter
	pgWriteDuration  metric.Float64Histogram
	pgRowsWritten    metric.Int64Counter
	healthy          metric.Int64Gauge
	upstreamUp       metric.Int64Gauge
	upstreamFailures metric.Int64Counter

	sets sync.Map // cache key -> metric.MeasurementOption
}

// Buckets in seconds: a produce with acks=all takes milliseconds, a seal
// waits for a window, a fold and an emit; a Postgres window may take
// seconds when busy.
var (
	produceBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	sealBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	pgBuckets      = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

func newMetrics(m metric.Meter, lags *lagSet) (*Metrics, error) {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, desc string) metric.Int64Gauge {
		g, err := m.Int64Gauge(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	x := &Metrics{
		ingestRequests:   counter(NameIngestRequests, "Ingest requests by outcome."),
		ingestEvents:     counter(NameIngestEvents, "Events in ingest requests by fact type and outcome."),
		produceDuration:  histogram(NameProduceDuration, "Latency of one Kafka produce (acks=all) per write call.", produceBuckets),
		factsFolded:      counter(NameFactsFolded, "Facts folded by the projector, per facts partition."),
		sealLatency:      histogram(NameSealLatency, "From the Kafka append time of the fact that completed a batch to its batch.sealed decision being acknowledged.", sealBuckets),
		batchesSealed:    counter(NameBatchesSealed, "Batches sealed by the projector."),
		batchTurns:       counter(NameBatchTurns, "Turns placed in sealed batches, by staleness and whether their tokens are masked."),
		groupsDropped:    counter(NameGroupsDropped, "Completed train groups not placed in a batch, by reason."),
		findings:         counter(NameFindings, "audit.finding decisions by kind."),
		decisionsEmitted: counter(NameDecisionsEmitted, "Decisions the projector emitted, by type."),
		pgWriteDuration:  histogram(NamePGWriteDuration, "Duration of one pgsink transaction (rows and offsets).", pgBuckets),
		pgRowsWritten:    counter(NamePGRowsWritten, "Rows the pgsink inserted, by table."),
		healthy:          gauge(NameHealthy, "1 when the last health check passed, 0 when it failed (the reason is in the log), by check."),
		upstreamUp:       gauge(NameUpstreamUp, "1 while the gateway routes to an upstream, 0 while its checks or requests fail (the reason is in the log)."),
		upstreamFailures: counter(NameUpstreamFailures, "Failed health checks (stage check) and requests (stage request) of each gateway upstream."),
	}
	_, err := m.Int64ObservableGauge(NameConsumerLag,
		metric.WithDescription("Records in the log that a consumer has not committed yet, per partition."),
		metric.WithInt64Callback(lags.observe))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("telemetry: instruments: %w", err)
		}
	}
	return x, nil
}

// attrs returns the measurement option of a label set, built once.
func (m *Metrics) attrs(kv ...string) metric.MeasurementOption {
	key := strings.Join(kv, "\x00")
	if o, ok := m.sets.Load(key); ok {
		return o.(metric.MeasurementOption)
	}
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	o := metric.WithAttributeSet(attribute.NewSet(a...))
	m.sets.Store(key, o)
	return o
}

// IngestRequest counts one ingest request by outcome.
func (m *Metrics) IngestRequest(ctx context.Context, outcome string) {
	m.ingestRequests.Add(ctx, 1, m.attrs("outcome", outcome))
}

// IngestEvents counts n events of one fact type by outcome.
func (m *Metrics) IngestEvents(ctx context.Context, factType, outcome string, n int) {
	m.ingestEvents.Add(ctx, int64(n), m.attrs("type", factType, "outcome", outcome))
}

// Produce records one Kafka write call to topic.
func (m *Metrics) Produce(ctx context.Context, topic string, d time.Duration) {
	m.produceDuration.Record(ctx, d.Seconds(), m.attrs("topic", topic))
}

// FactsFolded counts facts the projector folded from a partition.
func (m *Metrics) FactsFolded(ctx context.Context, partition, n int) {
	m.factsFolded.Add(ctx, int64(n), m.attrs("partition", strconv.Itoa(partition)))
}

// BatchSealed counts a sealed batch and records its seal latency (skipped
// when the completing fact has no append time).
func (m *Metrics) BatchSealed(ctx context.Context, latency time.Duration, known bool) {
	m.batchesSealed.Add(ctx, 1)
	if known {
		m.sealLatency.Record(ctx, max(latency, 0).Seconds())
	}
}

// BatchTurns counts n turns of a sealed batch with the given staleness.
func (m *Metrics) BatchTurns(ctx context.Context, staleness int64, masked bool, n int) {
	label := "8+"
	if staleness < maxStalenessLabel {
		// A negative staleness (already an audit finding) counts as 0.
		label = strconv.FormatInt(max(staleness, 0), 10)
	}
	m.batchTurns.Add(ctx, int64(n), m.attrs("staleness", label, "masked", strconv.FormatBool(masked)))
}

// GroupDropped counts a dropped group by reason.
func (m *Metrics) GroupDropped(ctx context.Context, reason string) {
	m.groupsDropped.Add(ctx, 1, m.attrs("reason", reason))
}

// Finding counts an audit.finding by kind.
func (m *Metrics) Finding(ctx context.Context, kind string) {
	m.findings.Add(ctx, 1, m.attrs("kind", kind))
}

// DecisionsEmitted counts n acknowledged decisions of a type.
func (m *Metrics) DecisionsEmitted(ctx context.Context, decisionType string, n int) {
	m.decisionsEmitted.Add(ctx, int64(n), m.attrs("type", decisionType))
}

// PGWrite records one pgsink transaction.
func (m *Metrics) PGWrite(ctx context.Context, d time.Duration) {
	m.pgWriteDuration.Record(ctx, d.Seconds())
}

// PGRows counts rows inserted into a table.
func (m *Metrics) PGRows(ctx context.Context, table string, n int64) {
	m.pgRowsWritten.Add(ctx, n, m.attrs("table", table))
}

// Healthy records the outcome of a health check: kafka, projector or
// upstreams. The reason of a failure goes to the log, never to a label.
func (m *Metrics) Healthy(ctx context.Context, check string, ok bool) {
	v := int64(0)
	if ok {
		v = 1
	}
	m.healthy.Record(ctx, v, m.attrs("check", check))
}

// UpstreamUp records whether the gateway routes to an upstream (its base
// URL, one of the few configured).
func (m *Metrics) UpstreamUp(ctx context.Context, upstream string, up bool) {
	v := int64(0)
	if up {
		v = 1
	}
	m.upstreamUp.Record(ctx, v, m.attrs("upstream", upstream))
}

// UpstreamFailure counts a failed health check or request of an upstream.
func (m *Metrics) UpstreamFailure(ctx context.Context, upstream, stage string) {
	m.upstreamFailures.Add(ctx, 1, m.attrs("upstream", upstream, "stage", stage))
}
