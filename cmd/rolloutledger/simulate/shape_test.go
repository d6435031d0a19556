package simulate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// attemptView gathers one attempt's facts from a plan's events.
type attemptView struct {
	started  *events.AttemptStarted
	turns    []*events.TurnGenerated
	tools    []*events.ToolCalled
	compacts []*events.ContextCompacted
	finished *events.AttemptFinished
	failed   *events.AttemptFailed
	reward   *events.RewardComputed
}

func attemptsOf(p *Plan) (map[string]*attemptView, []string) {
	out := map[string]*attemptView{}
	var order []string
	get := func(id string) *attemptView {
		if a, ok := out[id]; ok {
			return a
		}
		out[id] = &attemptView{}
		order = append(order, id)
		return out[id]
	}
	for _, ev := range p.All() {
		switch d := ev.Data.(type) {
		case *events.AttemptStarted:
			get(d.Attempt).started = d
		case *events.TurnGenerated:
			a := get(d.Attempt)
			a.turns = append(a.turns, d)
		case *events.ToolCalled:
			a := get(d.Attempt)
			a.tools = append(a.tools, d)
		case *events.ContextCompacted:
			a := get(d.Attempt)
			a.compacts = append(a.compacts, d)
		case *events.AttemptFinished:
			get(d.Attempt).finished = d
		case *events.AttemptFailed:
			get(d.Attempt).failed = d
		case *events.RewardComputed:
			get(d.Attempt).reward = d
		}
	}
	return out, order
}

// totalTokens is everything the attempt's context ever held: the last
// prompt and completion plus what compactions removed.
func (a *attemptView) totalTokens() int64 {
	last := a.turns[len(a.turns)-1]
	n := last.PromptTokens + last.CompletionTokens
	for _, c := range a.compacts {
		n += c.TokensBefore - c.TokensAfter
	}
	return n
}

