package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The parts of Grafana's dashboard model the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string     `json:"name"`
			Query      any        `json:"query"`
			Datasource datasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID  string `json:"refId"`
		Expr   string `json:"expr"`
		RawSQL string `json:"rawSql"`
		Format string `json:"format"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana/dashboards (%v)", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkGrafanaSchema(t, f, raw)
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: a provisioned dashboard needs a uid and a title", f)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// checkGrafanaSchema decodes a dashboard with Grafana's own schema types
// (the foundation SDK generated from Grafana's CUE schemas), which refuses
// unknown fields and wrong types. Fields the schema calls required but
// Grafana fills in with defaults when it loads a dashboard are not required
// here.
func checkGrafanaSchema(t *testing.T, file string, raw []byte) {
	t.Helper()
	plugins.RegisterDefaultPlugins()
	var g grafana.Dashboard
	err := g.UnmarshalJSONStrict(raw)
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasSuffix(line, "required field is missing from input") {
			t.Errorf("%s: %s", file, line)
		}
	}
}

// panelTypes are the panel plugins built into Grafana that the dashboards use.
var panelTypes = []string{"row", "timeseries", "stat", "table", "barchart", "trend", "piechart", "bargauge", "gauge", "text"}

// provisionedDatasources reads the uids and types Grafana is provisioned with.
func provisionedDatasources(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("grafana/provisioning/datasources/datasources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Datasources {
		out[d.UID] = d.Type
	}
	return out
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// Every dashboard parses, every panel queries a provisioned data source, no
// two panels overlap, and every Prometheus query names only metrics and
// labels the services expose.
func TestDashboards(t *testing.T) {
	ds := provisionedDatasources(t)
	var prom, sql int
	for file, d := range loadDashboards(t) {
		ids := map[int]bool{}
		type cell struct{ x, y int }
		taken := map[cell]string{}
		for _, p := range allPanels(d.Panels) {
			where := fmt.Sprintf("%s panel %d %q", file, p.ID, p.Title)
			if ids[p.ID] {
				t.Errorf("%s: duplicate panel id", where)
			}
			ids[p.ID] = true
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("%s overlaps %s", where, other)
						x, y = 1<<30, 1<<30
						continue
					}
					taken[cell{x, y}] = where
				}
			}
			if p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s is wider than the 24-column grid", where)
			}
			if !slices.Contains(panelTypes, p.Type) {
				t.Errorf("%s: panel type %q is not one of Grafana's built-in panels %v", where, p.Type, panelTypes)
			}
			if p.Type == "row" {
				continue
			}
			if typ, ok := ds[p.Datasource.UID]; !ok || typ != p.Datasource.Type {
				t.Errorf("%s: data source %+v is not provisioned (have %v)", where, p.Datasource, ds)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s has no query", where)
			}
			for _, tg := range p.Targets {
				switch p.Datasource.Type {
				case "prometheus":
					prom++
					for _, err := range checkPromQL(tg.Expr) {
						t.Errorf("%s: %v", where, err)
					}
				case "grafana-postgresql-datasource":
					sql++
					if strings.TrimSpace(tg.RawSQL) == "" {
						t.Errorf("%s: empty SQL", where)
					}
				}
			}
		}
	}
	if prom == 0 || sql == 0 {
		t.Errorf("%d Prometheus and %d Postgres queries; want both dashboards", prom, sql)
	}
}

// grafanaSQL substitutes what Grafana substitutes before a query reaches
// Postgres: the dashboard's variables and the time macros. It fails on any
// macro it does not know, so that a new one cannot slip through untested.
func grafanaSQL(t *testing.T, sql string, vars map[string]string) string {
	t.Helper()
	from, to := "'2000-01-01T00:00:00Z'", "'2100-01-01T00:00:00Z'"
	macros := []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`\$__timeFilter\(([^)]+)\)`), "$1 BETWEEN " + from + " AND " + to},
		{regexp.MustCompile(`\$__timeFrom\(\)`), from},
		{regexp.MustCompile(`\$__timeTo\(\)`), to},
		{regexp.MustCompile(`\$__timeGroupAlias\(([^,]+),[^)]+\)`), "date_trunc('minute', $1) AS time"},
		{regexp.MustCompile(`\$__timeGroup\(([^,]+),[^)]+\)`), "date_trunc('minute', $1)"},
	}
	for _, m := range macros {
		sql = m.re.ReplaceAllString(sql, m.with)
	}
	for name, v := range vars {
		sql = strings.NewReplacer("${"+name+"}", v, "[["+name+"]]", v, "$"+name, v).Replace(sql)
	}
	if left := regexp.MustCompile(`\$\{?[A-Za-z_]\w*|\[\[\w+\]\]`).FindString(sql); left != "" {
		t.Fatalf("unknown Grafana variable or macro %s in:\n%s", left, sql)
	}
	return sql
}

// Every SQL query of the dashboards (panels and variables) runs against the
// migrated schema, as a login role of rolloutledger_reader (what Grafana
// logs in as), and returns rows after a simulated run has gone through
// ingest, Kafka, the projector and the pgsink.
func TestDashboardSQLRunsOnTheReadModel(t *testing.T) {
	kc := testenv.RealKafka(t)
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	ctx := context.Background()

	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	const run = "dashboards-run"
	// Groups of 4 and max_staleness 1 for drops and masked turns; the
	// default infrastructure failure rate for failures and retries.
	o := simulate.Options{URL: s.URL(), Run: run, Seed: 3, Tasks: 24, Steps: 3, BatchGroups: 4, GroupSize: 4,
		MaxStaleness: 1, MaxTurns: 60, Trainer: true}
	if _, err := simulate.Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	// A producer that re-sends a fact under the same id with other bytes:
	// the projections record a conflicting_duplicate finding.
	postConflict(t, kc, s.URL(), run)
	waitFolded(t, s, kc)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := pgsink.WaitCaughtUp(wctx, url, schema, kc); err != nil {
		t.Fatal(err)
	}

	conn := readerConn(t, url, schema)
	queries := 0
	for file, d := range loadDashboards(t) {
		vars := map[string]string{}
		for _, v := range d.Templating.List {
			if v.Datasource.UID != "ledger-postgres" {
				continue
			}
			q, _ := v.Query.(string)
			if q == "" {
				t.Errorf("%s: variable %s has no SQL query", file, v.Name)
				continue
			}
			queries++
			values := queryRows(t, conn, fmt.Sprintf("%s variable %s", file, v.Name), grafanaSQL(t, q, nil))
			if len(values) == 0 || !strings.Contains(strings.Join(values, "\n"), run) {
				t.Errorf("%s: variable %s offers %v, want the run %s", file, v.Name, values, run)
			}
			vars[v.Name] = run
		}
		for _, p := range allPanels(d.Panels) {
			if p.Datasource.UID != "ledger-postgres" {
				continue
			}
			for _, tg := range p.Targets {
				queries++
				where := fmt.Sprintf("%s panel %d %q", file, p.ID, p.Title)
				if rows := queryRows(t, conn, where, grafanaSQL(t, tg.RawSQL, vars)); len(rows) == 0 {
					t.Errorf("%s returns no rows for run %s", where, run)
				}
			}
		}
	}
	if queries == 0 {
		t.Fatal("no Postgres queries in the dashboards")
	}
}

// queryRows runs sql and returns each row's values as text.
func queryRows(t *testing.T, conn *pgx.Conn, where, sql string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, sql)
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Errorf("%s: %v", where, err)
			return nil
		}
		out = append(out, fmt.Sprint(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Errorf("%s: %v\n%s", where, err, sql)
	}
	return out
}

// readerConn connects as a throwaway login role that is a member of
// rolloutledger_reader only, read-only, with the read model's schema on its
// search path: what deploy/postgres/initdb gives Grafana.
func readerConn(t *testing.T, url, schema string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [4]byte
	_, _ = rand.Read(b[:])
	role, password := "t_grafana_"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE rolloutledger_reader", role, password)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, password
	cfg.RuntimeParams["search_path"] = schema
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close(context.Background())
		a, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer a.Close(context.Background())
		if _, err := a.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	// The reader sees the data and can change none of it.
	if _, err := conn.Exec(ctx, "DELETE FROM prices"); err == nil {
		t.Error("the dashboards' role could delete from prices")
	}
	return conn
}

// postConflict re-sends the run's first fact through ingest with another
// source: same id, different bytes.
func postConflict(t *testing.T, kc kafkalog.Config, base, run string) {
	t.Helper()
	var first *events.Event
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errFound := fmt.Errorf("found")
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return err
		}
		if ev.Run == run {
			first = &ev
			return errFound
		}
		return nil
	})
	if first == nil {
		t.Fatalf("no fact of run %s in the log: %v", run, err)
	}
	first.Source += "-resent"
	body, err := events.Encode(*first)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("re-sending a fact: %s", resp.Status)
	}
}

// waitFolded waits until the projector has folded every fact written so far.
func waitFolded(t *testing.T, s *stack.Stack, kc kafkalog.Config) {
	t.Helper()
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 2*time.Minute, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})
}
