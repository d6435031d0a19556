package faults_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// pause is how long a process stays stopped: longer than every timeout
// that could fire while it is — kafka-go's dial and write timeouts (10 s),
// its fetch wait, and Postgres' idle_in_transaction_session_timeout, set
// to 2 s below so that a sink stopped inside a transaction loses its
// session. Neither service joins a consumer group: their offsets live
// beside their state, so there is no group session to expire.
const pause = 12 * time.Second

// The projector and the sink processes are stopped (SIGSTOP) twice for
// longer than any of their timeouts while a run is ingested, and continued
// (SIGCONT). They go on by themselves, and what they produce equals what
// an undisturbed projector and a clean rebuild produce from the same log:
// nothing lost, nothing twice.
func TestProjectorAndSinkPauses(t *testing.T) {
	t.Parallel()
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	pg := testenv.PrivatePostgres(t)
	url := pg.URL()
	conn := connect(t, url)
	for _, q := range []string{"ALTER SYSTEM SET idle_in_transaction_session_timeout = '2s'", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var projOut, sinkOut testenv.LogBuffer
	proj := startChild(t, childSpec{Brokers: kc.Brokers, Prefix: kc.TopicPrefix, Only: []string{stack.ServiceProjector},
		DataDir: filepath.Join(t.TempDir(), "data")}, &projOut)
	sink := startChild(t, childSpec{Brokers: kc.Brokers, Prefix: kc.TopicPrefix, Only: []string{stack.ServicePgsink},
		DatabaseURL: url, Schema: "live"}, &sinkOut)
	defer func() {
		if t.Failed() {
			t.Logf("projector output:\n%s\nsink output:\n%s", projOut.String(), sinkOut.String())
		}
	}()

	plan := generate(t, "pause-run", 41)
	ingest := ingestServer(t, kc, 0)
	pushed := make(chan error, 1)
	go func() {
		_, err := push(ctx, ingest, plan, 32, float64(plan.Len())/25, nil, nil)
		pushed <- err
	}()
	for range 2 {
		time.Sleep(3 * time.Second)
		for _, c := range []*child{proj, sink} {
			if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(pause)
		for _, c := range []*child{proj, sink} {
			if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-pushed; err != nil {
		t.Fatalf("push: %v", err)
	}
	t0 := time.Now()
	got := ledgertest.WaitDecisions(t, kc, ledgertest.Reference(t, kc), 2*time.Minute)
	t.Logf("projected after %v", time.Since(t0))
	waitStored(t, url, "live", kc)
	t.Logf("stored after %v", time.Since(t0))
	for name, c := range map[string]*child{"projector": proj, "sink": sink} {
		select {
		case <-c.exited:
			t.Fatalf("the %s exited after the pauses: %v", name, c.err)
		default:
		}
	}
	res, err := pgsink.Rebuild(ctx, pgsink.RebuildOptions{Kafka: kc, DatabaseURL: url, Schema: "clean"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt after %v", time.Since(t0))
	ledgertest.SameTables(t, conn, "live", "clean", false)
	t.Logf("compared after %v", time.Since(t0))
	everyFactOnce(t, conn, "live", plan)
	t.Logf("after two %v pauses: %s; %d records stored; the sink reconnected %d times", pause, countKinds(got), res.Records,
		strings.Count(sinkOut.String(), "session ended; reconnecting"))
}

// Postgres is stopped for 30 s while a run is ingested and projected. The
// sink waits, reconnects when the server is back, and catches up: every
// fact in its table exactly once, every table as a clean rebuild has it.
func TestPostgresStopped(t *testing.T) {
	t.Parallel()
	kc := testenv.RealKafka(t)
	ctx := context.Background()
	pg := testenv.PrivatePostgres(t)
	url := pg.URL()
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: "live"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	plan := generate(t, "pg-down-run", 51)
	a := newAcks()
	pushed := make(chan error, 1)
	go func() {
		_, err := push(ctx, s.URL(), plan, 32, float64(plan.Len())/20, nil, a.add)
		pushed <- err
	}()
	a.waitAcks(t, plan.Len()/5, pushed)
	before := s.Sink().Stats()
	pg.Stop(t)
	time.Sleep(30 * time.Second)
	during := s.Sink().Stats()
	pg.Start(t)
	if err := <-pushed; err != nil {
		t.Fatalf("push: %v", err)
	}
	if during.Failures == before.Failures {
		t.Errorf("the sink noticed nothing of the 30 s outage (stats before %+v, after %+v)", before, during)
	}
	t0 := time.Now()
	got := ledgertest.WaitDecisions(t, kc, ledgertest.Reference(t, kc), 2*time.Minute)
	t.Logf("projected after %v", time.Since(t0))
	waitStored(t, url, "live", kc)
	t.Logf("stored after %v", time.Since(t0))
	res, err := pgsink.Rebuild(ctx, pgsink.RebuildOptions{Kafka: kc, DatabaseURL: url, Schema: "clean"})
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	t.Logf("rebuilt after %v", time.Since(t0))
	ledgertest.SameTables(t, conn, "live", "clean", false)
	t.Logf("compared after %v", time.Since(t0))
	everyFactOnce(t, conn, "live", plan)
	after := s.Sink().Stats()
	t.Logf("30 s outage: %d failed sessions while down; %s; %d records, %d stored by the live sink after the restart",
		during.Failures-before.Failures, countKinds(got), res.Records, after.Records-during.Records)
}
