package simulate

import (
	"fmt"
	"math/rand/v2"

	"github.com/rolloutledger/rolloutledger/events"
)

// Turn-count medians by task tier for a solving attempt; a failing attempt
// wanders about half as long again. With the defaults' [5, 200] range and a
// log-space deviation of 0.8, most attempts take 10–40 turns and a few
// percent run into the turn budget.
var tierMedianTurns = [5]float64{0, 7, 12, 19, 28}

// drawAttempt draws one attempt's whole content from its own PRNG stream,
// so an attempt does not change when another one does. Without full it
// stops before the turns: the attempt's fate (failed, passed, tests) is
// drawn, its turns and duration are not.
func (m *model) drawAttempt(a *attempt, t *task, passProb float64, full bool) {
	r := rand.New(rand.NewPCG(m.seed^saltAttempt, a.serial))
	a.vm = fmt.Sprintf("vm-%012x", r.Uint64()>>16)
	a.forkMS = clampInt(lognormal(r, 130, 0.45), 50, 400)
	a.failed = r.Float64() < m.rate
	a.passed = r.Float64() < passProb
	a.verifyMS = clampInt(lognormal(r, 9000, 0.7), 1500, 120_000)

	median := tierMedianTurns[t.tier] * m.turnMul
	if !a.passed {
		median *= 1.5
	}
	n := m.o.MinTurns + int(lognormal(r, max(median, 0.5), 0.8))
	n = min(n, m.o.MaxTurns)

	a.outcome = events.OutcomeSubmitted
	if !a.passed {
		switch u := r.Float64(); {
		case n == m.o.MaxTurns:
			a.outcome = events.OutcomeTurnBudget
		case u < 0.06:
			a.outcome = events.OutcomeContextBudget
		case u < 0.10:
			a.outcome = events.OutcomeTimeout
		}
		if r.Float64() >= t.zeroCredit && t.testsTotal > 1 {
			a.testsPassed = 1 + r.IntN(t.testsTotal-1)
		}
	} else {
		a.testsPassed = t.testsTotal
	}

	// An infrastructure failure strikes after a few turns; the turns
	// already generated stay in the log.
	keep := n
	if a.failed {
		a.reason = failureReasons[r.IntN(len(failureReasons))]
		a.failMS = clampInt(lognormal(r, 4000, 1), 200, 60_000)
		keep = 0
		if n > 1 {
			keep = 1 + r.IntN(min(n-1, 8))
		}
	}
	if !full {
		return
	}
	a.turns = make([]turn, 0, keep)
	m.drawTurns(r, a, t, n, keep)
}

// turnsOf draws a's turns again: the same ones, from the attempt's own
// stream, as drawAttempt drew and dropped them.
func (m *model) turnsOf(a *attempt) []turn {
	if a.turns != nil {
		return a.turns
	}
	b := attempt{serial: a.serial}
	m.drawAttempt(&b, a.group.task, a.passProb, true)
	return b.turns
}

