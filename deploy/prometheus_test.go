package deploy_test

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// Prometheus loads its configuration and rules with these same packages:
// what passes here, `promtool check config` passes.
func TestPrometheusConfig(t *testing.T) {
	cfg, err := config.LoadFile("prometheus/prometheus.yml", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	for _, rf := range cfg.RuleFiles {
		// Mounted at /etc/prometheus from deploy/prometheus.
		local := filepath.Join("prometheus", strings.TrimPrefix(rf, "/etc/prometheus/"))
		if _, err := os.Stat(local); err != nil {
			t.Errorf("rule file %s is not in deploy/prometheus: %v", rf, err)
		}
	}
	// Every ledger service of the compose file is scraped, on the port its
	// serve --addr listens on.
	want := []string{"ingest:7070", "projector:7070", "projector-2:7070", "pgsink:7070", "gateway:7070"}
	var got []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "rolloutledger" {
			continue
		}
		if sc.MetricsPath != "/metrics" {
			t.Errorf("job rolloutledger scrapes %s, want /metrics", sc.MetricsPath)
		}
		for _, sd := range sc.ServiceDiscoveryConfigs {
			static, ok := sd.(discovery.StaticConfig)
			if !ok {
				t.Errorf("job rolloutledger: %s discovery; the compose stack's targets are static", sd.Name())
				continue
			}
			for _, tg := range static {
				for _, tgt := range tg.Targets {
					addr := string(tgt[model.AddressLabel])
					host, _, err := net.SplitHostPort(addr)
					if err != nil {
						t.Errorf("target %s: %v", addr, err)
					}
					if svc := string(tg.Labels["service"]); svc != host {
						t.Errorf("target %s is labelled service=%q, want %q", addr, svc, host)
					}
					got = append(got, addr)
				}
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("job rolloutledger scrapes %v, want %v", got, want)
	}
}

// Every alert rule is valid (expression, labels, annotation templates), names
// only contract metrics, and says how severe it is and what it means.
func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile("prometheus/alerts.yml", false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.FailNow()
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			for _, err := range checkPromQL(r.Expr) {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a summary and a description", r.Alert)
			}
		}
	}
	// Operators look an alert up in the manual by its name.
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(doc), a) {
			t.Errorf("alert %s is not explained in docs/operations.md", a)
		}
	}
	for _, a := range []string{"RolloutledgerServiceDown", "RolloutledgerIngestUnavailable", "RolloutledgerConsumerLagHigh", "RolloutledgerPgsinkStalled"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("no alert %s", a)
		}
	}
}