func TestShapeDefault(t *testing.T) {
	o := Options{Seed: 1}
	p := mustGenerate(t, o, "shape")
	st := statsOf(p)
	t.Logf("default plan, %d engines:\n%s", p.Engines, st)
	o = o.withDefaults()
	atts, order := attemptsOf(p)

	var finishedTurns, passedTurns, failedTurns []int
	var tokens []int64
	var versionsSeen = map[int64]bool{}
	for _, id := range order {
		a := atts[id]
		if a.started == nil {
			t.Fatalf("attempt %s has facts but no attempt.started", id)
		}
		if f := a.started.ForkMS; f < 50 || f > 400 {
			t.Errorf("attempt %s: fork_ms %d", id, f)
		}
		if (a.finished == nil) == (a.failed == nil) {
			t.Fatalf("attempt %s: finished %v, failed %v", id, a.finished != nil, a.failed != nil)
		}
		if (a.reward != nil) != (a.finished != nil) {
			t.Fatalf("attempt %s: a reward without finishing, or the reverse", id)
		}
		for i, tr := range a.turns {
			versionsSeen[tr.PolicyVersion()] = true
			if i > 0 && tr.PolicyVersion() < a.turns[i-1].PolicyVersion() {
				t.Errorf("attempt %s: turn %d at version %d after %d", id, i, tr.PolicyVersion(), a.turns[i-1].PolicyVersion())
			}
			last := i == len(a.turns)-1 && a.finished != nil
			if last != (tr.Finish != events.FinishToolCall) {
				t.Errorf("attempt %s: turn %d of %d finished %s", id, i, len(a.turns), tr.Finish)
			}
			if tr.CompletionTokens < 50 || tr.CompletionTokens > maxCompletionTokens {
				t.Errorf("attempt %s: turn %d has %d completion tokens", id, i, tr.CompletionTokens)
			}
			if i > 0 && tr.PromptTokens <= a.turns[i-1].PromptTokens && !slices.ContainsFunc(a.compacts, func(c *events.ContextCompacted) bool { return c.Turn == i-1 }) {
				t.Errorf("attempt %s: turn %d prompt %d did not grow from %d", id, i, tr.PromptTokens, a.turns[i-1].PromptTokens)
			}
		}
		for _, c := range a.compacts {
			if c.TokensBefore <= int64(o.ContextBudget) || c.TokensAfter >= c.TokensBefore {
				t.Errorf("attempt %s: compaction %d -> %d with budget %d", id, c.TokensBefore, c.TokensAfter, o.ContextBudget)
			}
			if next := a.turns[c.Turn+1]; next.PromptTokens != c.TokensAfter || next.CachedTokens >= next.PromptTokens {
				t.Errorf("attempt %s: after compaction to %d the next prompt is %d (cached %d)", id, c.TokensAfter, next.PromptTokens, next.CachedTokens)
			}
		}
		for _, tc := range a.tools {
			if tc.TimedOut != (tc.ExitCode == 124) {
				t.Errorf("attempt %s: tool call timed_out %v with exit code %d", id, tc.TimedOut, tc.ExitCode)
			}
		}
		if a.finished == nil {
			continue
		}
		n := len(a.turns)
		if n < o.MinTurns || n > o.MaxTurns {
			t.Errorf("attempt %s: %d turns outside [%d, %d]", id, n, o.MinTurns, o.MaxTurns)
		}
		finishedTurns = append(finishedTurns, n)
		tokens = append(tokens, a.totalTokens())
		if a.reward.Passed {
			passedTurns = append(passedTurns, n)
		} else {
			failedTurns = append(failedTurns, n)
		}
	}
	med := func(xs []int) int { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	q := func(xs []int, f float64) int {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[int(f*float64(len(s)-1))]
	}
	if m, p90 := med(finishedTurns), q(finishedTurns, 0.9); p90 < 2*m || slices.Max(finishedTurns) < 100 {
		t.Errorf("turns per attempt not long-tailed: median %d, p90 %d, max %d", m, p90, slices.Max(finishedTurns))
	}
	if mp, mf := med(passedTurns), med(failedTurns); mp >= mf {
		t.Errorf("solves are not shorter: median %d turns passed, %d failed", mp, mf)
	}
	slices.Sort(tokens)
	if p10, p50, mx := tokens[len(tokens)/10], tokens[len(tokens)/2], tokens[len(tokens)-1]; p10 < 5_000 || p50 < 10_000 || p50 > 100_000 || mx > 400_000 {
		t.Errorf("tokens per attempt: p10 %d, median %d, max %d", p10, p50, mx)
	}
	t.Logf("tokens per attempt: %s", quantiles(tokens))

	// Groups: one probe group per task, train groups only for admitted
	// tasks, two eval groups, and enough usable train groups.
	admitted := map[string]bool{}
	for _, ti := range p.Tasks {
		admitted[ti.Task] = ti.Admitted
	}
	if n := st.admitted; n < len(p.Tasks)*3/10 || n > len(p.Tasks)*7/10 {
		t.Errorf("%d of %d tasks admitted", n, len(p.Tasks))
	}
	count := map[string]int{}
	batched := 0
	for _, g := range p.Groups {
		count[g.Purpose]++
		if g.Purpose == events.PurposeTrain && !admitted[g.Task] {
			t.Errorf("train group %s on unadmitted task %s", g.Group, g.Task)
		}
		if g.Batch >= 1 && g.Batch <= o.Steps {
			batched++
		}
	}
	if count[events.PurposeProbe] != o.Tasks || count[events.PurposeEval] != evalGroups {
		t.Errorf("groups by purpose %v", count)
	}
	if batched != o.Steps*o.BatchGroups {
		t.Errorf("%d groups in batches 1..%d, want %d", batched, o.Steps, o.Steps*o.BatchGroups)
	}
	checkFates(t, p, atts)

	if st.toFile == 0 || st.background == 0 || st.timedOut == 0 || st.nonZeroExit == 0 || st.compactions == 0 {
		t.Errorf("missing tool or context behaviour: %s", st)
	}
	if st.retries == 0 || st.failed == 0 {
		t.Errorf("no infrastructure failures: %d retries, %d failed", st.retries, st.failed)
	}
	if st.outcomes[events.OutcomeSubmitted]*10 < st.attempts*7 || len(st.outcomes) < 3 {
		t.Errorf("outcomes %v", st.outcomes)
	}
	if st.versionDecrease != 0 || st.negative != 0 {
		t.Errorf("%d version decreases, %d negative staleness", st.versionDecrease, st.negative)
	}
	if len(versionsSeen) < 4 || len(st.lag) < 4 {
		t.Errorf("turns span versions %v, lag %v", versionsSeen, st.lag)
	}
	checkTrainer(t, p, o.Steps)
}

// checkFates recomputes each group's fate from its reward facts, as the
// projector will, and compares it with the generator's prediction.
func checkFates(t *testing.T, p *Plan, atts map[string]*attemptView) {
	t.Helper()
	cfg := events.DefaultConfig()
	byGroup := map[string][]*attemptView{}
	replaced := map[string]bool{}
	for _, a := range atts {
		byGroup[a.started.Group] = append(byGroup[a.started.Group], a)
		if r := a.started.RetryOf; r != "" {
			if prev := atts[r]; prev == nil || prev.failed == nil || prev.started.Group != a.started.Group {
				t.Errorf("attempt %s retries %s, which is not a failed attempt of its group", a.started.Attempt, r)
			}
			replaced[r] = true
		}
	}
	for _, g := range p.Groups {
		var scores []float64
		slots := 0
		for _, a := range byGroup[g.Group] {
			if replaced[a.started.Attempt] {
				continue
			}
			slots++
			if r := a.reward; r != nil {
				s := 1.0
				if !r.Passed {
					s = cfg.PartialCreditCap * float64(r.TestsPassed) / float64(r.TestsTotal)
				}
				scores = append(scores, s)
			}
		}
		if slots != g.Size || len(scores) != g.Rewarded || g.Closed != (g.Rewarded < g.Size) {
			t.Errorf("group %s: %d slots, %d rewarded, closed %v; predicted %+v", g.Group, slots, len(scores), g.Closed, g)
		}
		want := ""
		switch {
		case g.Closed && len(scores) < cfg.MinGroup:
			want = "infra_lost"
		case stddev(scores) <= 1e-6:
			want = "zero_signal"
		}
		if g.Drop != want && !(want == "" && g.Drop == "fully_stale") {
			t.Errorf("group %s: predicted drop %q, the rewards say %q", g.Group, g.Drop, want)
		}
	}
}

func checkTrainer(t *testing.T, p *Plan, steps int) {
	t.Helper()
	var tr *Stream
	for i := range p.Streams {
		if p.Streams[i].Producer == trainer {
			tr = &p.Streams[i]
		}
	}
	if tr == nil || len(tr.Events) != steps+1 {
		t.Fatalf("trainer stream %v, want %d policy.published", tr, steps+1)
	}
	for v, ev := range tr.Events {
		d := ev.Data.(*events.PolicyPublished)
		if d.Version != int64(v) || d.Checkpoint != fmt.Sprintf("ckpt/step-%d", v) || !strings.HasPrefix(d.Digest, "sha256:") || len(d.Digest) != 71 || d.Precision != "fp8" {
			t.Errorf("policy.published %d: %+v", v, d)
		}
		if v > 0 && !ev.At.After(tr.Events[v-1].At) {
			t.Errorf("version %d published at %s, not after version %d", v, ev.At, v-1)
		}
	}
}

func TestShapeZeroSignal(t *testing.T) {
	train, zero := 0, 0
	for seed := uint64(1); seed <= 4; seed++ {
		for _, g := range mustGenerate(t, Options{Seed: seed}, "z").Groups {
			if g.Purpose == events.PurposeTrain {
				train++
				if g.Drop == "zero_signal" {
					zero++
				}
			}
		}
	}
	if f := float64(zero) / float64(train); f < 0.03 || f > 0.25 {
		t.Errorf("%d of %d train groups zero-signal (%.1f%%), want about 10%%", zero, train, 100*f)
	}
}

func TestShapeFailures(t *testing.T) {
	o := Options{Seed: 5, Tasks: 24, Steps: 2, MaxTurns: 80, InfraFailureRate: 0.35}
	p := mustGenerate(t, o, "fail")
	st := statsOf(p)
	t.Logf("failure-heavy plan:\n%s", st)
	if st.byType[events.TypeGroupClosed] == 0 || st.closed != st.byType[events.TypeGroupClosed] {
		t.Errorf("%d group.closed, %d closed groups predicted", st.byType[events.TypeGroupClosed], st.closed)
	}
	if st.retries == 0 || st.drops["infra_lost"]+st.closed == 0 {
		t.Errorf("retries %d, drops %v", st.retries, st.drops)
	}
	atts, _ := attemptsOf(p)
	checkFates(t, p, atts)
	for _, ev := range p.Streams[0].Events {
		if d, ok := ev.Data.(*events.GroupClosed); ok && d.Reason != "retries_exhausted" {
			t.Errorf("group.closed %+v", d)
		}
	}
	none := mustGenerate(t, Options{Seed: 5, Tasks: 24, Steps: 2, MaxTurns: 80, InfraFailureRate: -1}, "none")
	if n := none.ByType()[events.TypeAttemptFailed]; n != 0 {
		t.Errorf("a negative failure rate still failed %d attempts", n)
	}
}

// TestShapeStaleness: with enough steps, staleness in batches is mostly
// 0–4, with a tail past max_staleness (masked turns), never negative.
func TestShapeStaleness(t *testing.T) {
	p := mustGenerate(t, Options{Seed: 3, Steps: 16}, "stale")
	st := statsOf(p)
	t.Logf("16 steps: staleness in batches %s", histogram(st.staleness))
	total, low, masked := 0, 0, 0
	for s, n := range st.staleness {
		total += n
		if s <= 4 {
			low += n
		}
		if s > 6 {
			masked += n
		}
	}
	if st.negative != 0 || low*10 < total*7 || masked == 0 || masked*10 > total {
		t.Errorf("staleness %s: %d of %d turns at 0–4, %d masked", histogram(st.staleness), low, total, masked)
	}
	checkTrainer(t, p, 16)
}