// drawTurns lays out the turns of an attempt: growing context, prefix-cache
// hits, tool calls and their observations, compaction past the budget.
func (m *model) drawTurns(r *rand.Rand, a *attempt, t *task, n, keep int) {
	budget := int64(m.o.ContextBudget)
	obsCap := min(maxObservation, budget/8)
	ctx := t.promptTokens
	cached := int64(harnessPrefixTokens)
	var obs int64
	at := a.forkMS
	for i := range keep {
		last := i == n-1
		tr := turn{start: at, prompt: ctx, cached: min(cached, ctx), obs: obs, finish: events.FinishToolCall}
		tr.completion = clampInt(lognormal(r, 380, 0.8), 50, maxCompletionTokens)
		if last {
			tr.finish = events.FinishStop
			if a.outcome == events.OutcomeContextBudget || (!a.passed && r.Float64() < 0.04) {
				tr.finish, tr.completion = events.FinishLength, maxCompletionTokens
			}
		}
		tr.latency = 120 + tr.completion*11 + (tr.prompt-tr.cached)/50 + int64(r.IntN(250))
		at += tr.latency
		ctx += tr.completion

		obs = 0
		if !last {
			calls := 1
			switch u := r.Float64(); {
			case u < 0.03:
				calls = 0 // a malformed call the harness refused
			case u < 0.11:
				calls = 2
			}
			for range calls {
				tl := drawTool(r, obsCap)
				at += tl.durationMS
				obs += tl.obsTokens
				tr.tools = append(tr.tools, tl)
			}
			if calls == 0 {
				obs = 16 + int64(r.IntN(32)) // the harness's error message
			}
		}
		ctx += obs
		cached = ctx - obs // everything up to this completion stays in the prefix cache
		if ctx > budget && !last {
			// The summary replaces the history; the latest observation is
			// kept verbatim and opens the next turn.
			summary := budget/10 + int64(r.IntN(int(budget/20)))
			tr.compactBefore, tr.compactTo = ctx, t.promptTokens+summary+obs
			tr.compactMS = 800 + summary*4
			at += tr.compactMS
			ctx, cached = tr.compactTo, t.promptTokens
		}
		at += 20 + int64(r.IntN(60)) // harness overhead between turns
		a.turns = append(a.turns, tr)
	}
	if a.failed {
		a.duration = at + a.failMS
	} else {
		a.duration = at + 200 // submission and teardown bookkeeping
	}
}

// drawTool draws one tool call: mostly bash and edits, long outputs often
// redirected to files, a few background jobs, a few timeouts.
func drawTool(r *rand.Rand, obsCap int64) tool {
	var tl tool
	u := r.Float64()
	switch {
	case u < 0.50:
		tl.name = "bash"
		tl.outputBytes = clampInt(lognormal(r, 1200, 1.6), 0, 4<<20)
		tl.durationMS = clampInt(lognormal(r, 700, 1.2), 5, 110_000)
		switch e := r.Float64(); {
		case e < 0.78:
		case e < 0.93:
			tl.exit = 1
		case e < 0.97:
			tl.exit = 2
		default:
			tl.exit = 127
		}
		switch b := r.Float64(); {
		case b < 0.06:
			tl.background, tl.exit = true, 0
			tl.durationMS, tl.outputBytes = 20+int64(r.IntN(180)), 10+int64(r.IntN(60))
		case b < 0.075:
			tl.timedOut, tl.exit, tl.durationMS = true, 124, 120_000
		}
	case u < 0.70:
		tl.name = "edit"
		tl.outputBytes = clampInt(lognormal(r, 120, 0.5), 10, 4096)
		tl.durationMS = clampInt(lognormal(r, 60, 0.5), 5, 2000)
		if r.Float64() < 0.05 {
			tl.exit = 1
		}
	case u < 0.85:
		tl.name = "run_tests"
		tl.outputBytes = clampInt(lognormal(r, 5000, 1.0), 100, 4<<20)
		tl.durationMS = clampInt(lognormal(r, 12_000, 0.9), 300, 290_000)
		if r.Float64() < 0.5 {
			tl.exit = 1
		}
		if r.Float64() < 0.03 {
			tl.timedOut, tl.exit, tl.durationMS = true, 124, 300_000
		}
	default:
		tl.name = "read_file"
		tl.outputBytes = clampInt(lognormal(r, 3500, 1.0), 1, 1<<20)
		tl.durationMS = clampInt(lognormal(r, 25, 0.5), 2, 1000)
		if r.Float64() < 0.04 {
			tl.exit = 1
		}
	}
	if tl.name == "bash" || tl.name == "run_tests" {
		p := 0.08
		if tl.outputBytes > 16<<10 {
			p = 0.7
		}
		tl.toFile = !tl.background && r.Float64() < p
	}
	if tl.toFile {
		tl.obsTokens = 24 + int64(r.IntN(24)) // "output written to /tmp/out-N.log (B bytes)"
	} else {
		tl.obsTokens = min(tl.outputBytes/4+8, obsCap)
	}
	return tl
}
