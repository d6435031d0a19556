package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// Two `serve --only projector,api` processes fold the same partitions
// behind the gateway (docs/operations.md, "Staying available"). While a
// run is ingested through the gateway and a trainer reads its batches
// through it, the replica the trainer is reading from is killed with
// SIGKILL right after the first batch, and started again later from its
// state directory. The trainer gets every batch, in order, each the bytes
// the log implies; the decisions topic holds every decision from both
// replicas and only byte-identical duplicates; and the analysts' tables
// equal those of a clean run of one projector over the same log.
func TestActiveActiveProjectors(t *testing.T) {
	t.Parallel()
	activeActive(t, false)
}

// The same with the trainer's replica stopped (SIGSTOP) after the first
// batch instead of killed: it holds the trainer's long poll and answers
// nothing. The gateway's health check gives up on it within seconds, ends
// the poll it holds and sends it to the other replica; continued (SIGCONT)
// later, the replica catches up and emits every decision too.
func TestActiveActiveProjectorPaused(t *testing.T) {
	t.Parallel()
	activeActive(t, true)
}

func activeActive(t *testing.T, pause bool) {
	kc := testenv.RealKafka(t)
	// The trainer's polls end with the test; how long it waits for each
	// batch is waitTrainerBatch's to decide.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	url := testenv.Postgres(t)
	live := testenv.Schema(t, url)

	replica := func(addr string, out *testenv.LogBuffer, dir string) *child {
		return startChild(t, childSpec{Addr: addr, Brokers: kc.Brokers, Prefix: kc.TopicPrefix,
			Only: []string{stack.ServiceProjector, stack.ServiceAPI}, DataDir: dir}, out)
	}
	// Two replicas; the one the gateway picks as its api primary is the
	// one disrupted (which it picks depends on which answered its health
	// check first, and it keeps it while healthy).
	var outs [2]testenv.LogBuffer
	var outRestarted testenv.LogBuffer
	addrs := [2]string{freeAddr(t), freeAddr(t)}
	dirs := [2]string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	var kids [2]*child
	for i := range kids {
		kids[i] = replica(addrs[i], &outs[i], dirs[i])
	}
	defer func() {
		if t.Failed() {
			t.Logf("replica a:\n%s\nreplica b:\n%s\nthe disrupted replica, restarted:\n%s", outs[0].String(), outs[1].String(), outRestarted.String())
		}
	}()
	urlA, urlB := "http://"+addrs[0], "http://"+addrs[1]
	ing := startStack(t, stack.Options{Kafka: kc, Only: []string{stack.ServiceIngest}})
	startStack(t, stack.Options{Kafka: kc, Only: []string{stack.ServicePgsink}, DatabaseURL: url, PostgresSchema: live})
	gw := startStack(t, stack.Options{Only: []string{stack.ServiceGateway}, Upstreams: []string{ing.URL(), urlA, urlB}})
	primary := -1
	testenv.CheckFor(t, 3*time.Minute, "the gateway sees both replicas healthy, one its api primary", func() bool {
		h, ok := gw.Gateway().Health()
		if !ok || !h.Upstreams[1].Healthy || !h.Upstreams[2].Healthy {
			return false
		}
		for i := range 2 {
			if h.Upstreams[1+i].Primary {
				primary = i
			}
		}
		return primary >= 0
	})
	victim, name, other := kids[primary], [2]string{"a", "b"}[primary], [2]string{"a", "b"}[1-primary]

	plan := generate(t, "aa-run", 71)
	want := undisturbed(t, plan, 32)
	batches := sealedBatches(t, want)
	if len(batches) < 3 {
		t.Fatalf("the plan seals %d batches; the test needs at least 3", len(batches))
	}
	pushed := make(chan error, 1)
	go func() {
		_, err := push(ctx, gw.URL(), plan, 32, float64(plan.Len())/25, nil, nil)
		pushed <- err
	}()
	tr := &trainer{url: gw.URL(), run: plan.Run, got: make(chan uint64, len(batches))}
	trained := make(chan error, 1)
	go func() { trained <- tr.train(ctx, len(batches)) }()

	waitTrainerBatch(t, tr, trained, plan.Run, "batch 1 reaches the trainer", urlA, urlB)
	// The trainer now long-polls batch 2 on the primary.
	what := "killed"
	if pause {
		what = "stopped"
		if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-victim.exited
	}
	select {
	case err := <-pushed:
		pushed <- err
		t.Logf("replica %s (the primary) %s after batch 1, the run all ingested", name, what)
	default:
		t.Logf("replica %s (the primary) %s after batch 1, while the run is being ingested", name, what)
	}
	waitTrainerBatch(t, tr, trained, plan.Run, "batch 2 reaches the trainer after replica "+name+" was "+what, urlA, urlB)
	if pause {
		// The stopped replica goes on where it stopped.
		if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	} else {
		// The killed replica comes back on its address and resumes from
		// its state.
		replica(addrs[primary], &outRestarted, dirs[primary])
	}
	for k := 3; k <= len(batches); k++ {
		waitTrainerBatch(t, tr, trained, plan.Run, fmt.Sprintf("batch %d reaches the trainer", k), urlA, urlB)
	}
	if err := <-pushed; err != nil {
		t.Fatalf("push: %v", err)
	}
	if err := <-trained; err != nil {
		t.Fatalf("trainer: %v", err)
	}

	if h, _ := gw.Gateway().Health(); !h.Upstreams[1+(1-primary)].Primary {
		t.Errorf("the gateway's api primary is not replica %s after %s was %s: %s", other, name, what, mustJSON(h))
	}

	// Every batch, in order, the bytes the log implies.
	ref := ledgertest.Reference(t, kc)
	if logged := sealedBatches(t, ref); len(logged) != len(batches) {
		t.Fatalf("the log seals %d batches, an undisturbed delivery %d", len(logged), len(batches))
	} else {
		batches = logged
	}
	for k, m := range tr.manifests {
		if !bytes.Equal(m, batches[k]) {
			t.Errorf("batch %d as the trainer got it differs from the log's:\n got %.300s\nwant %.300s", k+1, m, batches[k])
		}
	}
	if len(tr.manifests) != len(batches) {
		t.Errorf("the trainer got %d batches, want %d", len(tr.manifests), len(batches))
	}

	// The decisions topic: what the log implies, every id's copies
	// byte-identical, and every decision from both replicas.
	got := ledgertest.WaitDecisions(t, kc, ref, 2*time.Minute)
	sameMeaning(t, meaning(t, got, plan.Run), meaning(t, want, plan.Run))
	for _, u := range []string{urlA, urlB} {
		testenv.CheckFor(t, 2*time.Minute, u+" seals every batch", func() bool {
			return sealedOn(t, u, plan.Run) == uint64(len(batches))
		})
		for k := range batches {
			if s := samplesOf(t, u, plan.Run, k+1); !bytes.Equal(s, tr.samples[k]) {
				t.Errorf("the samples of batch %d on %s differ from those the trainer got (%d and %d bytes)", k+1, u, len(s), len(tr.samples[k]))
			}
		}
	}
	var records int
	testenv.CheckFor(t, time.Minute, "both replicas emitted every decision", func() bool {
		_, records = ledgertest.Decisions(t, kc)
		return records >= 2*len(got)
	})

	// The read model equals a clean run's: one projector, the same log.
	waitStored(t, url, live, kc)
	kc2 := testenv.RealKafka(t)
	clean := testenv.Schema(t, url)
	one := startStack(t, stack.Options{Kafka: kc2, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: clean})
	var values [][]byte
	for _, r := range ledgertest.Facts(t, kc)[plan.Run] {
		values = append(values, r.Value)
	}
	deliver(t, one.URL(), values, http.DefaultClient)
	ledgertest.WaitDecisions(t, kc2, ledgertest.Reference(t, kc2), 2*time.Minute)
	waitStored(t, url, clean, kc2)
	conn := connect(t, url)
	sameReadModel(t, conn, live, kc, clean, kc2)
	everyFactOnce(t, conn, live, plan)
	t.Logf("replica a %s: %d batches, all in order; %s; %d decision records for %d decisions; trainer retried %d requests; gateway: %s",
		what, len(batches), countKinds(got), records, len(got), tr.retries.Load(), mustJSON(must(gw.Gateway().Health())))
}

