package deploy_test

import (
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// collectorConfig is the part of the OpenTelemetry Collector's
// configuration the stack relies on.
type collectorConfig struct {
	Extensions map[string]any `yaml:"extensions"`
	Receivers  map[string]struct {
		Protocols map[string]struct {
			Endpoint string `yaml:"endpoint"`
		} `yaml:"protocols"`
	} `yaml:"receivers"`
	Processors map[string]any `yaml:"processors"`
	Exporters  map[string]struct {
		Endpoint string `yaml:"endpoint"`
	} `yaml:"exporters"`
	Service struct {
		Extensions []string `yaml:"extensions"`
		Pipelines  map[string]struct {
			Receivers  []string `yaml:"receivers"`
			Processors []string `yaml:"processors"`
			Exporters  []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
}

// composeServices reads the service names and environments of
// docker-compose.yml (the anchors resolved by the YAML decoder).
func composeServices(t *testing.T) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for name, s := range c.Services {
		out[name] = s.Environment
	}
	return out
}

// The collector's pipeline is complete (every component it names is
// configured, the memory limiter comes first), it forwards traces to a
// service of the stack, and the ledger's services export to the port it
// receives on.
func TestCollectorConfig(t *testing.T) {
	raw, err := os.ReadFile("otel-collector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c collectorConfig
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("otel-collector.yaml: %v", err)
	}
	traces, ok := c.Service.Pipelines["traces"]
	if !ok {
		t.Fatal("no traces pipeline")
	}
	for p, pl := range c.Service.Pipelines {
		for _, r := range pl.Receivers {
			if _, ok := c.Receivers[r]; !ok {
				t.Errorf("pipeline %s: receiver %s is not configured", p, r)
			}
		}
		for _, x := range pl.Processors {
			if _, ok := c.Processors[x]; !ok {
				t.Errorf("pipeline %s: processor %s is not configured", p, x)
			}
		}
		if len(pl.Processors) > 0 && pl.Processors[0] != "memory_limiter" {
			t.Errorf("pipeline %s: processors %v; the memory limiter must come first", p, pl.Processors)
		}
		for _, e := range pl.Exporters {
			if _, ok := c.Exporters[e]; !ok {
				t.Errorf("pipeline %s: exporter %s is not configured", p, e)
			}
		}
	}
	for _, e := range c.Service.Extensions {
		if _, ok := c.Extensions[e]; !ok {
			t.Errorf("extension %s is not configured", e)
		}
	}
	services := composeServices(t)
	for _, e := range traces.Exporters {
		host, _, err := net.SplitHostPort(c.Exporters[e].Endpoint)
		if err != nil {
			t.Errorf("exporter %s: endpoint %q: %v", e, c.Exporters[e].Endpoint, err)
		} else if _, ok := services[host]; !ok {
			t.Errorf("exporter %s sends to %s, which is no service of the stack", e, host)
		}
	}
	var ports []string
	for _, r := range c.Receivers {
		for _, p := range r.Protocols {
			_, port, _ := net.SplitHostPort(p.Endpoint)
			ports = append(ports, port)
		}
	}
	for _, name := range []string{"ingest", "projector", "pgsink"} {
		ep := services[name]["OTEL_EXPORTER_OTLP_ENDPOINT"]
		u, err := url.Parse(ep)
		if err != nil || u.Hostname() != "otel-collector" || !slices.Contains(ports, u.Port()) {
			t.Errorf("service %s exports traces to %q; want the collector on one of its receiver ports %v", name, ep, ports)
		}
	}
}

// Grafana logs in to Postgres as the role the first-start script creates,
// and finds the dashboards where the compose file mounts them.
func TestGrafanaProvisioning(t *testing.T) {
	raw, err := os.ReadFile("grafana/provisioning/datasources/datasources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Datasources []struct {
			UID      string            `yaml:"uid"`
			User     string            `yaml:"user"`
			JSONData map[string]any    `yaml:"jsonData"`
			Secure   map[string]string `yaml:"secureJsonData"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	initdb, err := os.ReadFile("postgres/initdb/10-grafana-reader.sh")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range f.Datasources {
		if d.UID != "ledger-postgres" {
			continue
		}
		found = true
		if !strings.Contains(string(initdb), "CREATE ROLE "+d.User+" LOGIN") || !strings.Contains(string(initdb), "IN ROLE rolloutledger_reader") {
			t.Errorf("the Postgres data source logs in as %q, which the first-start script does not create as a reader", d.User)
		}
		if d.Secure["password"] != "${GRAFANA_DB_PASSWORD}" {
			t.Errorf("the Postgres password is %q; want it from $GRAFANA_DB_PASSWORD", d.Secure["password"])
		}
		if d.JSONData["database"] != "rolloutledger" {
			t.Errorf("the Postgres data source reads database %v", d.JSONData["database"])
		}
	}
	if !found {
		t.Error("no Postgres data source with uid ledger-postgres")
	}
	if env := composeServices(t)["grafana"]; env["GRAFANA_DB_PASSWORD"] == "" {
		t.Error("the grafana container gets no GRAFANA_DB_PASSWORD")
	}
	prov, err := os.ReadFile("grafana/provisioning/dashboards/dashboards.yaml")
	if err != nil {
		t.Fatal(err)
	}
	compose, _ := os.ReadFile("../docker-compose.yml")
	if !strings.Contains(string(prov), "path: /etc/grafana/dashboards") ||
		!strings.Contains(string(compose), "./deploy/grafana/dashboards:/etc/grafana/dashboards:ro") {
		t.Error("the dashboards provider and the compose mount disagree on /etc/grafana/dashboards")
	}
}
