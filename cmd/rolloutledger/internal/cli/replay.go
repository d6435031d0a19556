package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/internal/gcpolicy"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// sourceFlags are the flags of every command that reads a run back: from
// Kafka, or from an archive with --archive.
type sourceFlags struct {
	run, archive string
	kafka        *kafkaFlags
}

func addSourceFlags(cmd *cobra.Command) *sourceFlags {
	s := &sourceFlags{kafka: addKafkaFlags(cmd)}
	cmd.Flags().StringVar(&s.run, "run", "", "the run (required unless --archive names it)")
	cmd.Flags().StringVar(&s.archive, "archive", "", "read the run from this archive (rolloutledger export) instead of Kafka")
	return s
}

// open opens the run's history, verifying an archive as it opens.
func (s *sourceFlags) open(ctx context.Context) (replay.Source, error) {
	if s.archive != "" {
		a, err := replay.OpenArchive(s.archive)
		if err != nil {
			return nil, &exitError{code: 1, err: err}
		}
		if s.run != "" && s.run != a.Run() {
			return nil, fmt.Errorf("--run %s, but %s holds run %s", s.run, s.archive, a.Run())
		}
		return a, nil
	}
	if s.run == "" {
		return nil, errors.New("--run is required (or --archive)")
	}
	kc, err := s.kafka.config()
	if err != nil {
		return nil, err
	}
	return replay.OpenKafka(ctx, kc, s.run)
}

// factProgress shows a bar on stderr, when it is a terminal, as a pass
// over the facts goes: by offset for Kafka, by fact for an archive.
func factProgress(stderr io.Writer, src replay.Source, what string) (func(replay.Fact), func()) {
	if !isTerminal(stderr) {
		return nil, func() {}
	}
	var max int64
	byOffset := false
	switch s := src.(type) {
	case *replay.KafkaSource:
		_, end := s.FactsPartition()
		max, byOffset = end, true
	case *replay.Archive:
		max = int64(s.Manifest().Facts)
	default:
		return nil, func() {}
	}
	bar := progressbar.NewOptions64(max, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("facts"),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
	return func(f replay.Fact) {
			if byOffset {
				bar.Set64(f.Offset + 1)
			} else {
				bar.Set64(int64(f.Seq))
			}
		}, func() {
			bar.Finish()
		}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newReplayCmd(g *globals) *cobra.Command {
	var verify, asJSON bool
	var asOf, seed uint64
	var whatIf string
	var reorder int
	cmd := &cobra.Command{
		Use:   "replay --run R [--archive F] --verify | --as-of-step K | --what-if key=value,... | --reorder N [--seed S]",
		Short: "Re-fold a run from Kafka or an archive and verify every recorded decision",
		Long: `replay reads a run back — from Kafka, or from an archive with --archive — and
re-folds every fact with the rules of the run's recorded rule version.

  --verify             recompute every decision and tree head and compare them
                       byte for byte with the record; exit 0 when all match, 1
                       naming the first divergent decision and, when the facts
                       changed, the first fact changed, dropped, inserted or moved
  --as-of-step K       the run's state when batch K was sealed: queue, groups in
                       flight, task admissions, policy versions
  --what-if k=v,...    the batches the run would have produced under other
                       settings (group_size, batch_groups, min_group,
                       max_staleness, pass_band=LOW:HIGH, min_probes,
                       enforce_admission, partial_credit_cap, efficiency_weight,
                       advantage), step by step against the recorded ones
  --reorder N          re-fold the run under N seeded reorderings the contract
                       allows (each producer's order and the order of the
                       group-completing facts kept) and compare the decisions
                       with their log positions stripped; exit 1 naming the
                       first difference: decision, field and seed. The i-th
                       reordering uses seed S+i (--seed, default 1)`,
		Args: cobra.NoArgs,
	}
	sf := addSourceFlags(cmd)
	cmd.Flags().BoolVar(&verify, "verify", false, "verify every recorded decision and tree head")
	cmd.Flags().Uint64Var(&asOf, "as-of-step", 0, "show the state when batch K was sealed")
	cmd.Flags().StringVar(&whatIf, "what-if", "", "re-fold with these settings (key=value,...) and diff the batches")
	cmd.Flags().IntVar(&reorder, "reorder", 0, "re-fold under N seeded reorderings allowed by the contract and compare the decisions")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "the seed of the first reordering (with --reorder)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		modes := 0
		for _, on := range []bool{verify, asOf > 0, whatIf != "", cmd.Flags().Changed("reorder")} {
			if on {
				modes++
			}
		}
		if modes != 1 {
			return errors.New("give exactly one of --verify, --as-of-step K, --what-if key=value,..., --reorder N")
		}
		if cmd.Flags().Changed("reorder") && reorder < 1 {
			return fmt.Errorf("--reorder %d: give at least 1 reordering", reorder)
		}
		if cmd.Flags().Changed("seed") && !cmd.Flags().Changed("reorder") {
			return errors.New("--seed goes with --reorder")
		}
		var overrides replay.Overrides
		if whatIf != "" {
			var err error
			if overrides, err = replay.ParseOverrides(whatIf); err != nil {
				return err
			}
		}
		ctx := cmd.Context()
		src, err := sf.open(ctx)
		if err != nil {
			return err
		}
		switch {
		case verify:
			// Its fold's state is off the Go heap, so the collector may
			// let the heap grow further between collections (package
			// gcpolicy). The other modes keep state on the heap.
			defer gcpolicy.Pass()()
			onFact, done := factProgress(g.stderr, src, "verify")
			rep, err := replay.Verify(ctx, src, replay.VerifyOptions{OnFact: onFact})
			done()
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g.stdout, rep); err != nil {
					return err
				}
			} else {
				printVerify(g.stdout, rep)
			}
			if !rep.OK() {
				return &exitError{code: 1, err: errors.New(verdictLine(rep))}
			}
			return nil
		case reorder > 0:
			rep, err := replay.Reorder(ctx, src, replay.ReorderOptions{Reorderings: reorder, Seed: seed})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g.stdout, rep); err != nil {
					return err
				}
			} else {
				printReorder(g.stdout, rep)
			}
			if !rep.OK() {
				return &exitError{code: 1, err: errors.New(reorderVerdict(rep))}
			}
			return nil
		case asOf > 0:
			st, err := replay.AsOfStep(ctx, src, asOf)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.stdout, st)
			}
			printAsOf(g.stdout, st)
			return nil
		default:
			res, err := replay.WhatIf(ctx, src, overrides)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.stdout, res)
			}
			printWhatIf(g.stdout, res)
			return nil
		}
	}
	return cmd
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// verdictLine is the one-line verdict of a verification.
func verdictLine(rep *replay.Report) string {
	if rep.OK() {
		return fmt.Sprintf("OK: all %d decisions and %d tree heads of run %s reproduced byte for byte from %d facts", rep.Recorded, rep.HeadsChecked, rep.Run, rep.Facts)
	}
	var parts []string
	if rep.History != nil {
		parts = append(parts, "history: "+rep.History.Detail)
	}
	if rep.First != nil {
		parts = append(parts, fmt.Sprintf("%d divergent decision(s), the first: %s", rep.Divergences, rep.First))
	}
	return "DIVERGED: " + strings.Join(parts, "; ")
}

