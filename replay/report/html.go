package report

import (
	"html/template"
	"io"
	"math"
	"strconv"

	"github.com/rolloutledger/rolloutledger/projections"
)

// WriteHTML writes the audit as one self-contained HTML page.
func WriteHTML(w io.Writer, d Data) error {
	return page.Execute(w, buildPage(d))
}

type pageData struct {
	Data
	OK          bool
	Verdict     string
	Comparisons []comparison
	Charts      []chart
	StepRows    []projections.StepAudit
}

type chart struct {
	ID, Caption string
	SVG         template.HTML
}

func buildPage(d Data) pageData {
	a := d.Audit
	p := pageData{Data: d, Comparisons: comparisons(a), StepRows: a.Steps, OK: d.Verify == nil || d.Verify.OK()}
	if d.Verify != nil {
		p.Verdict = verdict(d.Verify)
	}
	steps := make([]string, len(a.Steps))
	for i, s := range a.Steps {
		steps[i] = strconv.FormatUint(s.Step, 10)
	}
	perStep := func(f func(projections.StepAudit) float64) []float64 {
		out := make([]float64, len(a.Steps))
		for i, s := range a.Steps {
			out[i] = f(s)
		}
		return out
	}

	// Staleness of batched turns, stacked by staleness.
	maxSt := int64(0)
	for _, s := range a.Steps {
		for _, c := range s.Staleness {
			maxSt = max(maxSt, c.Value)
		}
	}
	var stale []series
	for v := int64(-1); v <= maxSt; v++ {
		ys := perStep(func(s projections.StepAudit) float64 { return float64(countAt(s.Staleness, v)) })
		if v < 0 {
			// Negative staleness gathers every value below 0.
			ys = perStep(func(s projections.StepAudit) float64 {
				n := 0
				for _, c := range s.Staleness {
					if c.Value < 0 {
						n += c.N
					}
				}
				return float64(n)
			})
			if sum(ys) == 0 {
				continue
			}
		}
		name := strconv.FormatInt(v, 10)
		switch {
		case v < 0:
			name = "negative, masked"
		case v > int64(a.Config.MaxStaleness):
			name += " masked"
		}
		stale = append(stale, series{Name: name, Color: stalenessColor(v, a.Config.MaxStaleness), Y: ys})
	}
	p.Charts = append(p.Charts, chart{"staleness", "Turns in each batch by staleness ((k−1) − policy version). Turns past max_staleness " +
		strconv.Itoa(a.Config.MaxStaleness) + " are masked.", stackedChart{Title: "Staleness of batched turns (legend: staleness)", YLabel: "turns", X: steps, Segments: stale}.SVG()})

	meanOf := func(cs []projections.Count) float64 {
		n, sum := 0, 0.0
		for _, c := range cs {
			n += c.N
			sum += float64(c.Value) * float64(c.N)
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	p.Charts = append(p.Charts, chart{"split", "Mean staleness per attempt split into in-flight (the weights changed while the attempt ran: last minus first turn's version) and in-queue (it waited for a batch: (k−1) minus its last turn's version).",
		stackedChart{Title: "In-flight and in-queue staleness per attempt", YLabel: "policy versions", X: steps, Segments: []series{
			{Name: "in flight", Color: palette[0], Y: perStep(func(s projections.StepAudit) float64 { return meanOf(s.InFlight) })},
			{Name: "in queue", Color: palette[1], Y: perStep(func(s projections.StepAudit) float64 { return meanOf(s.InQueue) })},
		}}.SVG()})

	p.Charts = append(p.Charts, chart{"drops", "Share of the train groups completed in each batch's window that were dropped, against the recipe's 10.2% zero-signal and 0.5% infrastructure-lost groups.",
		lineChart{Title: "Dropped groups per step", YLabel: "share of groups", X: steps, Percent: true, Series: []series{
			{Name: "zero signal", Color: palette[0], Y: perStep(func(s projections.StepAudit) float64 { return s.ZeroSignalRate })},
			{Name: "infra lost", Color: palette[1], Y: perStep(func(s projections.StepAudit) float64 { return s.InfraLostRate })},
			{Name: "unadmitted", Color: palette[2], Y: perStep(func(s projections.StepAudit) float64 { return s.UnadmittedRate })},
		}, Refs: []reference{
			{Label: "recipe zero signal 10.2%", Low: projections.RefZeroSignalRate, Color: palette[0]},
			{Label: "recipe infra lost 0.5%", Low: projections.RefInfraLostRate, Color: palette[1]},
		}}.SVG()})

	p.Charts = append(p.Charts, chart{"masked", "Share of each batch's turns and completion tokens that are masked (stale or negative staleness): they stay as context but get no gradient.",
		lineChart{Title: "Masked turns and tokens per step", YLabel: "share", X: steps, Percent: true, Series: []series{
			{Name: "turns", Color: palette[0], Y: perStep(func(s projections.StepAudit) float64 { return s.MaskedTurnFraction })},
			{Name: "tokens", Color: palette[1], Y: perStep(func(s projections.StepAudit) float64 { return s.MaskedTokenFraction }), Dashed: true},
		}}.SVG()})

	p.Charts = append(p.Charts, chart{"pass", "Share of each batch's attempts that fully solved their task.",
		lineChart{Title: "Pass rate per step", YLabel: "pass rate", X: steps, Percent: true, YMax: 0.2, Series: []series{
			{Name: "pass rate", Color: palette[2], Y: perStep(func(s projections.StepAudit) float64 { return s.PassRate })},
		}}.SVG()})

	p.Charts = append(p.Charts, chart{"tokens", "Mean completion tokens of the full solves in each batch (the recipe's efficiency bonus cut it to 0.84×).",
		lineChart{Title: "Tokens per solve per step", YLabel: "completion tokens", X: steps, Series: []series{
			{Name: "tokens per solve", Color: palette[3], Y: perStep(func(s projections.StepAudit) float64 {
				if s.Solves == 0 {
					return math.NaN()
				}
				return s.TokensPerSolve
			})},
		}}.SVG()})

	var gx []string
	var gy []float64
	refs := map[string]float64{}
	for _, g := range a.LogprobGap {
		k := strconv.FormatInt(g.Staleness, 10)
		gx, gy = append(gx, k), append(gy, g.Gap)
		if r, ok := projections.RefLogprobGap[int(g.Staleness)]; ok {
			refs[k] = r
		}
	}
	p.Charts = append(p.Charts, chart{"gap", "Mean absolute gap between trainer and rollout log-probs by staleness, as the trainer reported it in gradient.applied (mean over steps), against the recipe's 0.065 at staleness 1 and 0.08 at 4–6.",
		barChart{Title: "Log-prob gap by staleness", YLabel: "mean |Δ log p|", XLabel: "staleness", X: gx, Y: gy, Color: palette[0], Refs: refs, RefLabel: "recipe"}.SVG()})

	p.Charts = append(p.Charts, chart{"truncated", "Share of tokens truncated by importance sampling per trained step, against the recipe's 1–3%.",
		lineChart{Title: "Truncated tokens per step", YLabel: "share of tokens", X: steps, Percent: true, YMax: 0.035, Series: []series{
			{Name: "truncated", Color: palette[1], Y: perStep(func(s projections.StepAudit) float64 {
				if !s.Trained {
					return math.NaN()
				}
				return s.TruncatedFraction
			})},
		}, Refs: []reference{{Label: "recipe 1–3%", Low: projections.RefTruncatedLow, High: projections.RefTruncatedHigh, Color: palette[2]}}}.SVG()})
	return p
}

func countAt(cs []projections.Count, v int64) int {
	for _, c := range cs {
		if c.Value == v {
			return c.N
		}
	}
	return 0
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

var page = template.Must(template.New("audit").Funcs(template.FuncMap{
	"pct":    pct,
	"named":  named,
	"counts": counts,
	"gap":    stepGap,
	"trunc":  stepTrunc,
	"f0":     func(v float64) string { return num(v, 0) },
}).Parse(pageTemplate))

const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Audit of run {{.Audit.Run}}</title>
<style>
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1a202c; margin: 0 auto; max-width: 1360px; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #e2e8f0; padding-bottom: 4px; }
.verdict { padding: 10px 14px; border-radius: 6px; margin: 12px 0; font-weight: 600; }
.ok { background: #e6fffa; border: 1px solid #38b2ac; } .bad { background: #fff5f5; border: 1px solid #e53e3e; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 3px 10px; border-bottom: 1px solid #edf2f7; text-align: left; vertical-align: top; }
th { background: #f7fafc; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.meta td:first-child { color: #4a5568; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; } figure { margin: 0; width: 640px; } figcaption { font-size: 12px; color: #4a5568; }
svg.chart { background: #fff; border: 1px solid #e2e8f0; border-radius: 4px; }
svg .title { font-weight: 600; font-size: 13px; } svg .tick { font-size: 11px; fill: #4a5568; } svg .reflabel { font-size: 11px; }
svg .grid { stroke: #edf2f7; } svg .axis { stroke: #a0aec0; } svg .ref { stroke-width: 1.5; stroke-dasharray: 6 4; }
code { font-size: 12px; } .detail { max-width: 640px; }
</style>
</head>
<body>
<h1>Audit of run <code>{{.Audit.Run}}</code></h1>
{{with .Verify}}<div class="verdict {{if $.OK}}ok{{else}}bad{{end}}" id="verdict">{{$.Verdict}}</div>{{end}}
<table class="meta" id="meta">
{{with .Verify}}<tr><td>source</td><td>{{.Source}}</td></tr>{{end}}
<tr><td>facts</td><td>{{.Audit.Facts}} ({{.Audit.Undecodable}} undecodable)</td></tr>
<tr><td>final tree head</td><td><code>{{.Audit.Tree.Size}}:{{.Audit.Tree.Root}}</code></td></tr>
<tr><td>config</td><td>group_size {{.Audit.Config.GroupSize}}, batch_groups {{.Audit.Config.BatchGroups}}, min_group {{.Audit.Config.MinGroup}}, max_staleness {{.Audit.Config.MaxStaleness}}, pass_band {{index .Audit.Config.PassBand 0}}:{{index .Audit.Config.PassBand 1}}, min_probes {{.Audit.Config.MinProbes}}, enforce_admission {{.Audit.Config.EnforceAdmission}}, partial_credit_cap {{.Audit.Config.PartialCreditCap}}, efficiency_weight {{.Audit.Config.EfficiencyWeight}}, advantage {{.Audit.Config.Advantage}}</td></tr>
<tr><td>batches</td><td>{{len .Audit.Steps}} sealed, {{.Audit.GradientSteps}} trained; {{.Audit.GroupsUsed}} groups used; tasks {{.Audit.Admitted}} admitted, {{.Audit.Rejected}} rejected; {{.Audit.Checkpoints}} checkpoints</td></tr>
</table>

<h2 id="recipe">Against the recipe</h2>
<table>
<tr><th>metric</th><th>this run</th><th>recipe</th><th>note</th></tr>
{{range .Comparisons}}<tr><td>{{.Metric}}</td><td class="n">{{.Run}}</td><td class="n">{{.Reference}}</td><td>{{.Note}}</td></tr>
{{end}}</table>

<h2 id="charts">Per step</h2>
<div class="charts">
{{range .Charts}}<figure id="chart-{{.ID}}">{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}</div>

<h2 id="steps">Batches</h2>
<table>
<tr><th>step</th><th>fact</th><th>groups</th><th>dropped</th><th>zero signal</th><th>infra lost</th><th>attempts</th><th>pass</th><th>tokens/solve</th><th>turns</th><th>masked turns</th><th>masked tokens</th><th>gap@1</th><th>truncated</th><th>trainer digest</th><th>staleness</th></tr>
{{range .StepRows}}<tr><td class="n">{{.Step}}</td><td class="n">{{.Fact}}</td><td class="n">{{.Groups}}</td><td>{{named .Dropped}}</td><td class="n">{{pct .ZeroSignalRate}}</td><td class="n">{{pct .InfraLostRate}}</td><td class="n">{{.Attempts}}</td><td class="n">{{pct .PassRate}}</td><td class="n">{{f0 .TokensPerSolve}}</td><td class="n">{{.Turns}}</td><td class="n">{{pct .MaskedTurnFraction}}</td><td class="n">{{pct .MaskedTokenFraction}}</td><td class="n">{{gap . 1}}</td><td class="n">{{trunc .}}</td><td>{{if .Trained}}{{if .DigestMatches}}matches{{else}}<b>differs</b>{{end}}{{else}}not trained{{end}}</td><td>{{counts .Staleness}}</td></tr>
{{end}}</table>

<h2 id="tools">Tools, compaction, microVMs</h2>
<table>
<tr><th>tool</th><th>calls</th><th>failed</th><th>timed out</th><th>to file</th><th>background</th><th>mean ms</th><th>output bytes</th></tr>
{{range .Audit.Tools}}<tr><td>{{.Tool}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Failures}}</td><td class="n">{{.Timeouts}}</td><td class="n">{{.ToFile}}</td><td class="n">{{.Background}}</td><td class="n">{{f0 .MeanMS}}</td><td class="n">{{.OutputBytes}}</td></tr>
{{end}}{{with .Audit.ToolTotals}}<tr><th>all</th><th class="n">{{.Calls}}</th><th class="n">{{.Failures}}</th><th class="n">{{.Timeouts}}</th><th class="n">{{.ToFile}}</th><th class="n">{{.Background}}</th><th class="n">{{f0 .MeanMS}}</th><th class="n">{{.OutputBytes}}</th></tr>{{end}}
</table>
<p>Compaction: {{.Audit.Compaction.Count}} compactions, {{.Audit.Compaction.TokensBefore}} → {{.Audit.Compaction.TokensAfter}} tokens ({{pct .Audit.Compaction.Savings}} saved).
MicroVM fork time over {{.Audit.ForkMS.N}} attempts: mean {{f0 .Audit.ForkMS.Mean}} ms, p50 {{.Audit.ForkMS.P50}} ms, p95 {{.Audit.ForkMS.P95}} ms, max {{.Audit.ForkMS.Max}} ms.
Attempts: {{.Audit.Attempts.Started}} started ({{.Audit.Attempts.Retries}} retries), {{.Audit.Attempts.Rewarded}} rewarded, {{.Audit.Attempts.Passed}} passed; finished {{named .Audit.Attempts.Finished}}; failed {{named .Audit.Attempts.Failed}}.</p>

<h2 id="facts">Facts by type</h2>
<table>
<tr><th>type</th><th>facts</th></tr>
{{range .Audit.FactsByType}}<tr><td>{{.Type}}</td><td class="n">{{.N}}</td></tr>
{{end}}</table>

{{with .Verify}}<h2 id="verification">Verification</h2>
<table class="meta">
<tr><td>decisions</td><td>{{.Recorded}} recorded ({{.RecordedRecords}} records), {{.Recomputed}} recomputed, {{.Matched}} byte-identical, {{.Divergences}} divergent</td></tr>
<tr><td>tree heads</td><td>{{.HeadsChecked}} recorded heads checked; {{.Uncommitted}} facts after the last head that matched</td></tr>
{{with .First}}<tr><td>first divergent decision</td><td class="detail">{{.Kind}} {{.Seq}} ({{.Problem}}), caused by fact {{.Fact.Seq}} at {{.Fact.Partition}}/{{.Fact.Offset}}{{if .Field}}: <code>{{.Field}}</code> recorded <code>{{.Recorded}}</code>, recomputed <code>{{.Recomputed}}</code>{{end}}</td></tr>{{end}}
{{with .History}}<tr><td>history</td><td class="detail">{{.What}}: {{.Detail}}</td></tr>{{end}}
</table>{{end}}

<h2 id="findings">Findings ({{len .Audit.Findings}})</h2>
{{if not .Audit.Findings}}<p>None: no fact of the run needed a finding.</p>{{else}}<p>{{named .Audit.FindingsByKind}}. Each is placed by the fact that caused it: its position in the run (fact) and in the facts topic (partition/offset); a misrouted finding has only the latter, as the record has no place in the run's order.</p>
<table>
<tr><th>#</th><th>kind</th><th>fact</th><th>partition/offset</th><th>group</th><th>attempt</th><th>detail</th></tr>
{{range .Audit.Findings}}<tr><td class="n">{{if .Seq}}{{.Seq}}{{else}}–{{end}}</td><td>{{.Finding.Kind}}</td><td class="n">{{if .Fact.Seq}}{{.Fact.Seq}}{{else}}–{{end}}</td><td class="n">{{.Fact.Partition}}/{{.Fact.Offset}}</td><td>{{.Finding.Group}}</td><td>{{.Finding.Attempt}}</td><td class="detail">{{.Finding.Detail}}</td></tr>
{{end}}</table>{{end}}
</body>
</html>
`
