package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

func newDemoCmd(g *globals) *cobra.Command {
	var data string
	var keep, stay bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run dev, drive it with a small simulated run, read it back and summarize: the first command to try",
		Long: `demo starts the embedded stack on free loopback ports, pushes a small seeded
FireFlash-shaped run through the HTTP API, reads every fact back from Kafka,
and prints what the ledger holds. It needs nothing installed.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&data, "data", "", "directory for the demo's data (default: a temporary directory, removed afterwards)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the data directory afterwards")
	cmd.Flags().BoolVar(&stay, "stay", false, "keep serving the explorer (and the API) after the demo, until interrupted")
	// Six steps with max_staleness 3: a short run whose batches show
	// masked turns (the recipe's 6 needs longer runs to bite).
	sf := addSimFlags(cmd, simulate.Options{Seed: 1, Trainer: true, Steps: 6, MaxStaleness: 3, Text: true})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		g.logLevel = "warn"
		log, err := g.logger("text")
		if err != nil {
			return err
		}
		if data == "" {
			if data, err = os.MkdirTemp("", "rolloutledger-demo-"); err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(data)
			}
		}
		return runDemo(cmd.Context(), g.stdout, log, data, sf.options(cmd), stay)
	}
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, log *slog.Logger, data string, so simulate.Options, stay bool) error {
	start := time.Now()
	d, err := startDev(ctx, devOptions{Addr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", Data: data, TopicPrefix: kafkalog.DefaultTopicPrefix, Partitions: 12, Logger: log})
	if err != nil {
		return err
	}
	defer d.close(30 * time.Second)
	fmt.Fprintf(out, "rolloutledger demo\n  embedded Kafka at %s, HTTP at %s, data in %s (up in %s)\n",
		d.broker.Addr(), d.stack.URL(), data, time.Since(start).Round(time.Millisecond))

	so.URL, so.Logger = d.stack.URL(), log
	res, err := simulate.Run(ctx, so)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	r := so.WithDefaults()
	fmt.Fprintf(out, "  run config: batches of %d groups of %d attempts, max_staleness %d (the recipe's is 6; a short run needs a lower one to show masking)\n",
		r.BatchGroups, r.GroupSize, r.MaxStaleness)
	fmt.Fprintf(out, "  simulated run %s (seed %d): %d events in %d requests, %d retries, %.2fs: %.0f events/s acknowledged by Kafka\n\n",
		res.Run, so.Seed, res.Events, res.Requests, res.Retries, res.Duration.Seconds(), float64(res.Events)/res.Duration.Seconds())

	s, err := summarize(ctx, d.kafka)
	if err != nil {
		return err
	}
	s.print(out)
	if len(res.Steps) > 0 {
		fmt.Fprintf(out, "\nbatches the trainer consumed (GET /v1/runs/%s/batches/next), answered with gradient.applied and policy.published\n", res.Run)
		printSteps(out, res.Steps)
	}
	if s.total != res.Events || s.distinct != res.Events {
		return &exitError{code: 1, err: fmt.Errorf("read back %d records (%d distinct ids) but %d events were acknowledged", s.total, s.distinct, res.Events)}
	}
	fmt.Fprintf(out, "\nverified: each of the %d acknowledged events is in %s exactly once, in its run's partition.\n", res.Events, d.kafka.FactsTopic())
	if err := demoReplay(ctx, out, d, res.Run); err != nil {
		return err
	}
	if err := demoPostgres(ctx, out, d, res.Run); err != nil {
		return err
	}
	fmt.Fprintf(out, "explorer: %s/ui/#/runs/%s\n", d.stack.URL(), res.Run)
	fmt.Fprintf(out, "done in %s\n", time.Since(start).Round(time.Millisecond))
	if stay {
		fmt.Fprintln(out, "serving the explorer until interrupted (--stay)")
		<-ctx.Done()
	} else {
		fmt.Fprintln(out, "  (the explorer is served while demo runs: add --stay to keep it open)")
	}
	return nil
}

// printSteps prints one line per trainer step: what the batch held, what
// was dropped and why, how stale its turns were.
func printSteps(out io.Writer, steps []simulate.TrainerStep) {
	fmt.Fprintf(out, "  %4s %6s %-34s %7s %6s %9s  %s\n", "step", "groups", "dropped", "masked", "pass", "tok/solve", "staleness (turns)  in-flight / in-queue (attempts)")
	for _, st := range steps {
		var drops []string
		for _, r := range []string{"zero_signal", "infra_lost", "unadmitted", "fully_stale"} {
			if n := st.Dropped[r]; n > 0 {
				drops = append(drops, fmt.Sprintf("%s %d", r, n))
			}
		}
		dropped := strings.Join(drops, ", ")
		if dropped == "" {
			dropped = "-"
		}
		fmt.Fprintf(out, "  %4d %6d %-34s %6.1f%% %5.0f%% %9.0f  %s  %s / %s\n", st.Step, st.Groups, dropped,
			100*st.MaskedFraction(), 100*st.PassRate, st.TokensPerSolve, histogram(st.Staleness), histogram(st.InFlight), histogram(st.InQueue))
	}
	var partly int
	var trained, masked int64
	for _, st := range steps {
		partly += st.PartlyTrainedTurns
		trained += st.TrainedTokens
		masked += st.MaskedTokens
	}
	if total := trained + masked; total > 0 {
		fmt.Fprintf(out, "  turns partly trained: %d (they span a weight update; only their stale version segments are masked); tokens masked by segment: %d of %d (%.1f%%)\n",
			partly, masked, total, 100*float64(masked)/float64(total))
	}
}

// histogram prints a {"value": count} map in numeric order of its values.
func histogram(h map[string]int) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + strconv.Itoa(h[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// summary is what the facts topic holds.
type summary struct {
	topic    string
	byType   map[string]int
	byRun    map[string]int
	runPart  map[string]map[int]bool
	ends     map[int]int64
	total    int
	distinct int
}

func summarize(ctx context.Context, kc kafkalog.Config) (*summary, error) {
	s := &summary{topic: kc.FactsTopic(), byType: map[string]int{}, byRun: map[string]int{}, runPart: map[string]map[int]bool{}}
	ids := map[string]bool{}
	err := kafkalog.ReadAll(ctx, kc, kc.FactsTopic(), func(m kafkalog.Message) error {
		ev, err := events.Decode(m.Value)
		if err != nil {
			return fmt.Errorf("record %d/%d: %w", m.Partition, m.Offset, err)
		}
		s.total++
		ids[ev.ID] = true
		s.byType[string(ev.Type)]++
		s.byRun[ev.Run]++
		if s.runPart[ev.Run] == nil {
			s.runPart[ev.Run] = map[int]bool{}
		}
		s.runPart[ev.Run][m.Partition] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.distinct = len(ids)
	if s.ends, err = kafkalog.EndOffsets(ctx, kc, kc.FactsTopic()); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *summary) print(out io.Writer) {
	fmt.Fprintln(out, "facts by type")
	for _, t := range events.FactTypes() {
		fmt.Fprintf(out, "  %-20s %9d\n", t, s.byType[string(t)])
	}
	fmt.Fprintf(out, "  %-20s %9d\n", "total", s.total)
	fmt.Fprintln(out, "\nruns")
	runs := make([]string, 0, len(s.byRun))
	for r := range s.byRun {
		runs = append(runs, r)
	}
	slices.Sort(runs)
	for _, r := range runs {
		var parts []int
		for p := range s.runPart[r] {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		fmt.Fprintf(out, "  %-20s %9d facts in partition %v\n", r, s.byRun[r], parts)
	}
	fmt.Fprintf(out, "\n%s end offsets by partition\n ", s.topic)
	for p := 0; p < len(s.ends); p++ {
		fmt.Fprintf(out, " %d:%d", p, s.ends[p])
	}
	fmt.Fprintln(out)
}
