// Package bench measures the ledger against the best this machine can do,
// side by side in one run: ingest against Apache Kafka's own producer
// benchmark on the same broker, the Postgres sink against psql's \copy of
// the same rows, replay against its goal, seal latency at a steady load and
// the projector's memory as a run grows. `rolloutledger bench` runs it and
// prints one table; BENCHMARKS.md reads it.
//
// Every figure runs Runs times and reports the median, min and max. A
// figure measured against a baseline in the same run reports the median of
// the per-run ratios, so a noisy machine moves both sides together.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/replay/dataset"
)

// Groups of figures, selected by Options.Only.
const (
	GroupIngest     = "ingest"
	GroupProjection = "projection"
	GroupSeal       = "seal"
	GroupPostgres   = "postgres"
	GroupReplay     = "replay"
	GroupMemory     = "memory"
	GroupTokens     = "tokens"
	// GroupAnalysts times docs/analysts.md's queries over a FireFlash-size
	// run; it loads tens of millions of rows, so it runs only when named.
	GroupAnalysts = "analysts"
)

// Groups lists every group in the order the table shows them.
var Groups = []string{GroupIngest, GroupProjection, GroupSeal, GroupPostgres, GroupReplay, GroupMemory, GroupTokens, GroupProxy, GroupAnalysts, GroupScale}

