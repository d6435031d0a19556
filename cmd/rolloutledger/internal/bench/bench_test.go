package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/bench"
	"github.com/rolloutledger/rolloutledger/docs"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// TestMain lets this test binary be the memory figure's child process, as
// the rolloutledger binary is when bench runs it.
func TestMain(m *testing.M) {
	if bench.IsChild() {
		if err := bench.RunChild(context.Background(), os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// kafkaLibs is where scripts/services.sh installs Apache Kafka's jars.
func kafkaLibs(t *testing.T) string {
	for _, env := range []string{"KAFKA_LIBS", "ROLLOUTLEDGER_KAFKA_LIBS"} {
		if d := os.Getenv(env); d != "" {
			return d
		}
	}
	// This package is four levels under the repository's root.
	d, _ := filepath.Abs(filepath.Join("..", "..", "..", "..", ".services", "kafka", "libs"))
	if jars, _ := filepath.Glob(filepath.Join(d, "kafka-tools-*.jar")); len(jars) == 0 {
		if testenv.InCI() {
			t.Fatalf("CI=true and Apache Kafka's jars are not in %s", d)
		}
		t.Logf("no Kafka jars in %s: the ProducerPerformance baseline is skipped", d)
	}
	return d
}

// The short mode CI runs: every figure is measured once at tiny sizes
// against the real servers, the report is whole, and the run leaves no
// topic or schema behind. No figure's value is asserted beyond being a
// measurement.
func TestShortRunsEveryFigure(t *testing.T) {
	kc := testenv.RealKafka(t)
	url := testenv.Postgres(t)
	libs := kafkaLibs(t)
	// The trainer-fetch figures need a Python with the SDK, NumPy and
	// pyarrow: $ROLLOUTLEDGER_PYTHON names one (the Go tests run before
	// CI installs the SDK, so without it they may be skipped).
	python := os.Getenv("ROLLOUTLEDGER_PYTHON")
	script, _ := filepath.Abs(filepath.Join("..", "..", "..", "..", "sdk", "python", "bench", "fetch_samples.py"))
	rep, err := bench.Run(context.Background(), bench.Options{Brokers: kc.Brokers, DatabaseURL: url, KafkaLibs: libs, Short: true,
		Python: python, FetchScript: script})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]int{}
	for _, f := range rep.Figures {
		groups[f.Group]++
		if f.Command == "" {
			t.Errorf("%s: no command to reproduce it", f.Name)
		}
		if f.Skipped {
			if strings.Contains(f.Name, "perf-test") && !testenv.InCI() {
				continue
			}
			if f.Group == bench.GroupProxy && !testenv.InCI() && strings.Contains(f.Note, "scripts/engine") {
				t.Logf("%s: %s", f.Name, f.Note)
				continue
			}
			if f.Group == bench.GroupTokens && python == "" && strings.Contains(f.Note, "cannot import") {
				t.Logf("%s: skipped without $ROLLOUTLEDGER_PYTHON: %s", f.Name, f.Note)
				continue
			}
			t.Errorf("%s: skipped: %s", f.Name, f.Note)
			continue
		}
		if len(f.Runs) != 1 {
			t.Errorf("%s: %d runs, want 1 in short mode", f.Name, len(f.Runs))
		}
		if f.Median != f.Runs[0] || f.Min != f.Max {
			t.Errorf("%s: median %v min %v max %v of runs %v", f.Name, f.Median, f.Min, f.Max, f.Runs)
		}
		if f.Median <= 0 && !strings.Contains(f.Name, "growth") && !strings.Contains(f.Name, "added") {
			t.Errorf("%s: %v %s, want a positive measurement", f.Name, f.Median, f.Unit)
		}
		if f.Goal != "" && f.Ratio == nil && !strings.Contains(f.Goal, "perf-test") {
			t.Errorf("%s: goal %q without a ratio", f.Name, f.Goal)
		}
	}
	for _, g := range bench.Groups {
		if g == bench.GroupAnalysts {
			if groups[g] != 0 {
				t.Errorf("the analysts' figures ran unasked: they load tens of millions of rows")
			}
			continue
		}
		if groups[g] == 0 {
			t.Errorf("no figure of group %s", g)
		}
	}

	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Figures {
		if !strings.Contains(buf.String(), f.Name) {
			t.Errorf("the table does not show %q:\n%s", f.Name, buf.String())
		}
	}
	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back.Figures) != len(rep.Figures) {
		t.Fatalf("the JSON report does not read back: %v (%d figures)", err, len(back.Figures))
	}

	// Nothing left behind.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", kc.Brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if strings.HasPrefix(p.Topic, rep.Prefix+"-") {
			t.Errorf("topic %s is left behind", p.Topic)
		}
	}
	pg, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	var left int
	if err := pg.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", strings.ReplaceAll(rep.Prefix, "-", "_")+"_%").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas of %s are left behind", left, rep.Prefix)
	}
}

func TestOptionsValidate(t *testing.T) {
	err := bench.Options{Only: []string{"ingest", "speed"}, ScaleFacts: []int{10_000_000, 1_000_000}, ScaleFormats: []string{"parquet", "csv"}}.Validate()
	if err == nil {
		t.Fatal("want an error for no brokers and an unknown group")
	}
	for _, want := range []string{"no Kafka brokers", `unknown figure group "speed"`, "--scale-facts [10000000 1000000]: want two run lengths, the smaller first",
		`--scale-formats: unknown format "csv"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := (bench.Options{Brokers: []string{"127.0.0.1:9092"}, Only: bench.Groups, ScaleFacts: []int{1_000_000, 50_000_000},
		ScaleFormats: []string{"parquet"}}).Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

// --only analysts times every SQL block of docs/analysts.md but the DBA's
// and the session settings, over one loaded run, and drops what it loaded.
func TestAnalystsTimesEveryDocumentedQuery(t *testing.T) {
	kc := testenv.RealKafka(t)
	url := testenv.Postgres(t)
	rep, err := bench.Run(context.Background(), bench.Options{Brokers: kc.Brokers, DatabaseURL: url, Short: true,
		Only: []string{bench.GroupAnalysts}, AnalystsFacts: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, b := range docs.SQLBlocks(docs.Analysts) {
		if !strings.Contains(b.SQL, "CREATE ROLE") && !strings.HasPrefix(b.SQL, `\set`) && !strings.HasPrefix(b.SQL, "SET ") {
			want++
		}
	}
	if len(rep.Figures) != want {
		t.Errorf("%d figures, want one per documented query (%d)", len(rep.Figures), want)
	}
	for _, f := range rep.Figures {
		if f.Skipped || len(f.Runs) != 1 || f.Median <= 0 || f.Ratio == nil {
			t.Errorf("%s: skipped %v, runs %v, ratio %v: want one timing against the 1 s goal (%s)", f.Name, f.Skipped, f.Runs, f.Ratio, f.Note)
		}
	}
	pg, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	var left int
	if err := pg.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", strings.ReplaceAll(rep.Prefix, "-", "_")+"_%").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas of %s are left behind", left, rep.Prefix)
	}
}
