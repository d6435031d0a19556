package simulate

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rolloutledger/rolloutledger/events"
)

// planStats summarizes a plan's shape from its events alone, the way the
// audit projection will see it, plus the generator's group predictions.
type planStats struct {
	byType                  map[events.Type]int
	attempts                int
	turns                   []int   // per finished or failed attempt
	tokens                  []int64 // completion + observation + first prompt, per finished attempt
	passedTurns, failedTurn []int
	retries, failed         int
	trainGroups             int
	drops                   map[string]int
	closed                  int
	admitted                int
	compactions             int
	toFile, background      int
	timedOut, nonZeroExit   int
	toolCalls               int
	maxVersion              int64
	staleness               map[int64]int // (batch-1) - version over turns of batched groups
	lag                     map[int64]int // max version - turn version, over all turns
	versionDecrease         int           // turns whose version is below the previous turn's
	negative                int
	finishes                map[string]int
	outcomes                map[string]int
}

func statsOf(p *Plan) *planStats {
	st := &planStats{
		byType: p.ByType(), drops: map[string]int{}, staleness: map[int64]int{}, lag: map[int64]int{},
		finishes: map[string]int{}, outcomes: map[string]int{},
	}
	groups := map[string]GroupInfo{}
	for _, g := range p.Groups {
		groups[g.Group] = g
		if g.Purpose == events.PurposeTrain {
			st.trainGroups++
			st.drops[g.Drop]++
		}
		if g.Closed {
			st.closed++
		}
	}
	for _, t := range p.Tasks {
		if t.Admitted {
			st.admitted++
		}
	}
	type att struct {
		group    string
		turns    int
		tokens   int64
		versions []int64
		lastV    int64
	}
	atts := map[string]*att{}
	all := p.All()
	for _, ev := range all {
		if d, ok := ev.Data.(*events.PolicyPublished); ok {
			st.maxVersion = max(st.maxVersion, d.Version)
		}
	}
	for _, ev := range all {
		switch d := ev.Data.(type) {
		case *events.AttemptStarted:
			st.attempts++
			if d.RetryOf != "" {
				st.retries++
			}
			atts[d.Attempt] = &att{group: d.Group, lastV: -1}
		case *events.TurnGenerated:
			a := atts[d.Attempt]
			if a.turns == 0 {
				a.tokens = d.PromptTokens
			}
			a.turns++
			a.tokens += d.CompletionTokens
			if d.PolicyVersion() < a.lastV {
				st.versionDecrease++
			}
			a.lastV = d.PolicyVersion()
			a.versions = append(a.versions, d.PolicyVersion())
			st.lag[st.maxVersion-d.PolicyVersion()]++
			st.finishes[d.Finish]++
		case *events.ToolCalled:
			st.toolCalls++
			if d.ToFile {
				st.toFile++
			}
			if d.Background {
				st.background++
			}
			if d.TimedOut {
				st.timedOut++
			}
			if d.ExitCode != 0 {
				st.nonZeroExit++
			}
		case *events.ContextCompacted:
			st.compactions++
		case *events.AttemptFailed:
			st.failed++
		case *events.AttemptFinished:
			st.outcomes[d.Outcome]++
			st.turns = append(st.turns, atts[d.Attempt].turns)
		case *events.RewardComputed:
			a := atts[d.Attempt]
			st.tokens = append(st.tokens, a.tokens)
			if d.Passed {
				st.passedTurns = append(st.passedTurns, a.turns)
			} else {
				st.failedTurn = append(st.failedTurn, a.turns)
			}
			if g := groups[a.group]; g.Batch > 0 {
				for _, v := range a.versions {
					s := int64(g.Batch-1) - v
					st.staleness[s]++
					if s < 0 {
						st.negative++
					}
				}
			}
		}
	}
	return st
}

func quantiles[T int | int64](xs []T) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q := func(f float64) T { return s[int(f*float64(len(s)-1))] }
	return fmt.Sprintf("min %v p50 %v p90 %v p99 %v max %v", s[0], q(0.5), q(0.9), q(0.99), s[len(s)-1])
}

func histogram[K int64 | string](m map[K]int) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%v:%d ", k, m[k])
	}
	return b.String()
}

func (st *planStats) String() string {
	var b strings.Builder
	total := 0
	for _, t := range events.FactTypes() {
		if n := st.byType[t]; n > 0 {
			fmt.Fprintf(&b, "  %-18s %d\n", t, n)
			total += n
		}
	}
	fmt.Fprintf(&b, "  total              %d\n", total)
	fmt.Fprintf(&b, "attempts %d (retries %d, failed %d), admitted tasks %d\n", st.attempts, st.retries, st.failed, st.admitted)
	fmt.Fprintf(&b, "turns/attempt: %s\n", quantiles(st.turns))
	fmt.Fprintf(&b, "  passed: %s\n  failed: %s\n", quantiles(st.passedTurns), quantiles(st.failedTurn))
	fmt.Fprintf(&b, "tokens/attempt (prompt0+completions): %s\n", quantiles(st.tokens))
	fmt.Fprintf(&b, "train groups %d, drops %s, closed groups %d\n", st.trainGroups, histogram(st.drops), st.closed)
	fmt.Fprintf(&b, "tool calls %d: to_file %d background %d timed_out %d nonzero %d; compactions %d\n",
		st.toolCalls, st.toFile, st.background, st.timedOut, st.nonZeroExit, st.compactions)
	fmt.Fprintf(&b, "finishes %s; outcomes %s\n", histogram(st.finishes), histogram(st.outcomes))
	fmt.Fprintf(&b, "max version %d; staleness in batches %s(negative %d)\n", st.maxVersion, histogram(st.staleness), st.negative)
	fmt.Fprintf(&b, "max version minus turn version %s\n", histogram(st.lag))
	return b.String()
}
