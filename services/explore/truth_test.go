package explore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/dataset"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// memSource is a run's history held in memory: facts in the order given,
// and the decisions the projection rules conclude over that order.
type memSource struct {
	run  string
	recs []projections.Record
	ds   []projections.Decision
}

func (s *memSource) Run() string      { return s.run }
func (s *memSource) Describe() string { return "memory" }
func (s *memSource) Facts(_ context.Context, fn func(replay.Fact) error) error {
	for i, r := range s.recs {
		if err := fn(replay.Fact{Seq: uint64(i + 1), Partition: r.Partition, Offset: r.Offset, Value: r.Value}); err != nil {
			return err
		}
	}
	return nil
}
func (s *memSource) Decisions(_ context.Context, fn func(replay.Recorded) error) error {
	for i, d := range s.ds {
		if err := fn(replay.Recorded{Offset: int64(i), Value: d.Value}); err != nil {
			return err
		}
	}
	return nil
}

// orders of a generated run's producer streams: the log order (by the
// producers' clocks), the verifier's rewards all first (before every
// attempt they judge), and seeded interleavings that keep each producer's
// own order — every order the contract allows, and more.
func orders(plan *simulate.Plan, seeds int) map[string][]events.Event {
	type item struct {
		ev     events.Event
		stream int
	}
	var all []item
	for si, st := range plan.Streams {
		for _, ev := range st.Events {
			all = append(all, item{ev, si})
		}
	}
	slices.SortStableFunc(all, func(a, b item) int { return a.ev.At.Compare(b.ev.At) })
	out := map[string][]events.Event{}
	for _, it := range all {
		out["log"] = append(out["log"], it.ev)
	}
	var first, rest []events.Event
	for _, ev := range out["log"] {
		if ev.Type == events.TypeRewardComputed {
			first = append(first, ev)
		} else {
			rest = append(rest, ev)
		}
	}
	out["rewards-first"] = append(first, rest...)
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 25))
		next := make([]int, len(plan.Streams))
		var order []events.Event
		for {
			var live []int
			for si, st := range plan.Streams {
				if next[si] < len(st.Events) {
					live = append(live, si)
				}
			}
			if len(live) == 0 {
				break
			}
			si := live[rng.IntN(len(live))]
			// A burst of the producer's next facts, so that whole attempts
			// overtake others, as a slow producer's do.
			for n := 1 + rng.IntN(40); n > 0 && next[si] < len(plan.Streams[si].Events); n-- {
				order = append(order, plan.Streams[si].Events[next[si]])
				next[si]++
			}
		}
		out[fmt.Sprintf("interleaving-%d", seed)] = order
	}
	return out
}

