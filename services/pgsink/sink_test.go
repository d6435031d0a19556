package pgsink_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
)

// factTables maps each fact type to the table holding one row per fact.
var factTables = map[events.Type]string{
	events.TypeRunStarted:       "runs",
	events.TypeTaskRegistered:   "tasks",
	events.TypeGroupStarted:     "groups",
	events.TypeGroupClosed:      "group_closures",
	events.TypeAttemptStarted:   "attempts",
	events.TypeAttemptFinished:  "attempt_outcomes",
	events.TypeAttemptFailed:    "attempt_failures",
	events.TypeTurnGenerated:    "turns",
	events.TypeToolCalled:       "tool_calls",
	events.TypeContextCompacted: "compactions",
	events.TypeRewardComputed:   "rewards",
	events.TypePolicyPublished:  "policy_versions",
	events.TypeGradientApplied:  "gradient_steps",
}

// A seeded simulated run goes through the whole stack, pgsink included.
// Every table holds one row per distinct fact or decision (or member of
// one), and the views give what the projections compute for the run.
func TestTablesAndViewsMatchTheRun(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			url := testenv.Postgres(t)
			schema := testenv.Schema(t, url)
			s := startLedger(t, kc, url, schema)
			const run = "views-run"
			// Groups of 4 and max_staleness 1: zero-signal and fully stale
			// drops, and masked turns, for the rates to be about.
			o := small(run, 3)
			o.URL, o.GroupSize, o.MaxStaleness = s.URL(), 4, 1
			res, err := simulate.Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) < 2 {
				t.Fatalf("the trainer took %d steps, want 2 or 3", len(res.Steps))
			}
			waitProjected(t, s, kc)
			waitStored(t, url, schema, kc)
			l := readLog(t, kc)
			conn := connect(t, url)
			checkCounts(t, conn, schema, l)
			if len(l.decisions[projections.KindBatchSealed]) < 2 || len(l.facts[events.TypeGradientApplied]) < 2 ||
				len(l.facts[events.TypeContextCompacted]) == 0 || count(t, conn, schema, "batch_drops") == 0 {
				t.Errorf("the run is too thin to test anything: %d batches, %d gradient steps, %d compactions, %d drops",
					len(l.decisions[projections.KindBatchSealed]), len(l.facts[events.TypeGradientApplied]),
					len(l.facts[events.TypeContextCompacted]), count(t, conn, schema, "batch_drops"))
			}
			want, err := projections.FoldAll(run, l.byRun[run])
			if err != nil {
				t.Fatal(err)
			}
			checkViews(t, conn, schema, run, l, want)
		})
	}
}

func checkCounts(t *testing.T, conn *pgx.Conn, schema string, l *theLog) {
	t.Helper()
	for typ, table := range factTables {
		if got, want := count(t, conn, schema, table), int64(len(l.facts[typ])); got != want {
			t.Errorf("%s: got %d rows, want %d (distinct %s facts)", table, got, want, typ)
		}
	}
	var gates, gaps int64
	for _, ev := range l.facts[events.TypeTaskRegistered] {
		gates += int64(len(ev.Data.(*events.TaskRegistered).Gates))
	}
	for _, ev := range l.facts[events.TypeGradientApplied] {
		gaps += int64(len(ev.Data.(*events.GradientApplied).LogprobGap))
	}
	var groups, attempts, turns, drops int64
	for _, env := range l.decisions[projections.KindBatchSealed] {
		var m projections.Manifest
		if err := json.Unmarshal(env.Data, &m); err != nil {
			t.Fatal(err)
		}
		groups += int64(len(m.Groups))
		drops += int64(len(m.Dropped))
		for _, g := range m.Groups {
			attempts += int64(len(g.Attempts))
			for _, a := range g.Attempts {
				turns += int64(len(a.Turns))
			}
		}
	}
	for table, want := range map[string]int64{
		"task_gates":            gates,
		"gradient_logprob_gaps": gaps,
		"batches":               int64(len(l.decisions[projections.KindBatchSealed])),
		"batch_groups":          groups,
		"batch_attempts":        attempts,
		"batch_turns":           turns,
		"batch_drops":           drops,
		"admissions":            int64(len(l.decisions[projections.KindTaskAdmitted]) + len(l.decisions[projections.KindTaskRejected])),
		"audit_findings":        int64(len(l.decisions[projections.KindAuditFinding])),
		"audit_checkpoints":     int64(len(l.decisions["audit.checkpoint"])),
		"skipped_records":       0,
	} {
		if got := count(t, conn, schema, table); got != want {
			t.Errorf("%s: got %d rows, want %d", table, got, want)
		}
	}
	t.Logf("%d records; facts by type %v; %d batches holding %d groups, %d attempts, %d turns, %d drops",
		l.records, factCounts(l), len(l.decisions[projections.KindBatchSealed]), groups, attempts, turns, drops)
}

