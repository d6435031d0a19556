package simulate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// Epoch is virtual time zero: every event's `at` is Epoch plus its virtual
// time, so `at` is as deterministic as the content.
var Epoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// What run.started declares, and the producers' names (their `source`).
const (
	modelName   = "flash-sim-30b"
	harnessName = "terminal-bench-v2-sim"
	scheduler   = "scheduler"
	verifier    = "verifier"
	trainer     = "trainer"
)

// Generate builds the whole run's events for run id run, without I/O. Event
// content is a pure function of o's Seed and scale fields; only the event
// ids are random.
func Generate(o Options, run string) (*Plan, error) {
	m, infos, err := newRun(o, run)
	if err != nil {
		return nil, err
	}
	// Every group held, with its attempts' timing, for emit.
	groups := make([]*group, len(infos))
	sum, err := m.play(infos, func(g *group) { groups[g.idx] = g })
	if err != nil {
		return nil, err
	}
	return m.emit(run, sum, groups), nil
}

// newRun validates o and run and draws the run's tasks and its groups'
// fates: what [Generate] and [NewSource] share before they play the
// timeline.
func newRun(o Options, run string) (*model, []GroupInfo, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if !events.ValidRunID(run) {
		return nil, nil, fmt.Errorf("simulate: run %q: want [A-Za-z0-9._-]{1,128}", run)
	}
	m := newModel(o.withDefaults())
	m.drawTasks()
	return m, m.drawGroups(), nil
}

// summary is what playing a run's timeline to its end tells: the
// generator's view of its tasks and groups (each group's batch, or
// fully_stale, known only then), the policy versions' publication times,
// and which engines ran an attempt.
type summary struct {
	engines  int
	tasks    []TaskInfo
	groups   []GroupInfo
	versions []int64
	used     []bool // by engine
	attempts int
}

// play runs the timeline once to its end, passing every group to hold as
// it is drawn (nil: none is kept), and sums it up; groups are drawGroups'
// infos, completed in place.
func (m *model) play(groups []GroupInfo, hold func(*group)) (*summary, error) {
	sum := &summary{engines: engineCount(m.o), groups: groups}
	sum.used = make([]bool, sum.engines)
	dispatched := make([]bool, len(sum.groups))
	tl := m.newTimeline(sum.engines)
	tl.onDraw = hold
	tl.onDispatch = func(a *attempt) { sum.used[a.engine] = true; sum.attempts++ }
	tl.onStart = func(g *group) { dispatched[g.idx] = true }
	tl.onJudge = func(g *group) { sum.groups[g.idx].Drop, sum.groups[g.idx].Batch = g.drop, g.batch }
	for tl.step() {
	}
	if i := slices.Index(dispatched, false); i >= 0 {
		return nil, fmt.Errorf("simulate: group %s was never dispatched", sum.groups[i].Group)
	}
	sum.versions = tl.versions
	for _, t := range m.tasks {
		sum.tasks = append(sum.tasks, TaskInfo{Task: t.id, PassProb: t.passProb, Probes: t.probes, ProbePasses: t.passes, Admitted: t.admitted})
	}
	return sum, nil
}

// emitter collects each producer's events with their virtual times; seq
// keeps emission order among events of one stream at the same instant.
type emitter struct {
	run     string
	v       int // catalogue version of every fact; 0: the newest
	bufs    [][]record
	seq     int
	touched []int // streams with records, for collect
}

type record struct {
	vt  int64
	seq int
	ev  events.Event
}

func (em *emitter) add(stream int, vt int64, source string, f events.Fact) {
	ev := events.New(em.run, source, Epoch.Add(time.Duration(vt)*time.Millisecond), f)
	// Version 2 at most: a version 3 turn's observation tokens are its
	// whole new prompt, which the simulated turns do not carry.
	ev.V = min(ev.V, 2)
	if em.v != 0 {
		ev.V = em.v
	}
	if len(em.bufs[stream]) == 0 {
		em.touched = append(em.touched, stream)
	}
	em.bufs[stream] = append(em.bufs[stream], record{vt: vt, seq: em.seq, ev: ev})
	em.seq++
}