// TestExplorerTellsTheTruth: every figure the explorer shows of an attempt
// (verdict, tests, score, reward, advantage, turns, tokens, batch), a
// group (passed), a step (passed per group, solves) and a task (attempts,
// solved) equals what the projections' decisions and the dataset export
// say of the same history, in log order, with every reward before its
// attempt, and under reorderings; and the facts' own figures do not
// depend on the order at all.
func TestExplorerTellsTheTruth(t *testing.T) {
	const run = "run-truth"
	plan, err := simulate.Generate(simulate.Options{Seed: 25, Tasks: 12, Steps: 4, BatchGroups: 3, GroupSize: 4,
		MinTurns: 2, MaxTurns: 10, MaxStaleness: 1}, run)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var logRows map[string]explore.AttemptRow
	names := []string{"log", "rewards-first"}
	all := orders(plan, 6)
	for name := range all {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names[2:])
	for _, name := range names {
		evs := all[name]
		t.Run(name, func(t *testing.T) {
			if name == "rewards-first" {
				if n := projections.CausalInversions(evs); n == 0 {
					t.Fatal("no reward arrives before its attempt")
				} else {
					t.Logf("%d facts come before their cause", n)
				}
			}
			recs := make([]projections.Record, len(evs))
			for i, ev := range evs {
				b, err := events.Encode(ev)
				if err != nil {
					t.Fatal(err)
				}
				dec, err := events.Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				recs[i] = projections.Record{Value: b, Event: dec, Offset: int64(i)}
			}
			ds, err := projections.FoldAll(run, recs)
			if err != nil {
				t.Fatal(err)
			}
			m := explore.NewModel(run)
			for _, r := range recs {
				m.Fact(r.Partition, r.Offset, r.Value, r.Event)
			}
			for _, d := range ds {
				if err := m.Decision(d.Value); err != nil {
					t.Fatal(err)
				}
			}
			ex, err := dataset.Build(ctx, &memSource{run, recs, ds}, dataset.Options{ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			rows := checkTruth(t, m, ds, ex)
			if name == "log" {
				logRows = rows
				return
			}
			// What the facts alone say is the same in every order.
			for id, w := range logRows {
				g := rows[id]
				if fmt.Sprint(factFigures(g)) != fmt.Sprint(factFigures(w)) {
					t.Errorf("attempt %s: %v in this order, %v in log order", id, factFigures(g), factFigures(w))
				}
			}
		})
	}
}

func factFigures(r explore.AttemptRow) []any {
	return []any{r.Group, r.Task, r.Purpose, r.Outcome, deref(r.Passed), deref(r.TestsPassed), deref(r.TestsTotal), r.Turns,
		r.CompletionTokens, r.PromptTokens, r.ToolCalls, r.Finish}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkTruth compares the explorer's figures with the decisions and the
// export, and returns the explorer's attempt rows by id.
func checkTruth(t *testing.T, m *explore.Model, ds []projections.Decision, ex *dataset.Run) map[string]explore.AttemptRow {
	t.Helper()
	errs := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if errs++; errs <= 12 {
			t.Errorf(format, args...)
		}
	}
	defer func() {
		if errs > 12 {
			t.Errorf("… %d differences in all", errs)
		}
	}()
	rows := map[string]explore.AttemptRow{}
	for _, r := range m.Attempts() {
		rows[r.Attempt] = r
	}
	var exAttempts []*dataset.Attempt
	for a, err := range ex.EachAttempt() {
		if err != nil {
			t.Fatal(err)
		}
		exAttempts = append(exAttempts, a)
	}
	if len(rows) != len(exAttempts) || len(exAttempts) != ex.AttemptCount() {
		fail("the explorer lists %d attempts, the export %d (of %d started)", len(rows), len(exAttempts), ex.AttemptCount())
	}
	rewarded := 0
	for _, a := range exAttempts {
		r, ok := rows[a.Attempt]
		if !ok {
			fail("attempt %s: in the export, not in the explorer", a.Attempt)
			continue
		}
		if a.Rewarded {
			rewarded++
		}
		outcome := a.Outcome
		switch {
		case a.FailureReason != "":
			outcome = "failed: " + a.FailureReason
		case outcome == "":
			outcome = "running"
		}
		var want, got []any
		want = append(want, a.Group, a.Task, outcome, a.Turns, a.CompletionTokens, a.PromptTokens, a.Batch, a.DropReason)
		got = append(got, r.Group, r.Task, r.Outcome, r.Turns, r.CompletionTokens, r.PromptTokens, r.Batch, r.DropReason)
		if a.Rewarded {
			want = append(want, a.Passed, a.TestsPassed, a.TestsTotal)
		} else {
			want = append(want, nil, nil, nil)
		}
		got = append(got, deref(r.Passed), deref(r.TestsPassed), deref(r.TestsTotal))
		if a.Batch != 0 {
			want = append(want, a.Score, a.Bonus, a.Reward, a.Advantage)
		} else {
			want = append(want, nil, nil, nil, nil)
		}
		got = append(got, deref(r.Score), deref(r.Bonus), deref(r.Reward), deref(r.Advantage))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			fail("attempt %s: the explorer shows %v, the export %v (group, task, outcome, turns, tokens, prompt tokens, batch, drop, passed, tests passed, total, score, bonus, reward, advantage)", a.Attempt, got, want)
		}
	}
	if rewarded == 0 {
		t.Fatal("the export holds no rewarded attempt")
	}

	// Groups and tasks: the passed and solved counts.
	passedIn := map[string]int{}
	solved, attempts := map[string]int{}, map[string]int{}
	for _, a := range exAttempts {
		attempts[a.Task]++
		if a.Rewarded && a.Passed {
			passedIn[a.Group]++
			solved[a.Task]++
		}
	}
	groups := map[string]bool{}
	for _, a := range exAttempts {
		groups[a.Group] = true
	}
	for g := range groups {
		v, ok := m.GroupView(g)
		if !ok {
			fail("group %s: not in the explorer", g)
			continue
		}
		if got := countPassed(v.Attempts); got != passedIn[g] {
			fail("group %s: the explorer shows %d passed, the export %d", g, got, passedIn[g])
		}
	}
	for _, tr := range m.Tasks() {
		if tr.Solved != solved[tr.Task] || tr.Attempts != attempts[tr.Task] {
			fail("task %s: the explorer shows solved %d of %d attempts, the export %d of %d", tr.Task, tr.Solved, tr.Attempts, solved[tr.Task], attempts[tr.Task])
		}
		if v, ok := m.TaskView(tr.Task); !ok || v.Solved != tr.Solved {
			fail("task %s: its view shows solved %d, the list %d", tr.Task, v.Solved, tr.Solved)
		}
	}

	// Steps: each sealed batch's attempts as the decision judged them.
	rv := m.RunView(simulate.Epoch)
	sealed := 0
	for _, d := range ds {
		if d.Kind != projections.KindBatchSealed {
			continue
		}
		sealed++
		var env struct {
			Data projections.Manifest `json:"data"`
		}
		if err := json.Unmarshal(d.Value, &env); err != nil {
			t.Fatal(err)
		}
		man := env.Data
		sv, ok := m.StepView(man.Seq)
		if !ok {
			fail("step %d: sealed, not in the explorer", man.Seq)
			continue
		}
		if len(sv.Groups) != len(man.Groups) {
			fail("step %d: the explorer shows %d groups, the decision %d", man.Seq, len(sv.Groups), len(man.Groups))
			continue
		}
		stepPassed := 0
		for gi, mg := range man.Groups {
			sg := sv.Groups[gi]
			want := 0
			for _, ma := range mg.Attempts {
				if ma.Score == 1 {
					want++
				}
				r := rows[ma.Attempt]
				if r.Batch != man.Seq || deref(r.Score) != ma.Score || deref(r.Reward) != ma.Reward || deref(r.Advantage) != ma.Advantage {
					fail("step %d attempt %s: the explorer shows batch %d score %v reward %v advantage %v, the decision %v %v %v", man.Seq, ma.Attempt,
						r.Batch, deref(r.Score), deref(r.Reward), deref(r.Advantage), ma.Score, ma.Reward, ma.Advantage)
				}
			}
			if got := countPassed(sg.Attempts); sg.Group != mg.Group || got != want || len(sg.Attempts) != len(mg.Attempts) {
				fail("step %d group %s: the explorer shows %d of %d passed, the decision %d of %d", man.Seq, mg.Group, got, len(sg.Attempts), want, len(mg.Attempts))
			}
			stepPassed += want
		}
		var st *projections.StepAudit
		for i := range rv.Steps {
			if rv.Steps[i].Step == man.Seq {
				st = &rv.Steps[i].StepAudit
			}
		}
		if st == nil || st.Solves != stepPassed || sv.Metrics == nil || sv.Metrics.Solves != stepPassed {
			fail("step %d: the groups' passed add up to %d, the trend's solves are %v", man.Seq, stepPassed, st)
		}
	}
	if sealed == 0 || sealed != rv.Batches {
		t.Fatalf("%d batches sealed, the explorer shows %d", sealed, rv.Batches)
	}
	return rows
}

func countPassed(rows []explore.AttemptRow) int {
	n := 0
	for _, r := range rows {
		if r.Passed != nil && *r.Passed {
			n++
		}
	}
	return n
}
