package faults_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The test binary doubles as the service process the tests pause, kill
// and starve of disk: with childEnv set to a JSON childSpec it runs a
// stack of the named services until it is interrupted or a service stops.
const childEnv = "ROLLOUTLEDGER_TEST_FAULTS_CHILD"

type childSpec struct {
	// Addr is the HTTP address; empty picks a free port.
	Addr        string
	Brokers     []string
	Prefix      string
	Only        []string
	DataDir     string
	DatabaseURL string
	Schema      string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	// The fault tests spend most of their time waiting — on paused
	// processes, a stopped server, restarting brokers, paced pushes — so
	// they all run at once unless -test.parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addr := c.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s, err := stack.Start(ctx, stack.Options{
		Addr: addr, Kafka: kafkalog.Config{Brokers: c.Brokers, TopicPrefix: c.Prefix},
		Only: c.Only, DataDir: c.DataDir, DatabaseURL: c.DatabaseURL, PostgresSchema: c.Schema, Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: start:", err)
		return 1
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-s.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Shutdown(shut)
	if failed != nil {
		fmt.Fprintln(os.Stderr, "child: stopped:", failed)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: shutdown:", err)
		return 1
	}
	return 0
}

// child is a running service process.
type child struct {
	cmd    *exec.Cmd
	out    *testenv.LogBuffer
	exited chan struct{}
	err    error
}

func startChild(t *testing.T, spec childSpec, out *testenv.LogBuffer) *child {
	t.Helper()
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// stop interrupts the child and waits for it (killing it after 30 s).
func (c *child) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// planOptions is a short run that seals three batches: about 3,000
// facts.
func planOptions(seed uint64) simulate.Options {
	return simulate.Options{Seed: seed, Tasks: 16, Steps: 3, BatchGroups: 3, MaxTurns: 30}
}

func generate(t *testing.T, run string, seed uint64) *simulate.Plan {
	t.Helper()
	p, err := simulate.Generate(planOptions(seed), run)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ingestServer serves POST /v1/events into kc's facts topic, answering 503
// when Kafka does not acknowledge within appendTimeout.
func ingestServer(t *testing.T, kc kafkalog.Config, appendTimeout time.Duration) string {
	t.Helper()
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	mux := http.NewServeMux()
	(&ingest.Service{Appender: w, AppendTimeout: appendTimeout}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		w.Close()
	})
	return srv.URL
}

// push sends plan to the ledger at url with one worker, so that the first
// delivery of every event follows the same order in every run of the plan.
// A positive rate paces the push at that many events per second.
func push(ctx context.Context, url string, plan *simulate.Plan, epr int, rate float64, client *http.Client, onAck func([]simulate.Ack)) (simulate.Result, error) {
	return simulate.Push(ctx, simulate.Options{URL: url, Workers: 1, EventsPerRequest: epr, Rate: rate, Client: client, OnAck: onAck}, plan)
}

// acks collects acknowledged positions by event id.
type acks struct {
	mu sync.Mutex
	m  map[string][]simulate.Ack
	n  int
}

func newAcks() *acks { return &acks{m: map[string][]simulate.Ack{}} }

func (a *acks) add(as []simulate.Ack) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range as {
		a.m[x.ID] = append(a.m[x.ID], x)
	}
	a.n += len(as)
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// waitAcks waits until at least n events were acknowledged.
func (a *acks) waitAcks(t *testing.T, n int, pushed <-chan error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for a.count() < n {
		select {
		case err := <-pushed:
			t.Fatalf("the push ended (%v) before %d events were acknowledged (%d were)", err, n, a.count())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d events acknowledged after 3 minutes", a.count(), n)
		}
	}
}

// logRecord is one record of the facts topic.
type logRecord struct {
	id        string
	partition int
	offset    int64
}

// readFacts lists the facts topic's records, partition by partition in
// log order.
func readFacts(t *testing.T, kc kafkalog.Config) []logRecord {
	t.Helper()
	var recs []logRecord
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return fmt.Errorf("%d/%d: %w", m.Partition, m.Offset, err)
		}
		recs = append(recs, logRecord{id: ev.ID, partition: m.Partition, offset: m.Offset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// positional are the fields of a decision that say where facts sit in the
// log or commit to the log's exact bytes (Merkle heads, digests over
// positions). A log with duplicates or in another topic has other
// positions; everything else a decision says must not change.
var positional = map[string]bool{
	"partition": true, "offset": true, "fact": true, "watermark": true,
	"completed": true, "tree": true, "digest": true,
}

// meaning reduces the decisions about run to what they conclude, by
// "<type> <seq>": positions and the commitments over them removed, and
// audit checkpoints (one per 10,000 records, duplicates included) left out.
func meaning(t *testing.T, decisions map[string][]byte, run string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range decisions {
		var env map[string]any
		if err := json.Unmarshal(v, &env); err != nil {
			t.Fatal(err)
		}
		if env["run"] != run || env["type"] == string(projections.KindAuditCheckpoint) {
			continue
		}
		strip(env)
		out[fmt.Sprintf("%v %v", env["type"], env["id"])] = mustJSON(env)
	}
	return out
}

func strip(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if positional[k] {
				delete(x, k)
				continue
			}
			strip(e)
		}
	case []any:
		for _, e := range x {
			strip(e)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func sameMeaning(t *testing.T, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if got[k] != want[k] {
			bad++
			if bad < 4 {
				t.Errorf("decision %s differs from the undisturbed run's:\n got %.400s\nwant %.400s", k, got[k], want[k])
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad++
			if bad < 6 {
				t.Errorf("decision %s is not in the undisturbed run: %.300s", k, got[k])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d decisions differ from the undisturbed run's", bad, len(want))
	}
}

// undisturbed is what the plan decides when delivered once, in the order
// one worker pushes it, with nothing failing: the plan is pushed to a
// stand-in ledger that records each request and acknowledges it, and the
// recorded facts are folded in that order.
func undisturbed(t *testing.T, plan *simulate.Plan, epr int) map[string][]byte {
	t.Helper()
	out, _ := undisturbedLog(t, plan, epr)
	return out
}

// undisturbedLog is undisturbed, and the canonical facts in the order they
// were delivered.
func undisturbedLog(t *testing.T, plan *simulate.Plan, epr int) (map[string][]byte, [][]byte) {
	t.Helper()
	var mu sync.Mutex
	var recs []projections.Record
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		evs, err := events.DecodeBatch(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		values, err := events.EncodeBatch(evs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		resp := ingest.Response{}
		for i, ev := range evs {
			off := int64(len(recs))
			recs = append(recs, projections.Record{Value: values[i], Event: ev, Offset: off})
			resp.Events = append(resp.Events, ingest.Appended{ID: ev.ID, Offset: off})
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	defer srv.Close()
	if _, err := push(context.Background(), srv.URL, plan, epr, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := projections.FoldAll(plan.Run, recs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, d := range ds {
		out[d.ID] = d.Value
	}
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	return out, values
}

// countKinds counts decisions by type.
func countKinds(ds map[string][]byte) string {
	n := map[string]int{}
	for _, v := range ds {
		var env struct{ Type string }
		_ = json.Unmarshal(v, &env)
		n[env.Type]++
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