func (m *model) emit(run string, sum *summary, groups []*group) *Plan {
	const sched = 0
	engines, versions := sum.engines, sum.versions
	ver, tr := engines+1, engines+2
	em := &emitter{run: run, v: m.o.FactVersion, bufs: make([][]record, engines+3)}
	names := make([]string, engines+3)
	names[sched], names[ver], names[tr] = scheduler, verifier, trainer
	for i := range engines {
		names[1+i] = fmt.Sprintf("engine-%02d", i)
	}

	cfg := m.config()
	em.add(sched, 0, scheduler, m.runStarted(cfg, engines))
	for _, t := range m.tasks {
		em.add(sched, 0, scheduler, m.taskRegistered(t))
	}
	for v, at := range versions {
		em.add(tr, at, trainer, policyPublished(m.seed, v))
	}
	for _, g := range groups {
		em.add(sched, g.started, scheduler, &events.GroupStarted{Group: g.id, Task: g.task.id, Size: g.size, Purpose: g.purpose})
		if g.closed {
			em.add(sched, g.done, scheduler, &events.GroupClosed{Group: g.id, Reason: "retries_exhausted"})
		}
		for _, chain := range g.slots {
			for _, a := range chain {
				m.emitAttempt(em, a, 1+a.engine, names[1+a.engine], ver, versions)
			}
		}
	}

	p := &Plan{Run: run, Options: m.o, Engines: engines, Tasks: sum.tasks, Groups: sum.groups}
	for i, buf := range em.bufs {
		if len(buf) == 0 {
			continue
		}
		slices.SortFunc(buf, func(a, b record) int { return cmp.Or(cmp.Compare(a.vt, b.vt), cmp.Compare(a.seq, b.seq)) })
		evs := make([]events.Event, len(buf))
		for j := range buf {
			evs[j] = buf[j].ev
		}
		p.Streams = append(p.Streams, Stream{Producer: names[i], Events: evs})
	}
	return p
}

// emitAttempt writes one attempt's facts to its engine's stream and its
// reward to the verifier's.
func (m *model) emitAttempt(em *emitter, a *attempt, stream int, engine string, ver int, versions []int64) {
	f := m.startAttempt(em, a, stream, engine, ver)
	for f.next(em, versions) {
	}
}

// attemptFacts is an attempt whose facts are written a turn at a time:
// the turns drawn again, the streams its tokens and text are drawn from,
// and the next turn.
type attemptFacts struct {
	m           *model
	a           *attempt
	stream, ver int
	engine      string
	turns       []turn
	tok, txt    *rand.Rand
	i           int // the next turn; len(turns): the end
	seq         int // facts written so far, for a [Source]'s order
}

// startAttempt writes attempt.started and returns the rest of a's facts.
func (m *model) startAttempt(em *emitter, a *attempt, stream int, engine string, ver int) *attemptFacts {
	em.add(stream, a.start, engine, &events.AttemptStarted{
		Attempt: a.id, Group: a.group.id, Task: a.group.task.id, Engine: engine, VM: a.vm, ForkMS: a.forkMS, RetryOf: a.retryOf,
	})
	f := &attemptFacts{m: m, a: a, stream: stream, ver: ver, engine: engine, turns: m.turnsOf(a)}
	if m.o.Tokens {
		f.tok = rand.New(rand.NewPCG(m.seed^saltTokens, a.serial))
	}
	if m.o.Text {
		f.txt = m.textStream(a)
	}
	return f
}

// turnEnds is when the next turn ends, if one is next: next needs the
// versions published by then.
func (f *attemptFacts) turnEnds() (int64, bool) {
	if f.i == len(f.turns) {
		return 0, false
	}
	return f.a.start + f.turns[f.i].start + f.turns[f.i].latency, true
}

