package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// Three brokers, replication 3, min.insync.replicas 2. While a run is
// ingested, one broker is killed with SIGKILL and brought back, then the
// leader of the run's partition is. Afterwards two of the three are killed
// at once: no write can be made durable, and ingest must answer 503, never
// 200, until they are back. Every event ingest acknowledged is in the facts
// topic at the position it was acknowledged at, and the projector's
// decisions are the undisturbed run's.
func TestKafkaBrokerFailures(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartKafkaCluster(t)
	kc := cluster.Config(t, 3)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	const epr = 24
	plan := generate(t, "cluster-run", 91)
	want := undisturbed(t, plan, epr)
	url := ingestServer(t, kc, 4*time.Second)

	// Paced, and held while a broker restarts, so that every kill lands
	// while events are being written and writes go on after it.
	total := plan.Len()
	a := newAcks()
	g := &gatedTransport{base: http.DefaultTransport}
	pushed := make(chan error, 1)
	go func() {
		_, err := push(ctx, url, plan, epr, float64(total)/25, &http.Client{Transport: g, Timeout: 30 * time.Second}, a.add)
		pushed <- err
	}()
	a.waitAcks(t, total/10, pushed)
	part := int(a.first().Partition)
	topic := kc.FactsTopic()
	leader, err := cluster.Leader(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	follower := (leader + 1) % 3
	t.Logf("killing broker %d (a follower of %s/%d) after %d acknowledged events", follower+1, topic, part, a.count())
	cluster.Kill(follower)
	a.waitAcks(t, a.count()+total/10, pushed)
	g.hold(true)
	cluster.Restart(follower)
	testenv.CheckFor(t, 90*time.Second, "the restarted broker rejoins the ISR", func() bool {
		n, err := cluster.InSync(topic, part)
		return err == nil && n == 3
	})
	g.hold(false)
	a.waitAcks(t, a.count()+total/20, pushed)
	if leader, err = cluster.Leader(topic, part); err != nil {
		t.Fatal(err)
	}
	t.Logf("killing broker %d (the leader of %s/%d) after %d acknowledged events", leader+1, topic, part, a.count())
	cluster.Kill(leader)
	a.waitAcks(t, a.count()+total/10, pushed)
	cluster.Restart(leader)
	if err := <-pushed; err != nil {
		t.Fatalf("the push failed: %v", err)
	}
	t.Logf("run pushed: %d events acknowledged", a.count())

	// Two of three brokers down: below min.insync.replicas (and without a
	// controller quorum). Nothing may be acknowledged.
	probe := generate(t, "probe-run", 5).All()[:1]
	body, err := events.EncodeBatch(probe)
	if err != nil {
		t.Fatal(err)
	}
	req := append(append([]byte{'['}, body[0]...), ']')
	if leader, err = cluster.Leader(topic, part); err != nil {
		t.Fatal(err)
	}
	down := []int{(leader + 1) % 3, (leader + 2) % 3}
	for _, i := range down {
		cluster.Kill(i)
	}
	refused := 0
	for range 3 {
		status, _ := post(t, url, req)
		if status != http.StatusServiceUnavailable {
			t.Fatalf("with two of three brokers down, ingest answered %d, want 503", status)
		}
		refused++
	}
	for _, i := range down {
		cluster.Start(i)
	}
	for _, i := range down {
		cluster.WaitReady(i)
	}
	var probeAck ingest.Appended
	testenv.CheckFor(t, 90*time.Second, "ingest acknowledges again once the brokers are back", func() bool {
		status, ack := post(t, url, req)
		if status == http.StatusOK {
			probeAck = ack.Events[0]
			return true
		}
		return false
	})
	a.add([]simulate.Ack{{ID: probeAck.ID, Partition: probeAck.Partition, Offset: probeAck.Offset}})

	// Every acknowledged event sits at its acknowledged position.
	recs := readFacts(t, kc)
	at := map[[2]int64]string{}
	copies := map[string]int{}
	for _, r := range recs {
		at[[2]int64{int64(r.partition), r.offset}] = r.id
		copies[r.id]++
	}
	missing, extra := 0, 0
	for id, as := range a.m {
		if len(as) != 1 {
			t.Errorf("event %s acknowledged %d times", id, len(as))
		}
		if got := at[[2]int64{int64(as[0].Partition), as[0].Offset}]; got != id {
			missing++
			if missing < 5 {
				t.Errorf("event %s acknowledged at %d/%d, where the topic holds %q", id, as[0].Partition, as[0].Offset, got)
			}
		}
		extra += copies[id] - 1
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged events are not at their acknowledged position", missing, len(a.m))
	}
	if len(a.m) != total+1 {
		t.Errorf("%d events acknowledged, want the run's %d and the probe", len(a.m), total)
	}
	t.Logf("%d events acknowledged, each at its position; %d records in the topic, %d extra copies from retried writes; %d requests refused with 503 while two brokers were down",
		len(a.m), len(recs), extra, refused)

	// The projector folds the log into the undisturbed run's decisions.
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: filepath.Join(t.TempDir(), "projector")})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
		p.Close()
	}()
	got := ledgertest.WaitDecisions(t, kc, ledgertest.Reference(t, kc), 2*time.Minute)
	sameMeaning(t, meaning(t, got, plan.Run), meaning(t, want, plan.Run))
	t.Logf("decisions: %s", countKinds(got))
}

// gatedTransport holds requests while the test says so.
type gatedTransport struct {
	base   http.RoundTripper
	paused atomic.Bool
}

func (g *gatedTransport) hold(on bool) { g.paused.Store(on) }

func (g *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	for g.paused.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	return g.base.RoundTrip(req)
}

func (a *acks) first() simulate.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, as := range a.m {
		return as[0]
	}
	return simulate.Ack{}
}

// post sends one request body to ingest and decodes a 200 answer.
func post(t *testing.T, url string, body []byte) (int, ingest.Response) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(url+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out ingest.Response
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Events) == 0 {
			t.Fatalf("200 without an acknowledgement: %s", raw)
		}
	}
	return resp.StatusCode, out
}