// Options configure a benchmark run.
type Options struct {
	// Brokers are Kafka's bootstrap brokers.
	Brokers []string
	// DatabaseURL is the Postgres the sink figures write to; empty skips
	// them with a note.
	DatabaseURL string
	// KafkaLibs is the directory of Apache Kafka's jars (kafka-tools and
	// its dependencies), for ProducerPerformance; empty or missing skips
	// that baseline with a note.
	KafkaLibs string
	// Java is the java binary [java].
	Java string
	// Psql is the psql binary [psql].
	Psql string
	// Short runs tiny sizes once each: it checks that every figure runs.
	Short bool
	// Runs is how many times each figure runs [3; 1 with Short].
	Runs int
	// Only selects groups; empty means all.
	Only []string
	// ReplayFacts is the approximate size of the replay run [3,000,000;
	// ~10,000 with Short].
	ReplayFacts int
	// AnalystsFacts is the size of the run the analysts' queries are
	// timed on [20,000,000; 200,000 with Short].
	AnalystsFacts int
	// AnalystsBefore also times them through the views of migration 00002.
	AnalystsBefore bool
	// AnalystsKeep keeps the schema holding the loaded run (and the
	// views of 00002 with AnalystsBefore), to query it by hand.
	AnalystsKeep bool
	// ScaleFacts are the two run lengths, in facts, of the scale figures
	// [1,000,000 and 10,000,000; 50,000 and 200,000 with Short].
	ScaleFacts []int
	// ScaleFormats are the export formats the scale figures run [all].
	ScaleFormats []string
	// ReplayMemory are the run lengths, in facts, of the replay memory
	// figure (GroupReplayMemory) [1,000,000 and 10,000,000; 20,000 and
	// 40,000 with Short]; setting them runs it.
	ReplayMemory []int
	// Command is how the report names the command that reproduces a
	// figure, e.g. "rolloutledger bench".
	Command string
	// Executable runs the memory figure's child process; empty means this
	// process's own executable.
	Executable string
	// Python is the interpreter that runs the trainer-fetch figure, with
	// the SDK, NumPy and pyarrow installed [python3].
	Python string
	// FetchScript is the SDK's fetch benchmark
	// [sdk/python/bench/fetch_samples.py, from the repository's root].
	FetchScript string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Runs <= 0 {
		o.Runs = 3
		if o.Short {
			o.Runs = 1
		}
	}
	if o.Java == "" {
		o.Java = "java"
	}
	if o.Psql == "" {
		o.Psql = "psql"
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.FetchScript == "" {
		o.FetchScript = filepath.Join("sdk", "python", "bench", "fetch_samples.py")
	}
	if o.ReplayFacts <= 0 {
		o.ReplayFacts = 3_000_000
		if o.Short {
			o.ReplayFacts = 10_000
		}
	}
	if o.AnalystsFacts <= 0 {
		o.AnalystsFacts = 20_000_000
		if o.Short {
			o.AnalystsFacts = 200_000
		}
	}
	if o.Command == "" {
		o.Command = "rolloutledger bench"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if len(o.Brokers) == 0 {
		errs = append(errs, errors.New("bench: no Kafka brokers (--brokers or $KAFKA_BROKERS)"))
	}
	if len(o.ScaleFacts) != 0 && (len(o.ScaleFacts) != 2 || o.ScaleFacts[0] <= 0 || o.ScaleFacts[1] <= o.ScaleFacts[0]) {
		errs = append(errs, fmt.Errorf("bench: --scale-facts %v: want two run lengths, the smaller first", o.ScaleFacts))
	}
	for _, f := range o.ScaleFormats {
		if !slices.Contains(dataset.Formats, f) {
			errs = append(errs, fmt.Errorf("bench: --scale-formats: unknown format %q (want some of %s)", f, strings.Join(dataset.Formats, ",")))
		}
	}
	for _, g := range o.Only {
		if !slices.Contains(Groups, g) && g != GroupReplayMemory {
			errs = append(errs, fmt.Errorf("bench: unknown figure group %q (want some of %s)", g, strings.Join(append(slices.Clone(Groups), GroupReplayMemory), ",")))
		}
	}
	return errors.Join(errs...)
}

func (o Options) wants(group string) bool {
	if group == GroupAnalysts {
		return slices.Contains(o.Only, group)
	}
	if group == GroupScale {
		// Its full sizes take an hour or more: with Short (small sizes)
		// it is one of all, otherwise it runs when named.
		return slices.Contains(o.Only, group) || o.Short && len(o.Only) == 0
	}
	if group == GroupReplayMemory {
		return slices.Contains(o.Only, group) || len(o.ReplayMemory) > 0 && len(o.Only) == 0
	}
	return len(o.Only) == 0 || slices.Contains(o.Only, group)
}

// Figure is one line of the table.
type Figure struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Unit  string `json:"unit"`
	// Runs holds each run's value; Median, Min and Max summarize them.
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// Goal is the target, when there is one, e.g. ">= 70% of
	// kafka-producer-perf-test"; Ratio is the median measured against it
	// (a fraction of the baseline, or of the goal), and Met says whether
	// it is reached.
	Goal  string   `json:"goal,omitempty"`
	Ratio *float64 `json:"ratio,omitempty"`
	Met   *bool    `json:"met,omitempty"`
	// Command reproduces the figure.
	Command string `json:"command"`
	// Note says what the figure is, or why it was skipped.
	Note    string `json:"note,omitempty"`
	Skipped bool   `json:"skipped,omitempty"`

	// link sets the goal once every figure of the group is summarized.
	link func(map[string]*Figure)
}

func (f *Figure) summarize() {
	if len(f.Runs) == 0 {
		return
	}
	f.Median, f.Min, f.Max = summary(f.Runs)
}

func summary(xs []float64) (med, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// against sets f's ratio to the median of the per-run ratios to the
// baseline's runs, and whether it reaches want.
func (f *Figure) against(base *Figure, want float64, goal string) {
	f.Goal = goal
	if base == nil || base.Skipped || len(base.Runs) == 0 || len(f.Runs) == 0 {
		return
	}
	var rs []float64
	for i := range min(len(f.Runs), len(base.Runs)) {
		if base.Runs[i] > 0 {
			rs = append(rs, f.Runs[i]/base.Runs[i])
		}
	}
	if len(rs) == 0 {
		return
	}
	r, _, _ := summary(rs)
	f.setRatio(r, r >= want)
}

// goalAtLeast compares f's median with a fixed goal.
func (f *Figure) goalAtLeast(goal float64, text string) {
	f.Goal = text
	if len(f.Runs) > 0 {
		f.setRatio(f.Median/goal, f.Median >= goal)
	}
}

// goalAtMost compares f's median with a ceiling; the ratio is median/goal.
func (f *Figure) goalAtMost(goal float64, text string) {
	f.Goal = text
	if len(f.Runs) > 0 {
		f.setRatio(f.Median/goal, f.Median <= goal)
	}
}

func (f *Figure) setRatio(r float64, met bool) {
	f.Ratio, f.Met = &r, &met
}

// Report is a whole run's result.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Short    bool      `json:"short"`
	Runs     int       `json:"runs"`
	Machine  Machine   `json:"machine"`
	// Prefix names the run's topics (<Prefix>-<n>-<figure>.facts) and
	// Postgres schemas (<Prefix with _>_<n>), all removed at the end.
	Prefix  string    `json:"prefix"`
	Figures []*Figure `json:"figures"`
}

// Run measures the selected figures. A group that fails is reported as a
// skipped line of the table and in the error, which comes with the report
// of everything else.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	rep := &Report{Started: time.Now().UTC(), Short: o.Short, Runs: o.Runs}
	rep.Machine = describeMachine(ctx, o)
	e := &env{o: o, log: o.Logger, prefix: "bench-" + randomHex(4)}
	rep.Prefix = e.prefix
	defer e.cleanup()
	steps := []struct {
		group string
		run   func(context.Context, *env) ([]*Figure, error)
	}{
		{GroupIngest, ingestFigures},
		{GroupProjection, projectionFigures},
		{GroupSeal, sealFigures},
		{GroupPostgres, postgresFigures},
		{GroupReplay, replayFigures},
		{GroupMemory, memoryFigures},
		{GroupTokens, tokenFigures},
		{GroupProxy, proxyFigures},
		{GroupAnalysts, analystsFigures},
		{GroupScale, scaleFigures},
		{GroupReplayMemory, replayMemoryFigures},
	}
	var failed []error
	for _, s := range steps {
		if ctx.Err() != nil {
			break
		}
		if !o.wants(s.group) {
			continue
		}
		e.log.Info("measuring", "group", s.group)
		t0 := time.Now()
		figs, err := s.run(ctx, e)
		if err != nil {
			// One group's failure does not cost the others' figures: it is
			// a line of the table, and Run's error.
			err = fmt.Errorf("bench %s: %w", s.group, err)
			failed = append(failed, err)
			e.log.Error("figure group failed", "group", s.group, "err", err)
			figs = []*Figure{{Name: s.group + " (failed)", Skipped: true, Command: e.cmd(s.group), Note: err.Error()}}
		}
		for _, f := range figs {
			f.Group = s.group
			f.summarize()
		}
		e.finishGoals(figs)
		rep.Figures = append(rep.Figures, figs...)
		e.log.Info("measured", "group", s.group, "took", time.Since(t0).Round(time.Millisecond))
	}
	rep.Duration = time.Since(rep.Started).Round(time.Millisecond).String()
	if err := ctx.Err(); err != nil {
		failed = append(failed, err)
	}
	return rep, errors.Join(failed...)
}