func factCounts(l *theLog) map[events.Type]int {
	out := map[events.Type]int{}
	for typ, evs := range l.facts {
		out[typ] = len(evs)
	}
	return out
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}

// histStats is the mean and max key of a {"value": count} histogram.
func histStats(h map[string]int) (mean float64, maxKey int64) {
	var sum, n int64
	maxKey = math.MinInt64
	for k, c := range h {
		v, _ := strconv.ParseInt(k, 10, 64)
		sum += v * int64(c)
		n += int64(c)
		maxKey = max(maxKey, v)
	}
	return float64(sum) / float64(n), maxKey
}

func checkViews(t *testing.T, conn *pgx.Conn, schema, run string, l *theLog, decided []projections.Decision) {
	t.Helper()
	ctx := context.Background()
	q := func(sql string) pgx.Rows {
		conn.Exec(ctx, "SET search_path = "+schema)
		rows, err := conn.Query(ctx, sql, run)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return rows
	}
	// The trainer's first report per batch, in log order.
	grads := map[int64]*events.GradientApplied{}
	for _, r := range l.byRun[run] {
		if g, ok := r.Event.Data.(*events.GradientApplied); ok && grads[g.Batch] == nil {
			grads[g.Batch] = g
		}
	}

	manifests := map[int64]projections.Manifest{}
	admissions := map[string]projections.Admission{}
	decisions := map[string]string{}
	for _, d := range decided {
		switch d.Kind {
		case projections.KindBatchSealed:
			m, err := projections.ManifestOf(d.Value)
			if err != nil {
				t.Fatal(err)
			}
			manifests[int64(m.Seq)] = m
		case projections.KindTaskAdmitted, projections.KindTaskRejected:
			var env projections.Envelope
			var a projections.Admission
			if err := json.Unmarshal(d.Value, &env); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(env.Data, &a); err != nil {
				t.Fatal(err)
			}
			admissions[a.Task] = a
			decisions[a.Task] = map[events.Type]string{projections.KindTaskAdmitted: "admitted", projections.KindTaskRejected: "rejected"}[d.Kind]
		}
	}

	// step_metrics against each manifest.
	rows := q(`SELECT step, groups, dropped_groups, zero_signal_rate, infra_lost_rate, unadmitted_rate, fully_stale_rate,
	                  attempts, pass_rate, tokens_per_solve, turns, trained_turns, masked_turn_fraction,
	                  mean_staleness, max_staleness, mean_in_flight, max_in_flight, mean_in_queue, max_in_queue,
	                  truncated_fraction, digest_matches
	             FROM step_metrics WHERE run = $1 ORDER BY step`)
	steps := 0
	for rows.Next() {
		var step, groups, dropped, attempts, turns, trained, maxStale, maxFlight, maxQueue int64
		var zero, lost, unadm, stale, masked, meanStale, meanFlight, meanQueue, trunc float64
		var pass, perSolve *float64
		var digestOK *bool
		if err := rows.Scan(&step, &groups, &dropped, &zero, &lost, &unadm, &stale, &attempts, &pass, &perSolve, &turns, &trained,
			&masked, &meanStale, &maxStale, &meanFlight, &maxFlight, &meanQueue, &maxQueue, &trunc, &digestOK); err != nil {
			t.Fatal(err)
		}
		steps++
		m, ok := manifests[step]
		if !ok {
			t.Errorf("step_metrics has step %d, the projections sealed no such batch", step)
			continue
		}
		reasons := map[string]int{}
		for _, d := range m.Dropped {
			reasons[d.Reason]++
		}
		completed := float64(len(m.Groups) + len(m.Dropped))
		var wantAttempts, solves, solveTokens int64
		for _, g := range m.Groups {
			for _, a := range g.Attempts {
				wantAttempts++
				if a.Score == 1 {
					solves++
					solveTokens += a.CompletionTokens
				}
			}
		}
		wantMeanStale, wantMaxStale := histStats(m.Stats.StalenessHistogram)
		wantMeanFlight, wantMaxFlight := histStats(m.Stats.InFlight)
		wantMeanQueue, wantMaxQueue := histStats(m.Stats.InQueue)
		g := grads[step]
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"groups", float64(groups), float64(len(m.Groups))},
			{"dropped_groups", float64(dropped), float64(len(m.Dropped))},
			{"zero_signal_rate", zero, float64(reasons[projections.DropZeroSignal]) / completed},
			{"infra_lost_rate", lost, float64(reasons[projections.DropInfraLost]) / completed},
			{"unadmitted_rate", unadm, float64(reasons[projections.DropUnadmitted]) / completed},
			{"fully_stale_rate", stale, float64(reasons[projections.DropFullyStale]) / completed},
			{"attempts", float64(attempts), float64(wantAttempts)},
			{"pass_rate", deref(pass), float64(solves) / float64(wantAttempts)},
			{"tokens_per_solve", deref(perSolve), float64(solveTokens) / float64(solves)},
			{"turns", float64(turns), float64(m.Stats.Turns)},
			{"trained_turns", float64(trained), float64(m.Stats.TrainedTurns)},
			{"masked_turn_fraction", masked, float64(m.Stats.Turns-m.Stats.TrainedTurns) / float64(m.Stats.Turns)},
			{"mean_staleness", meanStale, wantMeanStale},
			{"max_staleness", float64(maxStale), float64(wantMaxStale)},
			{"mean_in_flight", meanFlight, wantMeanFlight},
			{"max_in_flight", float64(maxFlight), float64(wantMaxFlight)},
			{"mean_in_queue", meanQueue, wantMeanQueue},
			{"max_in_queue", float64(maxQueue), float64(wantMaxQueue)},
			{"truncated_fraction", trunc, g.TruncatedFraction},
		} {
			if !near(c.got, c.want) {
				t.Errorf("step %d %s: got %v, want %v", step, c.name, c.got, c.want)
			}
		}
		if digestOK == nil || !*digestOK {
			t.Errorf("step %d: digest_matches %v, want true", step, digestOK)
		}
	}
	rows.Close()
	if steps != len(manifests) || steps == 0 {
		t.Errorf("step_metrics has %d steps, the projections sealed %d batches", steps, len(manifests))
	}

	// staleness_histogram against the manifests' histograms.
	rows = q(`SELECT step, staleness, turns FROM staleness_histogram WHERE run = $1`)
	seen := 0
	for rows.Next() {
		var step, st, n int64
		if err := rows.Scan(&step, &st, &n); err != nil {
			t.Fatal(err)
		}
		seen++
		if want := manifests[step].Stats.StalenessHistogram[strconv.FormatInt(st, 10)]; int64(want) != n {
			t.Errorf("staleness_histogram step %d staleness %d: got %d turns, want %d", step, st, n, want)
		}
	}
	rows.Close()
	wantBins := 0
	for _, m := range manifests {
		wantBins += len(m.Stats.StalenessHistogram)
	}
	if seen != wantBins {
		t.Errorf("staleness_histogram: %d rows, want %d", seen, wantBins)
	}

	// logprob_gap_by_staleness against the trainer's reports.
	rows = q(`SELECT step, staleness, gap FROM logprob_gap_by_staleness WHERE run = $1`)
	seen = 0
	for rows.Next() {
		var step, st int64
		var gap float64
		if err := rows.Scan(&step, &st, &gap); err != nil {
			t.Fatal(err)
		}
		seen++
		if want := grads[step].LogprobGap[strconv.FormatInt(st, 10)]; want != gap {
			t.Errorf("logprob gap step %d staleness %d: got %v, want %v", step, st, gap, want)
		}
	}
	rows.Close()
	wantGaps := 0
	for _, g := range grads {
		wantGaps += len(g.LogprobGap)
	}
	if seen != wantGaps {
		t.Errorf("logprob_gap_by_staleness: %d rows, want %d", seen, wantGaps)
	}

	// task_metrics against the admission decisions and the batches.
	trainedGroups := map[string]int64{}
	for _, m := range manifests {
		for _, g := range m.Groups {
			trainedGroups[g.Task]++
		}
	}
	rows = q(`SELECT task, admission, probes, passes, probe_pass_rate, times_trained FROM task_metrics WHERE run = $1`)
	seen = 0
	for rows.Next() {
		var task, adm string
		var probes, passes *int64
		var rate *float64
		var times int64
		if err := rows.Scan(&task, &adm, &probes, &passes, &rate, &times); err != nil {
			t.Fatal(err)
		}
		seen++
		a, decided := admissions[task]
		switch {
		case !decided && adm != "pending":
			t.Errorf("task %s: admission %s, the projections decided nothing", task, adm)
		case decided && (adm != decisions[task] || deref64(probes) != a.Probes || deref64(passes) != a.Passes || deref(rate) != a.PassRate):
			t.Errorf("task %s: got %s %v/%v (%v), want %s %d/%d (%v)", task, adm, deref64(probes), deref64(passes), deref(rate),
				decisions[task], a.Passes, a.Probes, a.PassRate)
		}
		if times != trainedGroups[task] {
			t.Errorf("task %s: trained %d times, the batches hold %d of its groups", task, times, trainedGroups[task])
		}
	}
	rows.Close()
	if seen != len(l.facts[events.TypeTaskRegistered]) || len(admissions) == 0 {
		t.Errorf("task_metrics: %d tasks, %d registered, %d decided", seen, len(l.facts[events.TypeTaskRegistered]), len(admissions))
	}

	// Fact views against the facts.
	var calls, failures, timeouts, toFile, background int64
	var before, after int64
	var cost float64
	attempts := map[string]bool{}
	for _, r := range l.byRun[run] {
		switch d := r.Event.Data.(type) {
		case *events.ToolCalled:
			calls++
			if d.ExitCode != 0 {
				failures++
			}
			if d.TimedOut {
				timeouts++
			}
			if d.ToFile {
				toFile++
			}
			if d.Background {
				background++
			}
		case *events.ContextCompacted:
			before += d.TokensBefore
			after += d.TokensAfter
		case *events.AttemptStarted:
			attempts[d.Attempt] = true
		}
	}
	for _, r := range l.byRun[run] {
		if d, ok := r.Event.Data.(*events.TurnGenerated); ok && attempts[d.Attempt] {
			// The default prices: 0.50, 0.05 and 2.00 dollars per million.
			cost += (float64(d.PromptTokens-d.CachedTokens)*0.5 + float64(d.CachedTokens)*0.05 + float64(d.CompletionTokens)*2.0) / 1e6
		}
	}
	var gotCalls, gotFailures, gotTimeouts, gotToFile, gotBackground, gotBefore, gotAfter, gotAttempts, gotFailed int64
	var gotCost float64
	row := func(sql string, dest ...any) {
		conn.Exec(ctx, "SET search_path = "+schema)
		if err := conn.QueryRow(ctx, sql, run).Scan(dest...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	row(`SELECT calls, failures, timeouts, to_file, background FROM tool_usage WHERE run = $1 AND tool = '*'`,
		&gotCalls, &gotFailures, &gotTimeouts, &gotToFile, &gotBackground)
	row(`SELECT tokens_before, tokens_after FROM compaction_savings WHERE run = $1`, &gotBefore, &gotAfter)
	row(`SELECT attempts, infra_failures FROM infra_health WHERE run = $1`, &gotAttempts, &gotFailed)
	row(`SELECT cost_usd FROM run_costs WHERE run = $1 AND purpose = '*'`, &gotCost)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"tool calls", float64(gotCalls), float64(calls)},
		{"tool failures", float64(gotFailures), float64(failures)},
		{"tool timeouts", float64(gotTimeouts), float64(timeouts)},
		{"to_file", float64(gotToFile), float64(toFile)},
		{"background", float64(gotBackground), float64(background)},
		{"tokens before compaction", float64(gotBefore), float64(before)},
		{"tokens after compaction", float64(gotAfter), float64(after)},
		{"attempts", float64(gotAttempts), float64(len(l.facts[events.TypeAttemptStarted]))},
		{"infra failures", float64(gotFailed), float64(len(l.facts[events.TypeAttemptFailed]))},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if math.Abs(gotCost-cost) > 1e-9*cost {
		t.Errorf("run cost: got %v, want %v", gotCost, cost)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func deref64(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}
