// Package report renders a run's audit — the audit projection's
// [projections.AuditReport] and the verification [replay.Report] of the
// same pass — as a text summary and as one self-contained HTML page with
// inline SVG charts: no script, no stylesheet or font to fetch, no URL of
// any kind, so the page reads the same offline, years later.
package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// Data is what a report shows.
type Data struct {
	Audit  *projections.AuditReport
	Verify *replay.Report
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

// gapAt is the run's mean log-prob gap at staleness s, NaN if unreported.
func gapAt(a *projections.AuditReport, s int64) float64 {
	for _, g := range a.LogprobGap {
		if g.Staleness == s {
			return g.Gap
		}
	}
	return math.NaN()
}

// gapBetween is the mean of the run's gaps at staleness lo..hi.
func gapBetween(a *projections.AuditReport, lo, hi int64) float64 {
	sum, n := 0.0, 0
	for _, g := range a.LogprobGap {
		if g.Staleness >= lo && g.Staleness <= hi {
			sum += g.Gap
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func num(v float64, digits int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// comparison is one line of the recipe comparison.
type comparison struct {
	Metric, Run, Reference, Note string
}

func comparisons(a *projections.AuditReport) []comparison {
	return []comparison{
		{"zero-signal groups", pct(a.ZeroSignalRate), pct(projections.RefZeroSignalRate), "of train groups completed (recipe: 48% before filtering, 10.2% after)"},
		{"infrastructure-lost groups", pct(a.InfraLostRate), pct(projections.RefInfraLostRate), "recipe: 12% before failure attribution, 0.5% after"},
		{"unadmitted groups", pct(a.UnadmittedRate), "-", "train groups whose task was not admitted at completion"},
		{"fully stale groups", pct(a.FullyStaleRate), "-", "no turn within max_staleness"},
		{"masked tokens", pct(a.MaskedTokenFraction), "-", fmt.Sprintf("%d of %d batched completion tokens (%d of %d turns)", a.MaskedTokens, a.CompletionTokens, a.MaskedTurns, a.Turns)},
		{"log-prob gap at staleness 1", num(gapAt(a, 1), 4), "0.065", "mean over steps, from gradient.applied"},
		{"log-prob gap at staleness 4–6", num(gapBetween(a, 4, 6), 4), "0.08", "mean over staleness 4, 5, 6"},
		{"truncated tokens", pct(a.TruncatedFraction), "1–3%", "importance-sampling truncation, mean over steps"},
		{"pass rate", pct(a.PassRate), "-", "attempts with a full solve, over the batches"},
		{"tokens per solve", num(a.TokensPerSolve, 0), "0.84× baseline", "completion tokens of full solves, over the batches"},
		{"compaction savings", pct(a.Compaction.Savings), "≈⅓ cost", fmt.Sprintf("%d compactions", a.Compaction.Count)},
	}
}

// WriteText writes the audit's text summary.
func WriteText(w io.Writer, d Data) error {
	a, v := d.Audit, d.Verify
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("audit of run %s\n", a.Run)
	if v != nil {
		p("  source        %s\n", v.Source)
		p("  verification  %s\n", verdict(v))
	}
	p("  facts         %d (%d undecodable); final head %d:%s\n", a.Facts, a.Undecodable, a.Tree.Size, a.Tree.Root)
	c := a.Config
	p("  config        group_size %d, batch_groups %d, max_staleness %d, pass_band %g:%g, min_probes %d, efficiency_weight %g, advantage %s\n",
		c.GroupSize, c.BatchGroups, c.MaxStaleness, c.PassBand[0], c.PassBand[1], c.MinProbes, c.EfficiencyWeight, c.Advantage)
	p("  batches       %d sealed, %d trained by the trainer; %d groups used; tasks %d admitted, %d rejected; %d checkpoints\n",
		len(a.Steps), a.GradientSteps, a.GroupsUsed, a.Admitted, a.Rejected, a.Checkpoints)

	p("\nagainst the recipe\n")
	for _, c := range comparisons(a) {
		p("  %-30s %10s   reference %-14s %s\n", c.Metric, c.Run, c.Reference, c.Note)
	}

	p("\nper step\n")
	p("  %4s %6s %-30s %7s %7s %6s %9s %8s %7s  %s\n", "step", "groups", "dropped", "zero-s", "masked", "pass", "tok/solve", "gap@1", "trunc", "staleness (turns)")
	for _, s := range a.Steps {
		p("  %4d %6d %-30s %7s %7s %6s %9.0f %8s %7s  %s\n", s.Step, s.Groups, named(s.Dropped), pct(s.ZeroSignalRate),
			pct(s.MaskedTokenFraction), pct(s.PassRate), s.TokensPerSolve, stepGap(s, 1), stepTrunc(s), counts(s.Staleness))
	}

	p("\ntools        %d calls: %d failed, %d timed out, %d to file, %d in the background; mean %.0f ms\n",
		a.ToolTotals.Calls, a.ToolTotals.Failures, a.ToolTotals.Timeouts, a.ToolTotals.ToFile, a.ToolTotals.Background, a.ToolTotals.MeanMS)
	for _, t := range a.Tools {
		p("  %-16s %7d calls %6d failed %6d timed out %6d to file %6d background %8.0f ms mean\n", t.Tool, t.Calls, t.Failures, t.Timeouts, t.ToFile, t.Background, t.MeanMS)
	}
	p("compaction   %d, %d → %d tokens (%s saved)\n", a.Compaction.Count, a.Compaction.TokensBefore, a.Compaction.TokensAfter, pct(a.Compaction.Savings))
	p("microVM fork %d attempts: mean %.0f ms, p50 %d, p95 %d, max %d\n", a.ForkMS.N, a.ForkMS.Mean, a.ForkMS.P50, a.ForkMS.P95, a.ForkMS.Max)
	p("attempts     %d started (%d retries), %d rewarded, %d passed; finished %s; failed %s\n", a.Attempts.Started, a.Attempts.Retries,
		a.Attempts.Rewarded, a.Attempts.Passed, named(a.Attempts.Finished), named(a.Attempts.Failed))

	p("\nfindings     %d: %s\n", len(a.Findings), named(a.FindingsByKind))
	for _, f := range a.Findings {
		// A misrouted finding has no number and no place in the run's
		// facts (docs/design.md §11.2): only the record's position.
		seq, fact := "-", "-"
		if f.Seq != 0 {
			seq = strconv.FormatUint(f.Seq, 10)
		}
		if f.Fact.Seq != 0 {
			fact = strconv.FormatUint(f.Fact.Seq, 10)
		}
		p("  #%-5s fact %s at %d/%d  %-22s %s\n", seq, fact, f.Fact.Partition, f.Fact.Offset, f.Finding.Kind, f.Finding.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func verdict(v *replay.Report) string {
	if v.OK() {
		return fmt.Sprintf("OK: %d decisions and %d tree heads reproduced byte for byte", v.Recorded, v.HeadsChecked)
	}
	var parts []string
	if v.History != nil {
		parts = append(parts, "history "+v.History.What+": "+v.History.Detail)
	}
	if v.First != nil {
		parts = append(parts, fmt.Sprintf("%d divergent decisions, the first: %s", v.Divergences, v.First))
	}
	return "DIVERGED: " + strings.Join(parts, "; ")
}

func stepGap(s projections.StepAudit, st int64) string {
	for _, g := range s.LogprobGap {
		if g.Staleness == st {
			return num(g.Gap, 4)
		}
	}
	return "-"
}

func stepTrunc(s projections.StepAudit) string {
	if !s.Trained {
		return "-"
	}
	return pct(s.TruncatedFraction)
}

func named(c projections.NamedCounts) string {
	if len(c) == 0 {
		return "-"
	}
	parts := make([]string, len(c))
	for i, n := range c {
		parts[i] = fmt.Sprintf("%s %d", n.Name, n.N)
	}
	return strings.Join(parts, ", ")
}

func counts(c []projections.Count) string {
	parts := make([]string, len(c))
	for i, n := range c {
		parts[i] = fmt.Sprintf("%d:%d", n.Value, n.N)
	}
	return "{" + strings.Join(parts, " ") + "}"
}