func must[T any](v T, _ bool) T { return v }

// startStack starts a stack of this process on a free port.
func startStack(t *testing.T, o stack.Options) *stack.Stack {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	s, err := stack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// freeAddr is a loopback address no one listens on, for a process that
// must come back on the same one.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sealedBatches are the manifests of decisions' batch.sealed, by seq
// from 1.
func sealedBatches(t *testing.T, decisions map[string][]byte) [][]byte {
	t.Helper()
	bySeq := map[uint64][]byte{}
	for _, v := range decisions {
		var d struct {
			Type string
			Data json.RawMessage
		}
		if err := json.Unmarshal(v, &d); err != nil {
			t.Fatal(err)
		}
		if d.Type != string(projections.KindBatchSealed) {
			continue
		}
		var m struct{ Seq uint64 }
		if err := json.Unmarshal(d.Data, &m); err != nil {
			t.Fatal(err)
		}
		bySeq[m.Seq] = d.Data
	}
	out := make([][]byte, len(bySeq))
	for seq, m := range bySeq {
		if seq < 1 || seq > uint64(len(out)) {
			t.Fatalf("batch seqs are not 1..%d: %d", len(out), seq)
		}
		out[seq-1] = m
	}
	return out
}

// trainer reads a run's batches in order through the gateway as the SDK's
// trainer does: long-polling for the next, then reading its samples, and
// retrying a request that failed in transport or answered 503.
type trainer struct {
	url, run  string
	got       chan uint64
	manifests [][]byte
	samples   [][]byte
	retries   atomic.Int64
}

func (tr *trainer) train(ctx context.Context, n int) error {
	base := tr.url + "/v1/runs/" + tr.run
	for k := 1; k <= n; {
		status, body, err := tr.get(ctx, fmt.Sprintf("%s/batches/next?after=%d&wait=5s", base, k-1))
		if err != nil {
			return err
		}
		switch status {
		case http.StatusNoContent:
			continue
		case http.StatusOK:
		default:
			return fmt.Errorf("batch %d: HTTP %d: %s", k, status, body)
		}
		var m projections.Manifest
		if err := json.Unmarshal(body, &m); err != nil {
			return fmt.Errorf("batch %d: %w", k, err)
		}
		if m.Seq != uint64(k) {
			return fmt.Errorf("asked for the batch after %d, got batch %d", k-1, m.Seq)
		}
		status, samples, err := tr.get(ctx, fmt.Sprintf("%s/batches/%d/samples", base, k))
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("samples of batch %d: HTTP %d: %s", k, status, samples)
		}
		tr.manifests = append(tr.manifests, bytes.TrimSuffix(body, []byte("\n")))
		tr.samples = append(tr.samples, samples)
		tr.got <- uint64(k)
		k++
	}
	return nil
}

