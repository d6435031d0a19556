package projections

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// A run written by several producers: the scheduler, three engines, the
// verifier and the trainer. The log the ledger sees is some interleaving of
// their streams, and of other runs' streams. docs/design.md §5.3 promises
// that any interleaving keeping what it lists yields the same decisions,
// apart from the positions they quote; constraints states that list as
// edges, and TestInterleavings folds hundreds of random interleavings of
// two runs' facts that keep it.

type producerRun struct {
	b         *runBuilder
	id        string // the run
	canonical []events.Event
	producer  []int // producer of each canonical event
}

func (r *producerRun) run() string { return r.id }

// renamed is the same run under another run id, its events with other ids:
// a second run whose producers write beside the first's.
func (r *producerRun) renamed(run string) *producerRun {
	out := &producerRun{b: r.b, id: run, producer: r.producer}
	for _, ev := range r.canonical {
		ev.Run = run
		ev.ID = strings.Replace(ev.ID, "-7000-8000-", "-7000-9000-", 1)
		out.canonical = append(out.canonical, ev)
	}
	return out
}

const (
	pScheduler = iota
	pEngine1
	pEngine2
	pEngine3
	pVerifier
	pTrainer
	nProducers
)

func (r *producerRun) emit(p int, source string, data events.Fact) events.Event {
	ev := r.b.event(source, data)
	r.canonical = append(r.canonical, ev)
	r.producer = append(r.producer, p)
	return ev
}

// again appends ev a second time (a producer's retry).
func (r *producerRun) again(p int, ev events.Event) {
	r.canonical = append(r.canonical, ev)
	r.producer = append(r.producer, p)
}

type plannedAttempt struct {
	id, retryOf string
	versions    []int64
	tokens      bool // inline tokens on every turn
	compactAt   int  // compaction after this turn; -1 for none
	failed      bool // infrastructure failure: no reward
	passed      bool // the verdict
	tests       int  // tests passed of 4 when failed
	noFinish    bool // still running when the group is closed
	late        bool // its reward comes after the group completed
	rewardFirst bool // the verifier's reward is logged before the engine's facts
}