// next writes the next turn's facts, or the attempt's last ones, and says
// whether any remain. versions must hold every version published by the
// time the turn ends (turnEnds).
func (f *attemptFacts) next(em *emitter, versions []int64) bool {
	m, a, stream, engine := f.m, f.a, f.stream, f.engine
	if f.i == len(f.turns) {
		end := a.start + a.duration
		if a.failed {
			em.add(stream, end, engine, &events.AttemptFailed{Attempt: a.id, Reason: a.reason})
			return false
		}
		em.add(stream, end, engine, &events.AttemptFinished{Attempt: a.id, Outcome: a.outcome})
		em.add(f.ver, end+a.verifyMS, verifier, &events.RewardComputed{
			Attempt: a.id, Passed: a.passed, TestsPassed: a.testsPassed, TestsTotal: a.group.task.testsTotal, Verifier: a.group.task.verifier,
		})
		return false
	}
	i := f.i
	f.i++
	tr := &f.turns[i]
	at := a.start + tr.start
	te := &events.TurnGenerated{
		Attempt: a.id, Turn: i, VersionSegments: m.turnSegments(versions, at, tr),
		PromptTokens: tr.prompt, CompletionTokens: tr.completion, CachedTokens: tr.cached,
		Finish: tr.finish, LatencyMS: tr.latency,
	}
	if f.tok != nil {
		te.ObservationTokenIDs = tokenIDs(f.tok, tr.obs)
		te.TokenIDs = tokenIDs(f.tok, tr.completion)
		te.Logprobs = logprobs(f.tok, tr.completion)
	}
	calls := make([]*events.ToolCalled, len(tr.tools))
	for c := range tr.tools {
		tl := &tr.tools[c]
		calls[c] = &events.ToolCalled{
			Attempt: a.id, Turn: i, Call: c, Tool: tl.name, ExitCode: tl.exit, DurationMS: tl.durationMS,
			OutputBytes: tl.outputBytes, ToFile: tl.toFile, Background: tl.background, TimedOut: tl.timedOut,
		}
	}
	if f.txt != nil {
		rendered := make([]string, len(calls))
		for c, tc := range calls {
			tc.Input, tc.Output, tc.OutputCut = toolText(f.txt, &tr.tools[c])
			tc.Input, tc.InputCut = bounded(tc.Input)
			rendered[c] = tc.Tool + ": " + tc.Input
		}
		te.Text, te.TextCut = completionText(f.txt, tr.completion, rendered)
	}
	at += tr.latency
	em.add(stream, at, engine, te)
	for c, tl := range tr.tools {
		at += tl.durationMS
		em.add(stream, at, engine, calls[c])
	}
	if tr.compactBefore > 0 {
		at += tr.compactMS
		em.add(stream, at, engine, &events.ContextCompacted{Attempt: a.id, Turn: i, TokensBefore: tr.compactBefore, TokensAfter: tr.compactTo})
	}
	return true
}

// tokenIDs draws n token ids skewed toward small (frequent) ids, as text
// is, two per PRNG call; nil for n = 0 so the field is left out.
func tokenIDs(r *rand.Rand, n int64) []int32 {
	if n == 0 {
		return nil
	}
	out := make([]int32, n)
	for i := 0; i < len(out); i += 2 {
		x := r.Uint64()
		out[i] = skewedID(x)
		if i+1 < len(out) {
			out[i+1] = skewedID(x >> 32)
		}
	}
	return out
}

// skewedID maps the low 32 bits of x to [0, vocabSize): the product of two
// uniform halves leans toward 0.
func skewedID(x uint64) int32 {
	prod := (x & 0xffff) * (x >> 16 & 0xffff) // < 2^32
	return int32(prod * vocabSize >> 32)
}

// logprobTable holds the quantiles of the sampled-token log-probability
// distribution: 7/8 of tokens confident (mean -0.015), 1/8 uncertain (mean
// -1.2), rounded to 4 decimals so the JSON stays short. Drawing from it
// takes 12 random bits and no logarithm.
var logprobTable = func() (t [4096]float32) {
	const confident = 3584
	for j := range t {
		var lp float64
		if j < confident {
			lp = 0.015 * math.Log((float64(j)+0.5)/confident)
		} else {
			lp = 1.2 * math.Log((float64(j-confident)+0.5)/(4096-confident))
		}
		lp = math.Round(lp*1e4) / 1e4
		if lp == 0 {
			lp = 0 // not -0
		}
		t[j] = float32(lp)
	}
	return t
}()

// logprobs draws n sampled-token log-probabilities, five per PRNG call.
func logprobs(r *rand.Rand, n int64) []float32 {
	out := make([]float32, n)
	var x uint64
	for i := range out {
		if i%5 == 0 {
			x = r.Uint64()
		}
		out[i] = logprobTable[x&4095]
		x >>= 12
	}
	return out
}