func (tr *trainer) get(ctx context.Context, url string) (int, []byte, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode != http.StatusServiceUnavailable {
				return resp.StatusCode, body, nil
			}
			err = fmt.Errorf("HTTP %d %s %v", resp.StatusCode, body, rerr)
		}
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("GET %s: %w (last: %v)", url, ctx.Err(), err)
		}
		tr.retries.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitTrainerBatch waits for the trainer's next batch for as long as the
// replicas keep folding the run: on a loaded machine the fold is slow, not
// wrong, while a replica that stops folding, or a batch never handed on,
// fails the test within two minutes of the last fact folded.
func waitTrainerBatch(t *testing.T, tr *trainer, trained chan error, run, what string, replicas ...string) {
	t.Helper()
	testenv.CheckProgress(t, 2*time.Minute, what+" while the replicas fold", func() (bool, int64) {
		select {
		case <-tr.got:
			return true, 0
		default:
		}
		select {
		case err := <-trained:
			if err != nil {
				t.Fatalf("the trainer stopped before %s: %v", what, err)
			}
			// It trained every batch: each was handed on before it returned.
			trained <- nil
			select {
			case <-tr.got:
				return true, 0
			default:
				t.Fatalf("the trainer ended without %s", what)
			}
		default:
		}
		var folded int64
		for _, u := range replicas {
			folded += int64(statusOn(u, run).FactsFolded)
		}
		return false, folded
	})
}