// buildProducerRun lays out the run in one causal order (the canonical log).
func buildProducerRun(t testing.TB) *producerRun {
	r := &producerRun{b: newRun(t), id: testRun}
	sched := func(d events.Fact) events.Event { return r.emit(pScheduler, "scheduler", d) }
	engine := 0
	group := func(id, task, purpose string, size int, atts []plannedAttempt, closeAfter int) {
		sched(&events.GroupStarted{Group: id, Task: task, Size: size, Purpose: purpose})
		var rewards []plannedAttempt
		for i, a := range atts {
			p := pEngine1 + engine%3
			engine++
			src := fmt.Sprintf("engine-%d", p)
			if a.rewardFirst {
				r.emit(pVerifier, "verifier", &events.RewardComputed{Attempt: a.id, Passed: a.passed, TestsPassed: a.tests, TestsTotal: 4, Verifier: "pytest"})
			}
			r.emit(p, src, &events.AttemptStarted{Attempt: a.id, Group: id, Task: task, Engine: src, VM: "vm-" + a.id, ForkMS: 100, RetryOf: a.retryOf})
			for n, v := range a.versions {
				tg := &events.TurnGenerated{Attempt: a.id, Turn: n, VersionSegments: events.SingleVersion(v), PromptTokens: 50, CompletionTokens: int64(3 + n + i),
					Finish: events.FinishToolCall, LatencyMS: 700}
				if a.tokens {
					tg.ObservationTokenIDs = []int32{int32(100*i + 10*n)}
					for k := range tg.CompletionTokens {
						tg.TokenIDs = append(tg.TokenIDs, int32(1000*i+10*n+int(k)))
						tg.Logprobs = append(tg.Logprobs, lp(int(k)))
					}
				}
				r.emit(p, src, tg)
				if n == a.compactAt {
					r.emit(p, src, &events.ContextCompacted{Attempt: a.id, Turn: n, TokensBefore: 5000, TokensAfter: 900})
				}
			}
			switch {
			case a.failed:
				r.emit(p, src, &events.AttemptFailed{Attempt: a.id, Reason: "sandbox_lost"})
			case !a.noFinish:
				r.emit(p, src, &events.AttemptFinished{Attempt: a.id, Outcome: events.OutcomeSubmitted})
			}
			if !a.failed && !a.late && !a.rewardFirst && !a.noFinish {
				rewards = append(rewards, a)
			}
		}
		for i, a := range rewards {
			if i == closeAfter {
				sched(&events.GroupClosed{Group: id, Reason: "retries_exhausted"})
			}
			r.emit(pVerifier, "verifier", &events.RewardComputed{Attempt: a.id, Passed: a.passed, TestsPassed: a.tests, TestsTotal: 4, Verifier: "pytest"})
		}
		if closeAfter >= len(rewards) {
			sched(&events.GroupClosed{Group: id, Reason: "retries_exhausted"})
		}
		for _, a := range atts {
			if a.late || a.noFinish {
				if a.noFinish {
					r.emit(pEngine1, "engine-1", &events.AttemptFinished{Attempt: a.id, Outcome: events.OutcomeSubmitted})
				}
				r.emit(pVerifier, "verifier", &events.RewardComputed{Attempt: a.id, Passed: a.passed, TestsPassed: a.tests, TestsTotal: 4, Verifier: "pytest"})
			}
		}
	}
	const never = 1 << 30
	simple := func(prefix string, versions []int64, outcomes ...bool) []plannedAttempt {
		var out []plannedAttempt
		for i, passed := range outcomes {
			out = append(out, plannedAttempt{id: fmt.Sprintf("%s/a%d", prefix, i), versions: versions, compactAt: -1, passed: passed, tests: i % 4})
		}
		return out
	}

	sched(&events.RunStarted{Config: events.RunConfig{GroupSize: ptr(4), BatchGroups: ptr(2), MaxStaleness: ptr(1), Advantage: ptr(events.AdvantageRLOO)}, Model: "m", Harness: "h"})
	for _, task := range []string{"tA", "tB"} {
		sched(&events.TaskRegistered{Task: task, Source: "MiMo-TB", Kind: "agentic", Tier: 2, Gates: []events.Gate{{Name: "builds", Passed: true}}})
	}
	r.emit(pTrainer, "trainer", &events.PolicyPublished{Version: 0, Checkpoint: "ckpt-0", Digest: "sha256:00", Precision: "fp8"})

	group("pA", "tA", events.PurposeProbe, 4, simple("pA", []int64{0}, true, false, true, false), never) // 2/4: admitted
	group("pB", "tB", events.PurposeProbe, 4, simple("pB", []int64{0}, true, true, true, true), never)   // 4/4: rejected

	// g1: inline tokens, a compaction, a reward logged before its attempt
	// started, and a fifth attempt whose reward is late.
	g1 := simple("g1", []int64{0, 0, 0}, true, false, false, true, true)
	for i := range g1 {
		g1[i].tokens = true
	}
	g1[0].compactAt = 1
	g1[2].rewardFirst = true
	g1[4].late = true
	group("g1", "tA", events.PurposeTrain, 4, g1, never)
	group("g2", "tB", events.PurposeTrain, 4, simple("g2", []int64{0}, true, false, true, false), never) // unadmitted
	// g3: a slot whose first attempt fails and whose retry fills it.
	g3 := simple("g3", []int64{0}, true, false, true, false)
	g3 = slices.Insert(g3, 1, plannedAttempt{id: "g3/a1-fail", versions: []int64{0}, compactAt: -1, failed: true})
	g3[2].retryOf = "g3/a1-fail"
	group("g3", "tA", events.PurposeTrain, 4, g3, never) // seals batch 1 with g1
	r.emit(pTrainer, "trainer", &events.PolicyPublished{Version: 1, Checkpoint: "ckpt-1", Digest: "sha256:01", Precision: "fp8"})
	r.emit(pTrainer, "trainer", &events.GradientApplied{Step: 1, Batch: 1, BatchDigest: "sha256:not-the-sealed-one", FromVersion: 0, ToVersion: 1,
		Loss: 0.4, TrainedTokens: 100, LogprobGap: map[string]float64{"0": 0.05}, GradNorm: 1})

	// g4: closed before its last reward, with a slot lost to infrastructure
	// and an attempt still running at the close.
	g4 := simple("g4", []int64{1, 1}, true, false, true)
	g4 = append(g4, plannedAttempt{id: "g4/a3", versions: []int64{1}, compactAt: -1, failed: true})
	g4 = append(g4, plannedAttempt{id: "g4/a4", retryOf: "g4/a3", versions: []int64{1}, compactAt: -1, noFinish: true, passed: true})
	group("g4", "tA", events.PurposeTrain, 4, g4, 2)
	group("g5", "tA", events.PurposeTrain, 4, simple("g5", []int64{1}, true, true, true, true), never) // zero signal
	// g6: batch 2, staleness 1 and −1; a slot whose attempt and its retry
	// both complete, the attempt first: it holds the slot.
	g6 := simple("g6", []int64{0, 2}, true, false, false, true)
	g6 = slices.Insert(g6, 2, plannedAttempt{id: "g6/a1r", retryOf: "g6/a1", versions: []int64{0, 2}, compactAt: -1, passed: true})
	group("g6", "tA", events.PurposeTrain, 4, g6, never)
	group("e1", "tC", events.PurposeEval, 2, simple("e1", []int64{1}, true, false), never) // tC never registered
	r.emit(pTrainer, "trainer", &events.PolicyPublished{Version: 2, Checkpoint: "ckpt-2", Digest: "sha256:02", Precision: "fp8"})
	group("g7", "tA", events.PurposeTrain, 4, simple("g7", []int64{0}, true, false, true, false), never) // staleness 2 in batch 3: fully stale
	g8 := simple("g8", []int64{2, 1, 2}, false, false, true, true)                                       // a version jump
	group("g8", "tA", events.PurposeTrain, 4, g8, never)
	// The verifier redelivers its last reward; an engine sends another
	// version of a turn it already sent.
	r.again(pVerifier, r.canonical[len(r.canonical)-1])
	group("g9", "tA", events.PurposeTrain, 4, simple("g9", []int64{2}, false, true, false, true), never) // seals batch 3
	var turn events.Event
	for i, ev := range r.canonical {
		if ev.Type == events.TypeTurnGenerated && r.producer[i] == pEngine2 {
			turn = ev
		}
	}
	conflict := turn
	td := *turn.Data.(*events.TurnGenerated)
	td.LatencyMS++
	conflict.Data = &td
	r.again(pEngine2, conflict)
	r.emit(pTrainer, "trainer", &events.GradientApplied{Step: 2, Batch: 9, BatchDigest: "sha256:00", FromVersion: 1, ToVersion: 2,
		Loss: 0.4, TrainedTokens: 100, LogprobGap: map[string]float64{"1": 0.07}, GradNorm: 1})
	return r
}