func printVerify(w io.Writer, rep *replay.Report) {
	fmt.Fprintf(w, "replay --verify of run %s (rule version %d)\n", rep.Run, rep.RuleVersion)
	fmt.Fprintf(w, "  source        %s\n", rep.Source)
	fmt.Fprintf(w, "  facts folded  %d; final head %d:%s\n", rep.Facts, rep.Head.Size, rep.Head.Root)
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "  skipped       %d undecodable record(s) keyed with the run (the projector skips them too), first at %d/%d: %s\n",
			len(rep.Skipped), rep.Skipped[0].Partition, rep.Skipped[0].Offset, rep.Skipped[0].Reason)
	}
	fmt.Fprintf(w, "  decisions     %d recorded (%d records), %d recomputed, %d byte-identical, %d divergent\n",
		rep.Recorded, rep.RecordedRecords, rep.Recomputed, rep.Matched, rep.Divergences)
	fmt.Fprintf(w, "  tree heads    %d recorded heads checked; %d facts after the last head that matched\n", rep.HeadsChecked, rep.Uncommitted)
	if h := rep.History; h != nil {
		fmt.Fprintf(w, "  history       %s: %s\n", strings.ToUpper(h.What), h.Detail)
		if h.Head != nil {
			fmt.Fprintf(w, "                %s %d recorded head %d:%s; the facts give %s\n", h.Head.Kind, h.Head.Seq, h.Head.Size, h.Head.Root, orNone(h.Recomputed))
		}
	}
	if d := rep.First; d != nil {
		fmt.Fprintf(w, "  first divergent decision\n")
		fmt.Fprintf(w, "    %s %d (%s), id %s, caused by fact %d at %d/%d\n", d.Kind, d.Seq, d.Problem, d.ID, d.Fact.Seq, d.Fact.Partition, d.Fact.Offset)
		if d.Field != "" {
			fmt.Fprintf(w, "    field       %s\n    recorded    %s\n    recomputed  %s\n", d.Field, d.Recorded, d.Recomputed)
		}
	}
	fmt.Fprintf(w, "verdict: %s\n", verdictLine(rep))
}

