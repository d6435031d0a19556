package cli

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
)

// simFlags are the simulator's scale flags, shared by simulate and demo.
type simFlags struct {
	o simulate.Options
}

func addSimFlags(cmd *cobra.Command, defaults simulate.Options) *simFlags {
	s := &simFlags{o: defaults}
	f := cmd.Flags()
	f.Uint64Var(&s.o.Seed, "seed", defaults.Seed, "seed: event content is a pure function of it and the scale flags")
	f.StringVar(&s.o.Run, "run", defaults.Run, "run id (default sim-<seed>-<random>)")
	f.IntVar(&s.o.Tasks, "tasks", defaults.Tasks, "tasks registered and probed (0 = default 48)")
	f.IntVar(&s.o.Steps, "steps", defaults.Steps, "trainer steps worth of train groups (0 = default 4)")
	f.IntVar(&s.o.BatchGroups, "batch-groups", defaults.BatchGroups, "groups per batch, written into the run config (0 = default 8)")
	f.IntVar(&s.o.MaxStaleness, "max-staleness", defaults.MaxStaleness, "run config max_staleness (0 = default 6, negative = 0)")
	f.IntVar(&s.o.GroupSize, "group-size", defaults.GroupSize, "attempts per train group (0 = default 8)")
	f.IntVar(&s.o.Workers, "workers", defaults.Workers, "concurrent HTTP producers (0 = default 8)")
	f.IntVar(&s.o.MinTurns, "min-turns", defaults.MinTurns, "fewest turns of an attempt (0 = default 5)")
	f.IntVar(&s.o.MaxTurns, "max-turns", defaults.MaxTurns, "most turns of an attempt (0 = default 200)")
	f.Float64Var(&s.o.InfraFailureRate, "infra-failure-rate", defaults.InfraFailureRate, "fraction of attempts lost to infrastructure (0 = default 0.03)")
	f.BoolVar(&s.o.Tokens, "tokens", defaults.Tokens, "inline token ids and logprobs in turns (about 10 bytes a token, base64 little-endian)")
	f.BoolVar(&s.o.Text, "text", defaults.Text, "readable text: task prompts, completion text, tool input and output (each kept to 2 KiB, the rest counted as cut)")
	f.IntVar(&s.o.FactVersion, "fact-version", defaults.FactVersion, "catalogue version of the facts: 0 = newest (2), 1 = version 1 (one policy version per turn, no text)")
	f.BoolVar(&s.o.Trainer, "trainer", defaults.Trainer, "run a trainer stand-in that consumes sealed batches over HTTP and publishes the policy versions")
	f.Float64Var(&s.o.Rate, "rate", defaults.Rate, "cap the push at this many events per second (0 = as fast as the ledger takes them)")
	f.IntVar(&s.o.EventsPerRequest, "events-per-request", defaults.EventsPerRequest, "events per POST (0 = default 256)")
	return s
}

// options are the flags' options: version 1 facts hold no text, so
// --fact-version 1 turns the default --text off (an explicit --text stays,
// and is refused).
func (s *simFlags) options(cmd *cobra.Command) simulate.Options {
	o := s.o
	if o.FactVersion == 1 && !cmd.Flags().Changed("text") {
		o.Text = false
	}
	return o
}

func newSimulateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Drive a running ledger over HTTP with a FireFlash-shaped synthetic run; prints the run id",
		Args:  cobra.NoArgs,
	}
	var url string
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7070", "base URL of the ledger")
	var write string
	cmd.Flags().StringVar(&write, "write", "", "write the run's facts to this file as NDJSON (one canonical record a line; - for stdout) instead of pushing them; generated as written, in flat memory")
	sf := addSimFlags(cmd, simulate.Options{Seed: 1, Text: true})
	// The simulator writes the trainer's facts as well as the rollout side's,
	// so against a ledger with tokens it needs an admin token.
	cmd.Flags().StringVar(&sf.o.Token, "token", "", "bearer token sent with every request (default $ROLLOUTLEDGER_TOKEN; an admin token, since the simulator writes both producer and trainer facts)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := g.logger("text")
		if err != nil {
			return err
		}
		o := sf.options(cmd)
		if o.Token == "" {
			o.Token = os.Getenv("ROLLOUTLEDGER_TOKEN")
		}
		o.URL, o.Logger = url, log
		if write != "" {
			return writeSimulated(g, o, write)
		}
		res, err := simulate.Run(cmd.Context(), o)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "simulated run %s: %d events in %d requests (%d retries) in %.2fs, %.0f events/s\n",
			res.Run, res.Events, res.Requests, res.Retries, res.Duration.Seconds(), float64(res.Events)/res.Duration.Seconds())
		if len(res.Steps) > 0 {
			printSteps(g.stderr, res.Steps)
		}
		fmt.Fprintln(g.stdout, res.Run)
		return nil
	}
	return cmd
}

// writeSimulated writes the run o describes to path (- for stdout) as
// NDJSON, generating it as it goes, and prints the run id.
func writeSimulated(g *globals, o simulate.Options, path string) error {
	run := o.Run
	if run == "" {
		run = fmt.Sprintf("sim-%d-%08x", o.Seed, rand.Uint32())
	}
	src, err := simulate.NewSource(o, run)
	if err != nil {
		return err
	}
	out := g.stdout
	var f *os.File
	if path != "-" {
		if f, err = os.Create(path); err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	w := bufio.NewWriterSize(out, 1<<20)
	n := 0
	for ev := range src.Events() {
		b, err := events.Encode(ev)
		if err != nil {
			return err
		}
		w.Write(b)
		if err := w.WriteByte('\n'); err != nil {
			return fmt.Errorf("simulate: write %s: %w", path, err)
		}
		n++
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("simulate: write %s: %w", path, err)
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.stderr, "simulated run %s: %d facts written to %s\n", run, n, path)
	if path != "-" {
		fmt.Fprintln(g.stdout, run)
	}
	return nil
}