// groupsOf names the groups each canonical event is about.
func (r *producerRun) groupsOf() [][]string {
	attemptGroup := map[string]string{}
	taskGroups := map[string][]string{}
	for _, ev := range r.canonical {
		switch d := ev.Data.(type) {
		case *events.AttemptStarted:
			attemptGroup[d.Attempt] = d.Group
		case *events.GroupStarted:
			taskGroups[d.Task] = append(taskGroups[d.Task], d.Group)
		}
	}
	out := make([][]string, len(r.canonical))
	for i, ev := range r.canonical {
		switch d := ev.Data.(type) {
		case *events.TaskRegistered:
			out[i] = taskGroups[d.Task]
		case *events.GroupStarted:
			out[i] = []string{d.Group}
		case *events.GroupClosed:
			out[i] = []string{d.Group}
		case *events.AttemptStarted:
			out[i] = []string{d.Group}
		case *events.TurnGenerated:
			out[i] = []string{attemptGroup[d.Attempt]}
		case *events.ContextCompacted:
			out[i] = []string{attemptGroup[d.Attempt]}
		case *events.AttemptFinished:
			out[i] = []string{attemptGroup[d.Attempt]}
		case *events.AttemptFailed:
			out[i] = []string{attemptGroup[d.Attempt]}
		case *events.RewardComputed:
			out[i] = []string{attemptGroup[d.Attempt]}
		}
	}
	return out
}

