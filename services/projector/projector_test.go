package projector_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/projector"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The test binary doubles as the projector process the crash test kills:
// with childEnv set it runs a projector until it is killed or interrupted.
const childEnv = "ROLLOUTLEDGER_TEST_PROJECTOR_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild runs a projector from a "brokers|prefix|dir|crashAfterEmits"
// spec, folding small windows so that a run makes many commits to crash
// between.
func runChild(spec string) int {
	parts := strings.Split(spec, "|")
	crashAfter, err := strconv.Atoi(parts[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: crash after:", err)
		return 1
	}
	kc := kafkalog.Config{Brokers: strings.Split(parts[0], ","), TopicPrefix: parts[1]}
	// The parent times its kills from the first committed window, logged on
	// stderr at debug level.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: parts[2], Window: 64, Logger: log, CrashAfterEmits: crashAfter})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = p.Run(ctx)
	p.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// ingestRuns pushes simulated runs through an in-process ingest.
func ingestRuns(t *testing.T, kc kafkalog.Config, opts ...simulate.Options) {
	t.Helper()
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	for _, o := range opts {
		o.URL = s.URL()
		if _, err := simulate.Run(context.Background(), o); err != nil {
			t.Fatalf("simulate %s: %v", o.Run, err)
		}
	}
}

func small(run string, seed uint64) simulate.Options {
	return simulate.Options{Run: run, Seed: seed, Tasks: 24, Steps: 3, BatchGroups: 4, Workers: 4, MaxTurns: 60}
}

// Kill -9 the projector at 20+ random points while a run is ingested,
// restarting it each time on the same state; some kills land exactly
// between the decisions' acknowledgment and the state commit. The
// decisions on the topic, identical duplicates dropped, must equal an
// uninterrupted fold's, byte for byte.
func TestProjectorSurvivesKill9(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "state")
			spec := strings.Join(kc.Brokers, ",") + "|" + kc.TopicPrefix + "|" + dir
			rng := rand.New(rand.NewPCG(42, 7))

			// One producer in small requests at a steady pace: facts keep
			// arriving for the whole kill loop, as they do during a live
			// run, however fast this machine ingests (about 45 s a run).
			slow := func(run string, seed uint64) simulate.Options {
				o := small(run, seed)
				o.Workers, o.EventsPerRequest, o.Rate = 1, 32, 150
				return o
			}
			pushed := make(chan struct{})
			go func() {
				defer close(pushed)
				ingestRuns(t, kc, slow("crash-a", 11), slow("crash-b", 12))
			}()

			var logs testenv.LogBuffer
			start := func(crashAfter int) (*exec.Cmd, <-chan struct{}) {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"="+spec+"|"+strconv.Itoa(crashAfter))
				ready := &readyWriter{w: &logs, mark: `msg="window committed"`, ready: make(chan struct{})}
				cmd.Stdout, cmd.Stderr = &logs, ready
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd, ready.ready
			}
			kills, injected := 0, 0
			for i := 0; i < 24; i++ {
				crashAfter := 0
				if i%2 == 1 {
					crashAfter = 1 + rng.IntN(2)
				}
				cmd, ready := start(crashAfter)
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				// Kill at a random moment after the child started
				// consuming, however long starting took on a loaded machine.
				var after <-chan time.Time
				select {
				case <-exited:
					injected++
					continue
				case <-ready:
					after = time.After(time.Duration(20+rng.IntN(400)) * time.Millisecond)
					if crashAfter > 0 {
						// Let it live until it kills itself between emit
						// and commit, as long as decisions keep coming.
						after = time.After(15 * time.Second)
					}
				case <-time.After(5 * time.Second):
					// Nothing to fold (caught up): kill it idle.
					after = time.After(0)
				}
				select {
				case <-exited:
					injected++ // the child killed itself at the injected point
				case <-after:
					_ = cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					kills++
				}
			}
			<-pushed
			want := ledgertest.Reference(t, kc)
			final, _ := start(0)
			defer func() {
				_ = final.Process.Signal(os.Interrupt)
				_ = final.Wait()
				if t.Failed() {
					t.Logf("projector output:\n%s", logs.String())
				}
			}()
			var got map[string][]byte
			var records int
			// However long catching up takes on a loaded machine, as long as
			// the projector keeps committing windows.
			testenv.CheckProgress(t, 90*time.Second, "the restarted projector catches up", func() (bool, int64) {
				got, records = ledgertest.Decisions(t, kc)
				return len(got) >= len(want), int64(strings.Count(logs.String(), `msg="window committed"`))
			})
			ledgertest.SameDecisions(t, got, want)
			t.Logf("%d kills, %d injected crashes between emit and commit; %d decisions, %d records (duplicates from re-emission: %d)",
				kills, injected, len(want), records, records-len(got))
			if kills+injected < 20 {
				t.Errorf("only %d crashes, want at least 20", kills+injected)
			}
			if injected < 3 || records == len(got) {
				t.Errorf("%d injected crashes and %d re-emitted decisions: no crash hit the instant between emit and commit", injected, records-len(got))
			}
			var sealed int
			for _, v := range want {
				if bytes.Contains(v, []byte(`"type":"batch.sealed"`)) {
					sealed++
				}
			}
			if sealed < 4 {
				t.Errorf("the run sealed only %d batches; the test needs several to mean anything", sealed)
			}
		})
	}
}

// Two projector instances, each owning half the partitions, decide exactly
// what one instance (the offline fold) decides.
func TestTwoInstancesSplitPartitions(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
				t.Fatal(err)
			}
			runs := []string{"split-a", "split-b", "split-c", "split-d", "split-e"}
			var opts []simulate.Options
			for i, r := range runs {
				o := small(r, uint64(20+i))
				o.Tasks, o.Steps = 16, 2
				opts = append(opts, o)
			}
			ingestRuns(t, kc, opts...)
			ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
			if err != nil {
				t.Fatal(err)
			}
			halves := [2][]int{}
			used := [2]bool{}
			for p := range len(ends) {
				h := p % 2
				halves[h] = append(halves[h], p)
				if ends[p] > 0 {
					used[h] = true
				}
			}
			if !used[0] || !used[1] {
				t.Fatalf("runs %v all landed in one half of the partitions %v; pick other names", runs, ends)
			}
			want := ledgertest.Reference(t, kc)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 2)
			for i, h := range halves {
				p, err := projector.Open(projector.Options{Kafka: kc, Dir: filepath.Join(t.TempDir(), fmt.Sprint(i)), Partitions: slices.Clone(h)})
				if err != nil {
					t.Fatal(err)
				}
				go func() { done <- p.Run(ctx); p.Close() }()
			}
			var got map[string][]byte
			testenv.CheckFor(t, 60*time.Second, "both instances catch up", func() bool {
				got, _ = ledgertest.Decisions(t, kc)
				return len(got) >= len(want)
			})
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					t.Errorf("instance: %v", err)
				}
			}
			ledgertest.SameDecisions(t, got, want)
		})
	}
}

// readyWriter passes output on and closes ready at the first write that
// contains mark.
type readyWriter struct {
	w     io.Writer
	mark  string
	once  sync.Once
	ready chan struct{}
}

func (r *readyWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(r.mark)) {
		r.once.Do(func() { close(r.ready) })
	}
	return r.w.Write(p)
}