func orNone(s string) string {
	if s == "" {
		return "nothing (they end before it)"
	}
	return s
}

func printAsOf(w io.Writer, st *replay.StepState) {
	v := st.State
	fmt.Fprintf(w, "run %s as of step %d: batch %d sealed by fact %d at %d/%d\n", st.Run, st.Step, st.Step, st.Sealed.Seq, st.Sealed.Partition, st.Sealed.Offset)
	fmt.Fprintf(w, "  digest        %s (%d groups)\n", st.Digest, st.Groups)
	fmt.Fprintf(w, "  tree head     %d:%s\n", v.Tree.Size, v.Tree.Root)
	c := v.Config
	fmt.Fprintf(w, "  config        group_size %d, batch_groups %d, min_group %d, max_staleness %d, pass_band %g:%g, min_probes %d, enforce_admission %t, partial_credit_cap %g, efficiency_weight %g, advantage %s\n",
		c.GroupSize, c.BatchGroups, c.MinGroup, c.MaxStaleness, c.PassBand[0], c.PassBand[1], c.MinProbes, c.EnforceAdmission, c.PartialCreditCap, c.EfficiencyWeight, c.Advantage)
	d := v.Decisions
	fmt.Fprintf(w, "  decisions     %d batches sealed, %d tasks admitted, %d rejected, %d findings\n", d.BatchSealed, d.TaskAdmitted, d.TaskRejected, d.AuditFinding)
	fmt.Fprintf(w, "  queue         %d group(s) placed in batch %d so far", len(v.Queue), st.Step+1)
	for _, q := range v.Queue {
		fmt.Fprintf(w, "; %s (%d attempts, %d/%d turns train)", q.Group, q.Attempts, q.TrainedTurns, q.Turns)
	}
	fmt.Fprintln(w)
	if len(v.Dropped) > 0 {
		fmt.Fprintf(w, "  dropped since %d group(s):", len(v.Dropped))
		for _, dg := range v.Dropped {
			fmt.Fprintf(w, " %s (%s)", dg.Group, dg.Reason)
		}
		fmt.Fprintln(w)
	}
	purposes := map[string]int{}
	for _, g := range v.InFlight {
		p := g.Purpose
		if p == "" {
			p = "undeclared"
		}
		purposes[p]++
	}
	var byPurpose []string
	for _, p := range slices.Sorted(maps.Keys(purposes)) {
		byPurpose = append(byPurpose, fmt.Sprintf("%s %d", p, purposes[p]))
	}
	fmt.Fprintf(w, "  in flight     %d group(s) (%s), %d attempt(s); %d turns' tokens held\n", len(v.InFlight), strings.Join(byPurpose, ", "), v.AttemptsInFlight, v.HeldTurnPayloads)
	const listed = 12
	for i, g := range v.InFlight {
		if i == listed {
			fmt.Fprintf(w, "                … and %d more (--json lists all)\n", len(v.InFlight)-listed)
			break
		}
		fmt.Fprintf(w, "                %-24s %-20s %-5s size %d: %d attempts, %d rewarded, %d finished, %d failed%s\n",
			g.Group, g.Task, g.Purpose, g.Size, g.Attempts, g.Rewarded, g.Finished, g.Failed, map[bool]string{true: ", closed"}[g.Closed])
	}
	decided := map[string]int{}
	for _, t := range v.Tasks {
		decided[t.Decision]++
	}
	fmt.Fprintf(w, "  tasks         %d: %d admitted, %d rejected, %d pending\n", len(v.Tasks), decided["admitted"], decided["rejected"], decided["pending"])
	if n := len(st.Published); n > 0 {
		last := st.Published[n-1]
		fmt.Fprintf(w, "  versions      %d published, the last version %d (%s) at fact %d\n", n, last.Version, last.Checkpoint, last.Fact)
	} else {
		fmt.Fprintf(w, "  versions      none published yet\n")
	}
	if n := len(st.Gradients); n > 0 {
		last := st.Gradients[n-1]
		fmt.Fprintf(w, "  trainer       %d gradient steps, the last step %d on batch %d (version %d→%d) at fact %d\n", n, last.Step, last.Batch, last.FromVersion, last.ToVersion, last.Fact)
	}
	fmt.Fprintf(w, "  turns by version %s\n", countList(st.TurnVersions))
}