// constraints folds the canonical log and derives what every interleaving
// must keep (docs/design.md §5.3):
//
//   - each producer's own order;
//   - the completing facts of all groups in their order, and run.started
//     before every completion;
//   - each fact about a group on its side of the group's completing fact,
//     except an attempt.finished whose attempt has no reward before the
//     completion, at it included: the attempt is not complete there either way, and a late
//     attempt.finished changes nothing, so it moves freely against the
//     completion — a group.closed included;
//   - for two attempts of one slot both complete at the group's
//     completion, the one that completed first completing first (both its
//     facts before the other's completing fact);
//   - each gradient.applied on its side of the seal of its batch.
func (r *producerRun) constraints(t *testing.T) [][]int {
	t.Helper()
	recs := records(t, r.canonical)
	about := r.groupsOf()
	f, s := NewFold(r.run()), NewMemStore()
	completedAt := map[string]int{}
	sealedAt := map[uint64]int{}
	var completions []int
	var groups []string
	for _, ev := range r.canonical {
		if d, ok := ev.Data.(*events.GroupStarted); ok {
			groups = append(groups, d.Group)
		}
	}
	for i, rec := range recs {
		ds, err := f.Apply(s, rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Kind == KindBatchSealed {
				sealedAt[d.Seq] = i
			}
		}
		for _, g := range groups {
			if _, ok := completedAt[g]; ok {
				continue
			}
			if b, ok, _ := s.Get(groupKey(g)); ok {
				if gs, err := decodeGroup(b); err == nil && gs.done {
					completedAt[g] = i
					completions = append(completions, i)
				}
			}
		}
	}
	if len(completedAt) != len(groups) {
		t.Fatalf("%d of %d groups completed in the canonical log", len(completedAt), len(groups))
	}

	after := make([][]int, len(recs)) // after[i]: nodes that must come after i
	edge := func(a, b int) {
		if a < b {
			after[a] = append(after[a], b)
		} else if a > b {
			after[b] = append(after[b], a)
		}
	}
	last := make([]int, nProducers)
	for i := range last {
		last[i] = -1
	}
	for i, p := range r.producer {
		if last[p] >= 0 {
			edge(last[p], i)
		}
		last[p] = i
	}
	for i := 1; i < len(completions); i++ {
		edge(completions[i-1], completions[i])
	}
	// The first reward and attempt.finished of each attempt, and its slot.
	rewardAt, finishedAt := map[string]int{}, map[string]int{}
	group, retryOf := map[string]string{}, map[string]string{}
	for i, ev := range r.canonical {
		switch d := ev.Data.(type) {
		case *events.RewardComputed:
			if _, ok := rewardAt[d.Attempt]; !ok {
				rewardAt[d.Attempt] = i
			}
		case *events.AttemptFinished:
			if _, ok := finishedAt[d.Attempt]; !ok {
				finishedAt[d.Attempt] = i
			}
		case *events.AttemptStarted:
			group[d.Attempt], retryOf[d.Attempt] = d.Group, d.RetryOf
		}
	}
	// rewardedBy says the attempt's reward is at or before position at.
	rewardedBy := func(attempt string, at int) bool {
		i, ok := rewardAt[attempt]
		return ok && i <= at
	}
	for i, ev := range r.canonical {
		for _, g := range about[i] {
			c := completedAt[g]
			if d, ok := ev.Data.(*events.AttemptFinished); ok && i != c && !rewardedBy(d.Attempt, c) {
				continue
			}
			edge(i, c)
		}
		switch d := ev.Data.(type) {
		case *events.RunStarted:
			for _, c := range completions {
				edge(i, c)
			}
		case *events.GradientApplied:
			if s, ok := sealedAt[uint64(d.Batch)]; ok {
				edge(i, s)
			}
		}
	}
	// Two complete attempts of one slot: a retry and what it retries.
	for a, orig := range retryOf {
		if orig == "" || group[orig] != group[a] {
			continue
		}
		c := completedAt[group[a]]
		fa, okA := finishedAt[a]
		fo, okO := finishedAt[orig]
		if !okA || !okO || !rewardedBy(a, c) || !rewardedBy(orig, c) || max(fa, rewardAt[a]) > c || max(fo, rewardAt[orig]) > c {
			continue
		}
		first, second := orig, a
		if max(fa, rewardAt[a]) < max(fo, rewardAt[orig]) {
			first, second = a, orig
		}
		done := max(finishedAt[second], rewardAt[second])
		edge(finishedAt[first], done)
		edge(rewardAt[first], done)
	}
	return after
}

