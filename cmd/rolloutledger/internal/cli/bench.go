package cli

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/bench"
)

func newBenchCmd(g *globals) *cobra.Command {
	var (
		kafkaLibs, only  string
		cpuProfile       string
		short, asJSON    bool
		runs, replayFact int
		python           string
		analystsFacts    int
		analystsBefore   bool
		analystsKeep     bool
		replayMemory     []int
		scaleFacts       []int
		scaleFormats     []string
		dbURL            func() string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the ledger against the best this machine can do, side by side",
		Long: `bench runs the benchmark suite against the real Kafka (--brokers) and Postgres
(--database-url) and prints one table: each figure's median over --runs runs,
min–max, unit, its goal and ratio where there is one, and the command that
reproduces it.

  ingest      POST /v1/events of 1 KiB and 16 KiB events and of 2K-token v2 turns
              (acks=all) beside Apache Kafka's ProducerPerformance with the same
              records on the same broker, and kafka-go's writer with the ingest's
              settings
  projection  events.Decode and the fold on one core; the projector from Kafka
  seal        seal latency p50/p99 at a steady 10,000 facts/s
  postgres    the pgsink beside psql \copy of the same rows into the same tables,
              for a payload-free run and for the same run with inline token turns
  replay      verify from an archive and from Kafka (--replay-facts), and the time
              for a FireFlash-scale run (50 M facts) extrapolated
  memory      projector resident memory vs groups in flight and run length
  tokens      the trainer's fetch of a batch into NumPy (Python SDK, --python)
              beside np.load; bytes per token in the facts log, Pebble and
              Postgres (the ingest of 2K-token turns is in the ingest group)
  proxy       the recording proxy's added latency (chat p50/p99, time to first
              chunk, delay between chunks) against the same llama-server asked
              the same requests, and the turns/s it sustains with its spool on
              (needs scripts/engine's llama-server and tiny model; skipped
              without them, a failure with CI=true)
  analysts    every query of docs/analysts.md over one run of --analysts-facts facts
              (only when named in --only: it loads tens of millions of rows)
  replay-memory  peak resident memory of replay --verify from an archive at
              --replay-memory run lengths (default 1 M and 10 M facts); runs
              only when named with --only or given --replay-memory

Everything runs under its own topic prefix and Postgres schemas, which are
removed at the end. --short runs tiny sizes once each, to check that every
figure runs (its numbers mean nothing).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bench.IsChild() {
				return bench.RunChild(cmd.Context(), g.stdout)
			}
			log, err := g.logger("text")
			if err != nil {
				return err
			}
			o := bench.Options{
				Brokers: kafkaConfigBrokers(cmd), DatabaseURL: dbURL(), KafkaLibs: kafkaLibs,
				Short: short, Runs: runs, ReplayFacts: replayFact, Python: python, ReplayMemory: replayMemory, ScaleFacts: scaleFacts, ScaleFormats: scaleFormats, Logger: log,
				AnalystsFacts: analystsFacts, AnalystsBefore: analystsBefore, AnalystsKeep: analystsKeep,
			}
			if only != "" {
				for s := range strings.SplitSeq(only, ",") {
					if s = strings.TrimSpace(s); s != "" {
						o.Only = append(o.Only, s)
					}
				}
			}
			if err := o.Validate(); err != nil {
				return &exitError{code: 2, err: err}
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(cmd.Context(), o)
			if rep == nil {
				return err
			}
			werr := rep.WriteTable
			if asJSON {
				werr = rep.WriteJSON
			}
			return errors.Join(werr(g.stdout), err)
		},
	}
	def := os.Getenv("KAFKA_BROKERS")
	if def == "" {
		def = "127.0.0.1:9092"
	}
	cmd.Flags().String("brokers", def, "Kafka bootstrap brokers, comma-separated (default $KAFKA_BROKERS)")
	dbURL = addDatabaseFlag(cmd)
	cmd.Flags().StringVar(&kafkaLibs, "kafka-libs", defaultKafkaLibs(), "directory of Apache Kafka's jars, for ProducerPerformance (default $KAFKA_LIBS, else .services/kafka/libs)")
	cmd.Flags().BoolVar(&short, "short", false, "tiny sizes, one run each: check that every figure runs (for CI)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().IntVar(&runs, "runs", 0, "runs per figure (default 3, 1 with --short)")
	cmd.Flags().IntVar(&replayFact, "replay-facts", 0, "approximate size of the replay run (default 3,000,000; 10,000 with --short)")
	cmd.Flags().IntVar(&analystsFacts, "analysts-facts", 0, "size of the run the analysts' queries are timed on (default 20,000,000; 200,000 with --short)")
	cmd.Flags().BoolVar(&analystsBefore, "analysts-before", false, "also time the analysts' queries through the views of migration 00002, over the same rows")
	cmd.Flags().BoolVar(&analystsKeep, "analysts-keep", false, "keep the Postgres schema of the analysts' run (logged) to query it by hand; drop it yourself")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	cmd.Flags().StringVar(&python, "python", "python3", "Python interpreter with the SDK, NumPy and pyarrow, for the trainer-fetch figure")
	cmd.Flags().IntSliceVar(&replayMemory, "replay-memory", nil, "run lengths in facts for the replay-memory figure, comma-separated (default 1000000,10000000)")
	cmd.Flags().IntSliceVar(&scaleFacts, "scale-facts", nil, "the two run lengths in facts of the scale figures, smaller first (default 1000000,10000000; 50000,200000 with --short)")
	cmd.Flags().StringSliceVar(&scaleFormats, "scale-formats", nil, "export formats the scale figures run, comma-separated (default all)")
	cmd.Flags().StringVar(&only, "only", "", "figure groups, comma-separated: "+strings.Join(bench.Groups, ",")+" (and "+bench.GroupReplayMemory+")")
	return cmd
}

func kafkaConfigBrokers(cmd *cobra.Command) []string {
	v, _ := cmd.Flags().GetString("brokers")
	var out []string
	for b := range strings.SplitSeq(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func defaultKafkaLibs() string {
	for _, env := range []string{"KAFKA_LIBS", "ROLLOUTLEDGER_KAFKA_LIBS"} {
		if d := os.Getenv(env); d != "" {
			return d
		}
	}
	return filepath.Join(".services", "kafka", "libs")
}
