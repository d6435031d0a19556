package stack_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// scrape reads GET /metrics of a process as Prometheus would.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// sum adds the values (counter, gauge, or histogram sample count) of the
// series of a family whose labels include want.
func sum(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var total float64
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// series lists the values of one label across a family's series.
func series(mfs map[string]*dto.MetricFamily, name, label string, want map[string]string) []string {
	var out []string
	for _, m := range mfs[name].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}

var contract = []string{
	telemetry.NameIngestRequests, telemetry.NameIngestEvents, telemetry.NameProduceDuration, telemetry.NameConsumerLag,
	telemetry.NameFactsFolded, telemetry.NameSealLatency, telemetry.NameBatchesSealed, telemetry.NameBatchTurns,
	telemetry.NameGroupsDropped, telemetry.NameFindings, telemetry.NameDecisionsEmitted, telemetry.NamePGWriteDuration,
	telemetry.NamePGRowsWritten, telemetry.NameHealthy, telemetry.NameUpstreamUp, telemetry.NameUpstreamFailures,
}

// checkNames fails on a rolloutledger_ metric outside the contract, a
// scope label, or missing runtime collectors.
func checkNames(t *testing.T, who string, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	for name, mf := range mfs {
		if strings.HasPrefix(name, "rolloutledger_") && !slices.Contains(contract, name) {
			t.Errorf("%s: metric %s is not in the contract", who, name)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_") {
					t.Errorf("%s: %s has label %s", who, name, l.GetName())
				}
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if mfs[name] == nil {
			t.Errorf("%s: no %s", who, name)
		}
	}
}

// Each service run as its own process (serve --only ...) serves /metrics
// and /healthz, and its metrics move while a simulated run goes through.
func TestMetricsMoveDuringARun(t *testing.T) {
	kc := testenv.RealKafka(t)
	db := testenv.Postgres(t)
	schema := testenv.Schema(t, db)
	start := func(only ...string) *stack.Stack {
		s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
			DatabaseURL: db, PostgresSchema: schema, Only: only})
		if err != nil {
			t.Fatalf("start %v: %v", only, err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s
	}
	ing := start(stack.ServiceIngest)
	proj := start(stack.ServiceProjector)
	sink := start(stack.ServicePgsink)
	for _, s := range []*stack.Stack{ing, proj, sink} {
		if code, b := get(t, s.URL()+"/healthz"); code != 200 {
			t.Fatalf("healthz: %d %s", code, b)
		}
	}
	before := scrape(t, ing.URL())
	facts := kc.FactsTopic()

	res, err := simulate.Run(context.Background(), simulate.Options{URL: ing.URL(), Run: "metrics-run", Seed: 3, Tasks: 24, Steps: 2, BatchGroups: 4, MaxTurns: 40})
	if err != nil {
		t.Fatal(err)
	}
	// One refused request.
	if code, _ := post(t, ing.URL(), []byte(`[{"type":"turn.generated"}]`), nil); code != 400 {
		t.Fatalf("bad request answered %d", code)
	}

	// Ingest.
	after := scrape(t, ing.URL())
	checkNames(t, "ingest", after)
	ok := map[string]string{"outcome": "ok"}
	if got := sum(after, telemetry.NameIngestRequests, ok) - sum(before, telemetry.NameIngestRequests, ok); got < float64(res.Requests) {
		t.Errorf("ingest requests ok grew by %v, want >= %d", got, res.Requests)
	}
	if got := sum(after, telemetry.NameIngestRequests, map[string]string{"outcome": "bad_request"}); got != 1 {
		t.Errorf("ingest requests bad_request = %v, want 1", got)
	}
	if got := sum(after, telemetry.NameIngestEvents, ok); got != float64(res.Events) {
		t.Errorf("ingest events ok = %v, want %d", got, res.Events)
	}
	if got := sum(after, telemetry.NameIngestEvents, map[string]string{"outcome": "ok", "type": "turn.generated"}); got != float64(res.ByType["turn.generated"]) {
		t.Errorf("ingest events turn.generated = %v, want %d", got, res.ByType["turn.generated"])
	}
	if got := sum(after, telemetry.NameIngestEvents, map[string]string{"outcome": "rejected", "type": "turn.generated"}); got != 1 {
		t.Errorf("ingest events rejected turn.generated = %v, want 1", got)
	}
	if got := sum(after, telemetry.NameProduceDuration, map[string]string{"topic": facts}); got < float64(res.Requests) {
		t.Errorf("produce duration samples = %v, want >= %d", got, res.Requests)
	}

	// Projector: everything folded, lag back to zero on every partition.
	var pm map[string]*dto.MetricFamily
	testenv.CheckFor(t, 60*time.Second, "projector did not fold every fact", func() bool {
		pm = scrape(t, proj.URL())
		return sum(pm, telemetry.NameFactsFolded, nil) >= float64(res.Events)
	})
	checkNames(t, "projector", pm)
	if got := series(pm, telemetry.NameFactsFolded, "partition", nil); len(got) == 0 {
		t.Error("no facts folded series per partition")
	}
	lagOf := map[string]string{"consumer": "projector", "topic": facts}
	testenv.CheckFor(t, 30*time.Second, "projector lag did not return to 0", func() bool {
		pm = scrape(t, proj.URL())
		return len(series(pm, telemetry.NameConsumerLag, "partition", lagOf)) == 4 && sum(pm, telemetry.NameConsumerLag, lagOf) == 0
	})
	sealed := sum(pm, telemetry.NameBatchesSealed, nil)
	if sealed < 2 {
		t.Errorf("batches sealed = %v, want >= 2", sealed)
	}
	if got := sum(pm, telemetry.NameSealLatency, nil); got != sealed {
		t.Errorf("seal latency samples = %v, want one per sealed batch (%v)", got, sealed)
	}
	if got := sum(pm, telemetry.NameDecisionsEmitted, map[string]string{"type": "batch.sealed"}); got != sealed {
		t.Errorf("batch.sealed decisions emitted = %v, want %v", got, sealed)
	}
	if got := sum(pm, telemetry.NameBatchTurns, nil); got == 0 {
		t.Error("no turns counted in sealed batches")
	}
	for _, st := range series(pm, telemetry.NameBatchTurns, "staleness", nil) {
		if !slices.Contains([]string{"0", "1", "2", "3", "4", "5", "6", "7", "8+"}, st) {
			t.Errorf("staleness label %q", st)
		}
	}
	if got := sum(pm, telemetry.NameProduceDuration, map[string]string{"topic": kc.DecisionsTopic()}); got == 0 {
		t.Error("no decision produce latency recorded")
	}

	// Pgsink: both topics' partitions stored, rows counted.
	var sm map[string]*dto.MetricFamily
	testenv.CheckFor(t, 60*time.Second, "pgsink lag did not return to 0", func() bool {
		sm = scrape(t, sink.URL())
		lag := map[string]string{"consumer": "pgsink"}
		return len(series(sm, telemetry.NameConsumerLag, "partition", lag)) == 8 &&
			sum(sm, telemetry.NameConsumerLag, lag) == 0 &&
			sum(sm, telemetry.NamePGRowsWritten, map[string]string{"table": "batches"}) >= sealed &&
			// Lag is measured against log ends polled every few seconds,
			// so it can read 0 before the sink has seen the facts; the
			// rows say when it has.
			sum(sm, telemetry.NamePGRowsWritten, map[string]string{"table": "turns"}) >= float64(res.ByType["turn.generated"])
	})
	checkNames(t, "pgsink", sm)
	if got := sum(sm, telemetry.NamePGWriteDuration, nil); got == 0 {
		t.Error("no pgsink transactions timed")
	}
	if got := sum(sm, telemetry.NamePGRowsWritten, map[string]string{"table": "turns"}); got != float64(res.ByType["turn.generated"]) {
		t.Errorf("turn rows written = %v, want %d", got, res.ByType["turn.generated"])
	}
}