// interleave returns a random order of the canonical log's indices that
// respects the constraints: at each step it takes a fact, uniformly among
// those whose predecessors are all placed.
func interleave(after [][]int, rng *rand.Rand) []int {
	indeg := make([]int, len(after))
	for _, next := range after {
		for _, j := range next {
			indeg[j]++
		}
	}
	var ready, order []int
	for i, d := range indeg {
		if d == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		k := rng.IntN(len(ready))
		i := ready[k]
		ready = slices.Delete(ready, k, k+1)
		order = append(order, i)
		for _, j := range after[i] {
			if indeg[j]--; indeg[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	return order
}

// positionFree is the decisions with every position stripped: the fact
// that caused each; the watermark, tree head, digest, completion positions
// and turn positions of manifests; the sealed digest a mismatch names
// (which covers positions). Batches and admissions keep their order and
// sequence numbers; findings are compared as a sorted multiset, since
// their relative order — and so their numbers — may follow the
// interleaving of unrelated facts.
func positionFree(t testing.TB, ds []Decision) []string {
	t.Helper()
	var ordered, findings []string
	for _, d := range ds {
		env := envelopeOf(t, d)
		switch d.Kind {
		case KindBatchSealed:
			m, err := ManifestOf(d.Value)
			if err != nil {
				t.Fatal(err)
			}
			m.Watermark, m.Tree, m.Digest = LogPosition{}, TreeHead{}, ""
			for gi := range m.Groups {
				m.Groups[gi].Completed = LogPosition{}
				for ai := range m.Groups[gi].Attempts {
					for ti := range m.Groups[gi].Attempts[ai].Turns {
						m.Groups[gi].Attempts[ai].Turns[ti].Partition = 0
						m.Groups[gi].Attempts[ai].Turns[ti].Offset = 0
					}
				}
			}
			b, err := events.CanonicalJSON(m)
			if err != nil {
				t.Fatal(err)
			}
			ordered = append(ordered, fmt.Sprintf("%s %d %s %s\n%s", d.Kind, d.Seq, d.ID, b, d.Samples))
		case KindAuditFinding:
			var f Finding
			if err := json.Unmarshal(env.Data, &f); err != nil {
				t.Fatal(err)
			}
			if f.Kind == FindingBatchDigestMismatch {
				f.Want = ""
			}
			b, err := events.CanonicalJSON(f)
			if err != nil {
				t.Fatal(err)
			}
			findings = append(findings, string(b))
		default:
			ordered = append(ordered, fmt.Sprintf("%s %d %s %s", d.Kind, d.Seq, d.ID, env.Data))
		}
	}
	slices.Sort(findings)
	return append(ordered, findings...)
}

func TestInterleavings(t *testing.T) {
	r1 := buildProducerRun(t)
	r2 := r1.renamed("run-2")
	runs := []*producerRun{r1, r2}
	// One log of both runs: run k's event i is node base[k]+i, and each
	// run's producers are its own.
	var after [][]int
	var base []int
	var canonical [][]Record
	var wantFree [][]string
	for _, r := range runs {
		base = append(base, len(after))
		for _, next := range r.constraints(t) {
			shifted := make([]int, len(next))
			for n, j := range next {
				shifted[n] = base[len(base)-1] + j
			}
			after = append(after, shifted)
		}
		recs := records(t, r.canonical)
		canonical = append(canonical, recs)
		want, err := FoldAll(r.run(), recs)
		if err != nil {
			t.Fatal(err)
		}
		wantFree = append(wantFree, positionFree(t, want))
		if r == r1 {
			checkCanonical(t, want)
		}
	}

	seeds := uint64(300)
	if testing.Short() {
		seeds = 30
	}
	var moved exercised
	for seed := range seeds {
		order := interleave(after, rand.New(rand.NewPCG(seed, 0x1e4e)))
		if len(order) != len(after) {
			t.Fatalf("seed %d: the constraints have a cycle", seed)
		}
		// Each run's records in the order of the one log, at the
		// offsets of that log; each run folded by its own fold, as the
		// projector does.
		evs := make([][]events.Event, len(runs))
		recs := make([][]Record, len(runs))
		for i, node := range order {
			k := 0
			for k+1 < len(base) && node >= base[k+1] {
				k++
			}
			rec := canonical[k][node-base[k]]
			rec.Offset = 1000 + 3*int64(i)
			recs[k] = append(recs[k], rec)
			evs[k] = append(evs[k], runs[k].canonical[node-base[k]])
		}
		moved.count(r1, evs[0])
		for k, r := range runs {
			got, err := FoldAll(r.run(), recs[k])
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if gotFree := positionFree(t, got); !slices.Equal(gotFree, wantFree[k]) {
				t.Fatalf("seed %d, %s: decisions differ from the canonical log's\n%s", seed, r.run(), firstDiff(gotFree, wantFree[k]))
			}
		}
	}
	// The interleavings must actually move what the contract lets move.
	for what, n := range map[string]int{
		"a fact before its cause":                     moved.inversions,
		"an attempt.finished across its group.closed": moved.finishedAcrossClose,
		"a reward before its attempt's last turn":     moved.rewardBeforeLastTurn,
		"two attempts finishing in the other order":   moved.finishOrder,
	} {
		if n == 0 {
			t.Errorf("no interleaving moved %s", what)
		}
	}
}

// checkCanonical checks that the canonical run exercises what the
// interleavings must preserve.
func checkCanonical(t *testing.T, want []Decision) {
	t.Helper()
	counts := map[events.Type]int{}
	for _, d := range want {
		counts[d.Kind]++
	}
	if counts[KindBatchSealed] != 3 || counts[KindTaskAdmitted] != 1 || counts[KindTaskRejected] != 1 {
		t.Fatalf("canonical decisions: %v", counts)
	}
	var kinds []string
	for _, f := range findingsOf(t, want) {
		kinds = append(kinds, f.Kind)
	}
	slices.Sort(kinds)
	wantKinds := []string{
		FindingBatchDigestMismatch,  // gradient step 1
		FindingConflictingDuplicate, // the engine's second version of a turn
		// g1's fifth attempt; g4's attempt rewarded after the close, and
		// its attempt still running at the close.
		FindingLateReward, FindingLateReward, FindingLateReward,
		FindingUnknownBatch,                                // gradient step 2 names batch 9
		FindingUnknownEntity,                               // e1's task tC
		FindingNegativeStaleness, FindingNegativeStaleness, // g6: every attempt's turn 1 is at version 2 in batch 2
		FindingNegativeStaleness, FindingNegativeStaleness,
		FindingVersionJump, FindingVersionJump, // g8: every attempt goes 2, 1, 2
		FindingVersionJump, FindingVersionJump,
	}
	slices.Sort(wantKinds)
	if !slices.Equal(kinds, wantKinds) {
		t.Fatalf("canonical findings: got %v, want %v", kinds, wantKinds)
	}
}

// exercised counts, over interleavings, the moves the contract allows.
type exercised struct {
	inversions           int // causalInversions
	finishedAcrossClose  int // attempt.finished on the other side of its group's close than in the canonical log
	rewardBeforeLastTurn int // a reward logged before its attempt's last turn
	finishOrder          int // two attempt.finished in the other order
}

func (x *exercised) count(r *producerRun, evs []events.Event) {
	x.inversions += CausalInversions(evs)
	side := func(log []events.Event) map[string]bool { // attempt → finished before its group's close
		group, closed := map[string]string{}, map[string]bool{}
		out := map[string]bool{}
		for _, ev := range log {
			switch d := ev.Data.(type) {
			case *events.AttemptStarted:
				group[d.Attempt] = d.Group
			case *events.GroupClosed:
				closed[d.Group] = true
			case *events.AttemptFinished:
				out[d.Attempt] = !closed[group[d.Attempt]]
			}
		}
		return out
	}
	want, got := side(r.canonical), side(evs)
	for a, before := range want {
		if got[a] != before {
			x.finishedAcrossClose++
		}
	}
	lastTurn, rewarded := map[string]int{}, map[string]int{}
	var finishes []string
	for i, ev := range evs {
		switch d := ev.Data.(type) {
		case *events.TurnGenerated:
			lastTurn[d.Attempt] = i
		case *events.RewardComputed:
			if _, ok := rewarded[d.Attempt]; !ok {
				rewarded[d.Attempt] = i
			}
		case *events.AttemptFinished:
			finishes = append(finishes, d.Attempt)
		}
	}
	for a, i := range rewarded {
		if l, ok := lastTurn[a]; ok && i < l {
			x.rewardBeforeLastTurn++
		}
	}
	var canonicalFinishes []string
	for _, ev := range r.canonical {
		if d, ok := ev.Data.(*events.AttemptFinished); ok {
			canonicalFinishes = append(canonicalFinishes, d.Attempt)
		}
	}
	if !slices.Equal(finishes, canonicalFinishes) {
		x.finishOrder++
	}
}

func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("at %d:\ngot  %s\nwant %s", i, clip(g), clip(w))
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return strings.TrimSpace(s)
}
