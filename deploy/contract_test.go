package deploy_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// metric is one series family the ledger's services expose at GET /metrics.
type metric struct {
	kind   string              // counter, gauge or histogram
	labels map[string][]string // label name -> allowed values (nil: any)
}

// contract lists the exposition names the services serve (the metric names
// shared by the instrumentation and these dashboards and alerts).
var contract = map[string]metric{
	"rolloutledger_ingest_requests_total": {"counter", map[string][]string{
		"outcome": {"ok", "bad_request", "too_large", "unsupported_media", "unauthorized", "forbidden", "unavailable"}}},
	"rolloutledger_ingest_events_total": {"counter", map[string][]string{
		"type": nil, "outcome": {"ok", "rejected", "unavailable"}}},
	"rolloutledger_produce_duration_seconds": {"histogram", map[string][]string{"topic": nil}},
	"rolloutledger_consumer_lag": {"gauge", map[string][]string{
		"consumer": {"projector", "pgsink"}, "topic": nil, "partition": nil}},
	"rolloutledger_facts_folded_total":   {"counter", map[string][]string{"partition": nil}},
	"rolloutledger_seal_latency_seconds": {"histogram", nil},
	"rolloutledger_batches_sealed_total": {"counter", nil},
	"rolloutledger_batch_turns_total": {"counter", map[string][]string{
		"staleness": {"0", "1", "2", "3", "4", "5", "6", "7", "8+"}, "masked": {"true", "false"}}},
	"rolloutledger_groups_dropped_total":      {"counter", map[string][]string{"reason": nil}},
	"rolloutledger_findings_total":            {"counter", map[string][]string{"kind": nil}},
	"rolloutledger_decisions_emitted_total":   {"counter", map[string][]string{"type": nil}},
	"rolloutledger_pg_write_duration_seconds": {"histogram", nil},
	"rolloutledger_pg_rows_written_total":     {"counter", map[string][]string{"table": nil}},
}

// targetLabels are attached by Prometheus to every scraped series
// (deploy/prometheus/prometheus.yml).
var targetLabels = []string{"job", "instance", "service"}

// runtimeMetrics are the Go runtime and process collectors' families that
// queries may use, and Prometheus' own `up`.
var runtimeMetrics = regexp.MustCompile(`^(go|process)_[a-z_]+$|^up$`)

// grafanaVars replaces Grafana's interval variables with durations so that
// a panel's expression parses as Prometheus will receive it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "${__rate_interval}", "1m",
	"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

var promql = parser.NewParser(parser.Options{})

// checkPromQL parses expr and checks that every series it selects is in the
// contract (or a runtime collector's), with labels the series carries and
// label values it can take, and that it groups only by labels some selected
// series has. It returns every problem.
func checkPromQL(expr string) []error {
	e, err := promql.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return []error{fmt.Errorf("%q does not parse: %w", expr, err)}
	}
	var errs []error
	have := slices.Clone(targetLabels)
	var groupings [][]string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			l, err := checkSelector(n)
			errs = append(errs, err...)
			have = append(have, l...)
		case *parser.AggregateExpr:
			groupings = append(groupings, n.Grouping)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				groupings = append(groupings, n.VectorMatching.MatchingLabels)
			}
		}
		return nil
	})
	for _, g := range groupings {
		for _, l := range g {
			if !slices.Contains(have, l) {
				errs = append(errs, fmt.Errorf("%q groups by %q, a label none of its series has", expr, l))
			}
		}
	}
	return errs
}

// checkSelector checks one selector and returns the labels its series have.
func checkSelector(v *parser.VectorSelector) ([]string, []error) {
	name := v.Name
	for _, m := range v.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	var m metric
	var known []string
	switch {
	case runtimeMetrics.MatchString(name):
		return targetLabels, nil
	default:
		base, suffix := name, ""
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, s); ok && contract[b].kind == "histogram" {
				base, suffix = b, s
			}
		}
		var ok bool
		if m, ok = contract[base]; !ok {
			return nil, []error{fmt.Errorf("%s is not a metric the services expose", name)}
		}
		if m.kind == "histogram" && suffix == "" {
			return nil, []error{fmt.Errorf("%s is a histogram: select its _bucket, _sum or _count series", name)}
		}
		for l := range m.labels {
			known = append(known, l)
		}
		if suffix == "_bucket" {
			known = append(known, "le")
		}
	}
	known = append(known, targetLabels...)
	var errs []error
	for _, lm := range v.LabelMatchers {
		if lm.Name == labels.MetricName {
			continue
		}
		if !slices.Contains(known, lm.Name) {
			errs = append(errs, fmt.Errorf("%s has no label %q", name, lm.Name))
			continue
		}
		allowed := m.labels[lm.Name]
		if allowed == nil || lm.Type == labels.MatchNotEqual || lm.Type == labels.MatchNotRegexp {
			continue
		}
		values := []string{lm.Value}
		if lm.Type == labels.MatchRegexp {
			values = strings.Split(lm.Value, "|")
		}
		for _, val := range values {
			if !slices.Contains(allowed, val) {
				errs = append(errs, fmt.Errorf("%s{%s} never takes the value %q (want one of %v)", name, lm.Name, val, allowed))
			}
		}
	}
	return known, errs
}
