package pgsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The test binary doubles as the sink process the crash test kills: with
// childEnv set to a JSON childSpec it runs a sink until it is killed or
// interrupted.
const childEnv = "ROLLOUTLEDGER_TEST_PGSINK_CHILD"

type childSpec struct {
	Brokers     []string
	Prefix      string
	DatabaseURL string
	Schema      string
	// CrashAfter is the sink's CrashAfterWindows.
	CrashAfter int
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	// Small windows and short backoffs: many commits to die between, and
	// quick reconnection while the server restarts.
	s, err := pgsink.New(pgsink.Options{
		Kafka:       kafkalog.Config{Brokers: c.Brokers, TopicPrefix: c.Prefix},
		DatabaseURL: c.DatabaseURL, Schema: c.Schema, Window: 64,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		CrashAfterWindows: c.CrashAfter,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// small is a short simulated run with a trainer: a few batches, probes,
// drops, compactions, tool calls and infra failures.
// small is a version 1 run: batch_turns keeps a turn's first version
// segment only, so the staleness views count turns, where rule version 2
// manifests count the segments of turns that span a weight update
// (docs/design.md §18.7); the views match the manifests for runs of one
// segment per turn.
func small(run string, seed uint64) simulate.Options {
	return simulate.Options{Run: run, Seed: seed, Tasks: 24, Steps: 3, BatchGroups: 4, MaxTurns: 60, Trainer: true, FactVersion: 1}
}

// startLedger runs ingest, projector and api over kc, and the pgsink into
// schema when url is not empty, until the test ends.
func startLedger(t *testing.T, kc kafkalog.Config, url, schema string) *stack.Stack {
	s, _ := startLedgerStop(t, kc, url, schema)
	return s
}

// startLedgerStop is startLedger with a function that stops it earlier.
func startLedgerStop(t *testing.T, kc kafkalog.Config, url, schema string) (*stack.Stack, func()) {
	t.Helper()
	o := stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: schema}
	if url == "" {
		o.Only = []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}
	}
	s, err := stack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = s.Shutdown(context.Background()) }) }
	t.Cleanup(stop)
	return s, stop
}

// waitProjected waits until the projector has folded every fact written
// so far, so that the decisions topic holds every decision about them.
func waitProjected(t *testing.T, s *stack.Stack, kc kafkalog.Config) {
	t.Helper()
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 60*time.Second, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})
}

// waitStored waits until schema holds every record of both topics.
func waitStored(t *testing.T, url, schema string, kc kafkalog.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pgsink.WaitCaughtUp(ctx, url, schema, kc); err != nil {
		t.Fatal(err)
	}
}

// theLog is what the topics hold, identical duplicates dropped.
type theLog struct {
	facts     map[events.Type]map[string]events.Event // by type, by id
	byRun     map[string][]projections.Record
	decisions map[events.Type]map[string]projections.Envelope
	records   int
}

func readLog(t *testing.T, kc kafkalog.Config) *theLog {
	t.Helper()
	l := &theLog{facts: map[events.Type]map[string]events.Event{}, byRun: map[string][]projections.Record{},
		decisions: map[events.Type]map[string]projections.Envelope{}}
	ctx := context.Background()
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		l.records++
		ev, err := events.Decode(m.Value)
		if err != nil {
			return err
		}
		if l.facts[ev.Type] == nil {
			l.facts[ev.Type] = map[string]events.Event{}
		}
		if _, dup := l.facts[ev.Type][ev.ID]; !dup {
			l.facts[ev.Type][ev.ID] = ev
		}
		l.byRun[ev.Run] = append(l.byRun[ev.Run], projections.Record{Value: m.Value, Event: ev, Partition: int32(m.Partition), Offset: m.Offset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = kafkalog.ReadAll(ctx, kc, kc.DecisionsTopic(), func(m kafkalog.Message) error {
		l.records++
		var env projections.Envelope
		if err := json.Unmarshal(m.Value, &env); err != nil {
			return err
		}
		if l.decisions[env.Type] == nil {
			l.decisions[env.Type] = map[string]projections.Envelope{}
		}
		l.decisions[env.Type][env.ID] = env
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func count(t *testing.T, conn *pgx.Conn, schema, table string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("count %s.%s: %v", schema, table, err)
	}
	return n
}

// spec encodes a child sink's configuration.
func spec(kc kafkalog.Config, url, schema string, crashAfter int) string {
	b, _ := json.Marshal(childSpec{Brokers: kc.Brokers, Prefix: kc.TopicPrefix, DatabaseURL: url, Schema: schema, CrashAfter: crashAfter})
	return string(b)
}