// env is what the figures share: the options, a unique topic prefix
// stem, and what to remove at the end.
type env struct {
	o      Options
	log    *slog.Logger
	prefix string
	n      int
	topics []string
	drop   []string // Postgres schemas
}

// kafka returns a fresh topic layout under the run's prefix.
func (e *env) kafka(name string, partitions int) kafkalog.Config {
	e.n++
	c := kafkalog.Config{Brokers: e.o.Brokers, TopicPrefix: fmt.Sprintf("%s-%d-%s", e.prefix, e.n, name), Partitions: partitions}
	e.topics = append(e.topics, c.FactsTopic(), c.DecisionsTopic())
	return c
}

func (e *env) cmd(only string, extra ...string) string {
	c := e.o.Command + " --only " + only
	if e.o.Short {
		c += " --short"
	}
	if only == GroupScale && len(e.o.ScaleFacts) == 2 {
		c += fmt.Sprintf(" --scale-facts %d,%d", e.o.ScaleFacts[0], e.o.ScaleFacts[1])
	}
	if only == GroupScale && len(e.o.ScaleFormats) > 0 {
		c += " --scale-formats " + strings.Join(e.o.ScaleFormats, ",")
	}
	return strings.Join(append([]string{c}, extra...), " ")
}

// cleanup deletes the run's topics and schemas.
func (e *env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(e.topics) > 0 {
		if err := kafkalog.DeleteTopics(ctx, kafkalog.Config{Brokers: e.o.Brokers}, e.topics...); err != nil {
			e.log.Warn("could not delete the benchmark's topics", "err", err)
		}
	}
	if len(e.drop) > 0 {
		if err := dropSchemas(ctx, e.o.DatabaseURL, e.drop); err != nil {
			e.log.Warn("could not drop the benchmark's schemas", "err", err)
		}
	}
}

func (e *env) finishGoals(figs []*Figure) {
	byName := map[string]*Figure{}
	for _, f := range figs {
		byName[f.Name] = f
	}
	for _, f := range figs {
		if f.link != nil {
			f.link(byName)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
