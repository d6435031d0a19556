package pgsink_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// storedOffsets sums the schema's consumed offsets: how far it got.
func storedOffsets(conn *pgx.Conn, schema string) (int64, error) {
	var n int64
	err := conn.QueryRow(context.Background(),
		"SELECT coalesce(sum(next_offset), 0) FROM "+pgx.Identifier{schema, "consumed_offsets"}.Sanitize()).Scan(&n)
	return n, err
}

// Kill -9 the sink at 12 random points while a run is ingested — some
// of them injected exactly between the writes and COMMIT — and crash and
// restart Postgres under a running sink. Afterwards every table holds
// exactly what a clean rebuild from the log holds: same rows, none twice.
func TestSinkSurvivesKill9AndPostgresRestart(t *testing.T) {
	kc := testenv.RealKafka(t)
	// A server of the test's own: other packages' tests use the shared one
	// while this one crashes it.
	pg := testenv.PrivatePostgres(t)
	url := pg.URL()
	const live = "live"
	if _, err := pgsink.Migrate(context.Background(), url, live, nil); err != nil {
		t.Fatal(err)
	}
	s := startLedger(t, kc, "", "")

	// The producer keeps facts arriving through the kill loop, as during a
	// live run.
	pushed := make(chan error, 1)
	go func() {
		o := small("crash-run", 11)
		o.URL, o.Workers, o.EventsPerRequest = s.URL(), 4, 48
		_, err := simulate.Run(context.Background(), o)
		pushed <- err
	}()

	var logs bytes.Buffer
	start := func(crashAfter int) (*exec.Cmd, chan error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+spec(kc, url, live, crashAfter))
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, exited
	}
	conn := connect(t, url)
	stored := func() int64 {
		n, err := storedOffsets(conn, live)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// advance waits until the sink stored at least n more records than
	// from, or exited, or the deadline passed; it reports whether the
	// sink exited.
	advance := func(from, n int64, exited chan error, d time.Duration) bool {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) && stored() < from+n {
			select {
			case err := <-exited:
				exited <- err
				return true
			case <-time.After(10 * time.Millisecond):
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return true
		default:
			return false
		}
	}

	rng := rand.New(rand.NewPCG(4, 2))
	kills, injected, restarted := 0, 0, false
	var progress []int64 // stored offsets after each kill
	for i := range 12 {
		crashAfter := 0
		if i%3 == 1 {
			crashAfter = 1 + rng.IntN(3)
		}
		from := stored()
		cmd, exited := start(crashAfter)
		// Each kill lands at a random point once this sink is storing.
		died := advance(from, int64(1+rng.IntN(300)), exited, 5*time.Second)
		if !died && i == 6 {
			// Crash Postgres under this sink, keep it down a moment while
			// facts go on arriving, and start it again: the same process
			// must reconnect and go on storing.
			conn.Close(context.Background())
			pg.Kill(t)
			select {
			case err := <-exited:
				t.Fatalf("the sink exited while Postgres was down: %v\n%s", err, logs.String())
			case <-time.After(time.Second):
			}
			pg.Start(t)
			conn = connect(t, url)
			before := stored()
			if died = advance(before, 50, exited, 20*time.Second); died || stored() <= before {
				t.Fatalf("the sink did not go on after the restart (exited %v, stored %d, before %d)\n%s", died, stored(), before, logs.String())
			}
			restarted = true
		}
		if died {
			<-exited
			injected++ // the child killed itself before a COMMIT
		} else {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			kills++
		}
		progress = append(progress, stored())
	}
	if err := <-pushed; err != nil {
		t.Fatalf("simulate: %v", err)
	}
	final, exited := start(0)
	defer func() {
		_ = final.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			t.Logf("sink output:\n%s", logs.String())
		}
	}()
	waitProjected(t, s, kc)
	waitStored(t, url, live, kc)

	// The reference: a rebuild from the log into a schema of its own.
	res, err := pgsink.Rebuild(context.Background(), pgsink.RebuildOptions{Kafka: kc, DatabaseURL: url, Schema: "clean"})
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.SameTables(t, conn, live, "clean", false)
	t.Logf("%d kills, %d injected crashes before COMMIT, a Postgres crash and restart; %d records; stored offsets after each kill %v",
		kills, injected, res.Records, progress)
	if kills+injected < 10 || injected < 2 || !restarted {
		t.Errorf("%d kills and %d injected crashes, restart %v: want 10 or more, 2 of them injected, and the restart", kills, injected, restarted)
	}
	if n := count(t, conn, live, "batches"); n < 3 {
		t.Errorf("%d batches stored; the test needs several to mean anything", n)
	}
	if last := progress[len(progress)-1]; last >= res.Records {
		t.Errorf("the kills were over before the sink stored anything new (%d of %d)", last, res.Records)
	}
}