// replicaStatus is the part of a replica's run status the tests read.
type replicaStatus struct {
	FactsFolded   uint64 `json:"facts_folded"`
	BatchesSealed uint64 `json:"batches_sealed"`
}

// statusOn asks one replica for run's status; zero while it does not
// answer (starting, stopped or killed).
func statusOn(url, run string) replicaStatus {
	var st replicaStatus
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url + "/v1/runs/" + run + "/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return replicaStatus{}
	}
	return st
}

// sealedOn asks one replica how many batches of run it sealed.
func sealedOn(t *testing.T, url, run string) uint64 {
	t.Helper()
	return statusOn(url, run).BatchesSealed
}

func samplesOf(t *testing.T, url, run string, seq int) []byte {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/v1/runs/%s/batches/%d/samples", url, run, seq))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("samples of batch %d on %s: HTTP %d %v", seq, url, resp.StatusCode, err)
	}
	return b
}

// sameReadModel fails the test unless schemas a (fed from topics ka) and
// b (from kb) hold the same rows, where the facts topics hold the same
// records at the same offsets. Only where each decision sits in its
// decisions topic may differ (the first of its copies there), and how many
// decision records were read.
func sameReadModel(t *testing.T, conn *pgx.Conn, a string, ka kafkalog.Config, b string, kb kafkalog.Config) {
	t.Helper()
	ctx := context.Background()
	count := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	for _, table := range pgsink.TableNames() {
		rows, err := conn.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position", a, table)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		decision := strings.Contains(" "+strings.Join(names, " ")+" ", " fact_seq ")
		var cols []string
		for _, n := range names {
			switch {
			case decision && (n == "log_partition" || n == "log_offset"):
			case table == "consumed_offsets" && n == "updated_at":
			case n == "topic":
				cols = append(cols, "regexp_replace(topic, '^.*[.]', '')")
			default:
				cols = append(cols, pgx.Identifier{n}.Sanitize())
			}
		}
		where := ""
		if table == "consumed_offsets" {
			// The decisions topics differ in how many copies they hold.
			where = " WHERE topic LIKE '%.facts'"
		}
		sel := func(schema string) string {
			return fmt.Sprintf("SELECT %s FROM %s%s", strings.Join(cols, ", "), pgx.Identifier{schema, table}.Sanitize(), where)
		}
		onlyA := count(fmt.Sprintf("SELECT count(*) FROM (%s EXCEPT ALL %s) d", sel(a), sel(b)))
		onlyB := count(fmt.Sprintf("SELECT count(*) FROM (%s EXCEPT ALL %s) d", sel(b), sel(a)))
		na := count(fmt.Sprintf("SELECT count(*) FROM (%s) d", sel(a)))
		nb := count(fmt.Sprintf("SELECT count(*) FROM (%s) d", sel(b)))
		if onlyA != 0 || onlyB != 0 || na != nb {
			t.Errorf("table %s: %d rows in %s, %d in %s; %d only in the first, %d only in the second", table, na, a, nb, b, onlyA, onlyB)
		}
	}
	if ka.FactsTopic() == kb.FactsTopic() {
		t.Fatal("the two read models were fed from the same topics")
	}
}