func countList(cs []projections.Count) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d:%d", c.Value, c.N)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func printWhatIf(w io.Writer, res *replay.WhatIfResult) {
	fmt.Fprintf(w, "what-if %s on run %s\n\n", strings.Join(res.Overrides, ","), res.Run)
	fmt.Fprintf(w, "%4s  %-11s %-13s %-13s %-10s %-10s %-15s %-17s %-9s %s\n", "step", "groups", "gained/lost", "turns Δ", "trained Δ", "same", "masked", "tokens/solve", "pass", "dropped (what-if)")
	arrow := func(r, x *replay.StepSummary, f func(*replay.StepSummary) string) string {
		a, b := "-", "-"
		if r != nil {
			a = f(r)
		}
		if x != nil {
			b = f(x)
		}
		return a + "→" + b
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	for _, s := range res.Steps {
		dropped := "-"
		if s.WhatIf != nil && len(s.WhatIf.Dropped) > 0 {
			dropped = namedList(s.WhatIf.Dropped)
		}
		fmt.Fprintf(w, "%4d  %-11s %-13s %-13s %-10s %-10t %-15s %-17s %-9s %s\n", s.Step,
			arrow(s.Recorded, s.WhatIf, func(x *replay.StepSummary) string { return fmt.Sprint(x.Groups) }),
			fmt.Sprintf("+%d/-%d", len(s.GroupsGained), len(s.GroupsLost)),
			fmt.Sprintf("%+d", s.TurnsDelta), fmt.Sprintf("%+d", s.TrainedTurnsDelta), s.Same,
			arrow(s.Recorded, s.WhatIf, func(x *replay.StepSummary) string { return pct(x.MaskedFraction) }),
			arrow(s.Recorded, s.WhatIf, func(x *replay.StepSummary) string { return fmt.Sprintf("%.0f", x.TokensPerSolve) }),
			arrow(s.Recorded, s.WhatIf, func(x *replay.StepSummary) string { return fmt.Sprintf("%.0f%%", 100*x.PassRate) }),
			dropped)
	}
	r, x := res.RecordedTotal, res.WhatIfTotal
	fmt.Fprintf(w, "\n%-10s %8s %8s %8s %9s %9s %12s %6s  %s\n", "", "batches", "groups", "turns", "trained", "masked", "tokens/solve", "pass", "dropped")
	for _, row := range []struct {
		name string
		s    replay.StepSummary
	}{{"recorded", r}, {"what-if", x}} {
		fmt.Fprintf(w, "%-10s %8d %8d %8d %9d %8.1f%% %12.0f %5.0f%%  %s\n", row.name, row.s.Batches, row.s.Groups, row.s.Turns, row.s.TrainedTurns,
			100*row.s.MaskedFraction, row.s.TokensPerSolve, 100*row.s.PassRate, namedList(row.s.Dropped))
	}
	same := 0
	for _, s := range res.Steps {
		if s.Same {
			same++
		}
	}
	fmt.Fprintf(w, "\n%d of %d steps identical to the record (same digest); --json for group lists\n", same, len(res.Steps))
}

func namedList(c projections.NamedCounts) string {
	if len(c) == 0 {
		return "-"
	}
	parts := make([]string, len(c))
	for i, n := range c {
		parts[i] = fmt.Sprintf("%s %d", n.Name, n.N)
	}
	return strings.Join(parts, ", ")
}

// reorderVerdict is the one-line verdict of a reorder check.
func reorderVerdict(rep *replay.ReorderReport) string {
	if rep.OK() {
		return fmt.Sprintf("OK: %d reorderings of run %s gave the log order's %d position-free decisions", len(rep.Seeds), rep.Run, rep.Decisions)
	}
	return "DIFFERS: " + rep.Difference.String()
}

func printReorder(w io.Writer, rep *replay.ReorderReport) {
	fmt.Fprintf(w, "replay --reorder of run %s\n", rep.Run)
	fmt.Fprintf(w, "  source        %s\n", rep.Source)
	fmt.Fprintf(w, "  facts         %d from %d producers; %d groups, %d completing facts kept in order\n", rep.Facts, rep.Producers, rep.Groups, rep.Completions)
	fmt.Fprintf(w, "  decisions     %d position-free (checkpoints left out) compared per reordering\n", rep.Decisions)
	if n := len(rep.Seeds); n > 0 {
		fmt.Fprintf(w, "  reorderings   %d, seeds %d..%d; facts moved %d..%d, delivered before their cause %d..%d\n", n, rep.Seeds[0], rep.Seeds[n-1],
			slices.Min(rep.Moved), slices.Max(rep.Moved), slices.Min(rep.Inverted), slices.Max(rep.Inverted))
	}
	if d := rep.Difference; d != nil {
		fmt.Fprintf(w, "  first difference under seed %d\n    decision    %s\n", d.Seed, d.Decision)
		if d.Field != "" {
			fmt.Fprintf(w, "    field       %s\n", d.Field)
		}
		fmt.Fprintf(w, "    in log order %s\n    reordered    %s\n", d.InLog, d.Reordered)
	}
	fmt.Fprintf(w, "verdict: %s\n", reorderVerdict(rep))
}
