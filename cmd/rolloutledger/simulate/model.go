package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rolloutledger/rolloutledger/events"
)

// The content model: tasks with a hidden pass probability, groups of
// attempts, and the turns and tool calls of each attempt. Everything here is
// time-free (durations, not instants) and drawn before the timeline is laid
// out, so the timeline can only relabel it (policy versions, `at`), never
// change it.

const (
	probeSize  = 4 // attempts of a probe group: the recipe's minimum probes
	evalGroups = 2
	maxRetries = 2 // retries of one slot before the scheduler gives up
	learnGain  = 0.3

	harnessPrefixTokens = 1024 // the harness system prompt, prefix-cached everywhere
	maxCompletionTokens = 2000
	maxObservation      = 4096 // the harness truncates tool output to this many tokens
	vocabSize           = 151_936
)

// Salts separating the PRNG streams drawn from one seed.
const (
	saltTasks   = 0x7461736b73000001
	saltAttempt = 0x617474656d707402
	saltTokens  = 0x746f6b656e730003
	saltEval    = 0x6576616c00000004
	saltText    = 0x7465787400000005
)

var (
	taskSources = []string{"MiMo-TB", "swe-smith", "internal-long-horizon"}
	gateNames   = []string{
		"builds", "tests_run", "oracle_passes", "no_network", "deterministic_tests",
		"reset_clean", "no_test_leak", "timeout_fits", "license_ok",
	}
	failureReasons = []string{"microvm_oom", "sandbox_lost", "engine_preempted", "vm_boot_timeout", "disk_full"}
)

type task struct {
	idx                        int
	id, source, kind, verifier string
	tier                       int
	passProb                   float64 // hidden from the ledger
	testsTotal                 int
	zeroCredit                 float64 // chance a failed attempt passes no test at all
	promptTokens               int64   // harness prompt and task statement

	probes, passes int
	admitted       bool
}

type group struct {
	id      string
	idx     int
	task    *task
	purpose string
	size    int
	slots   [][]*attempt // each slot's chain: the attempt, then its retries

	rewarded int
	closed   bool   // a slot exhausted its retries: the scheduler closes the group
	drop     string // the expected fate: "", zero_signal, infra_lost, fully_stale
	batch    int

	// Timeline.
	started    int64
	done       int64 // completing fact's virtual time: last reward, or group.closed
	lastReward int64
	lastFail   int64
	openSlots  int
	dispatched bool
	releases   []int // eval groups (by idx) released when this one is first dispatched
}

type attempt struct {
	id      string
	serial  uint64
	group   *group
	slot    int
	retryOf string
	vm      string
	forkMS  int64

	failed      bool
	reason      string
	failMS      int64 // from the end of the last turn to the failure
	passed      bool
	outcome     string
	testsPassed int
	verifyMS    int64
	// turns are dropped once the attempt is drawn (they are most of a
	// plan's memory) and drawn again from the attempt's own stream when
	// needed: turnsOf.
	turns    []turn
	passProb float64 // what the attempt was drawn with, to draw it again
	duration int64   // from attempt.started to attempt.finished or attempt.failed

	// Timeline.
	engine int
	start  int64
}

type turn struct {
	start                      int64 // offset from the attempt's start
	prompt, completion, cached int64
	obs                        int64 // tokens of tool output appended before this turn
	finish                     string
	latency                    int64
	tools                      []tool
	compactBefore, compactTo   int64 // compaction after this turn when compactBefore > 0
	compactMS                  int64
}

type tool struct {
	name                         string
	exit                         int
	durationMS, outputBytes      int64
	toFile, background, timedOut bool
	obsTokens                    int64
}

// model draws content. Its methods are called in a fixed order, which is
// what makes content a pure function of the seed and the scale options.
//
// Every group of the run has an index (idx): the probe groups by task, the
// train groups, the eval groups, in the order they are drawn. drawGroups
// draws each once for its fate and keeps only where its attempts' serials
// start, so that a timeline can draw any group again, in full, when it is
// dispatched, and let it go once it is done with it.
type model struct {
	o       Options
	seed    uint64
	rate    float64
	tasks   []*task
	turnMul float64 // scales the turn-count medians to [MinTurns, MaxTurns]

	serials  []uint64 // each group's first attempt's serial, by idx
	admitted []*task  // train groups go round-robin over these
	want     int      // usable train groups wanted: the steps' and a margin
	trains   int      // train groups: idx len(tasks) to len(tasks)+trains-1
	evals    []evalGroup
}

// evalGroup is an eval group, drawn after the train groups: its task, and
// the group (idx) whose first dispatch releases it.
type evalGroup struct {
	task    *task
	trigger int
}

func newModel(o Options) *model {
	return &model{
		o: o, seed: o.Seed, rate: o.failureRate(),
		turnMul: max(float64(o.MaxTurns-o.MinTurns), 1) / float64(DefaultMaxTurns-DefaultMinTurns),
	}
}

// drawTasks registers the run's tasks: 15% always solved, 15% never, the
// rest in between, so probes reject some tasks and admit most.
func (m *model) drawTasks() {
	r := rand.New(rand.NewPCG(m.seed, saltTasks))
	for i := range m.o.Tasks {
		t := &task{idx: i, tier: 1 + r.IntN(4), testsTotal: 5 + r.IntN(36)}
		switch src := taskSources[r.IntN(len(taskSources))]; src {
		case "MiMo-TB":
			t.source, t.kind, t.verifier, t.zeroCredit = src, "agentic", "tb-verifier-v2", 0.9
			t.id = fmt.Sprintf("tb/task-%04d", i)
		case "swe-smith":
			t.source, t.kind, t.verifier, t.zeroCredit = src, "swe", "swe-pytest-v1", 0.5
			t.id = fmt.Sprintf("swe/issue-%04d", i)
		default:
			t.source, t.verifier, t.zeroCredit = src, "lh-verifier-v1", 0.75
			t.kind = []string{"agentic", "swe"}[r.IntN(2)]
			t.tier = 3 + r.IntN(2)
			t.id = fmt.Sprintf("lh/task-%04d", i)
		}
		switch u := r.Float64(); {
		case u < 0.15:
			t.passProb = 0.97 + 0.03*r.Float64()
		case u < 0.30:
			t.passProb = 0.03 * r.Float64()
		default:
			t.passProb = 0.05 + 0.9*r.Float64()
		}
		t.promptTokens = harnessPrefixTokens + int64(600+r.IntN(2400))
		t.promptTokens = min(t.promptTokens, int64(m.o.ContextBudget/4))
		m.tasks = append(m.tasks, t)
	}
}

// drawGroups draws every group of the run for its fate (which slots are
// rewarded, which retried, how it is judged), without its turns: a probe
// group per task, train groups round-robin over the admitted tasks until
// enough are usable, and the eval groups. It returns what the generator
// knows of each, by idx, and keeps where each group's serials start.
func (m *model) drawGroups() []GroupInfo {
	cfg := m.config()
	var infos []GroupInfo
	var serial uint64
	draw := func(idx int) *group {
		m.serials = append(m.serials, serial)
		g := m.newGroup(idx, cfg, false)
		for _, chain := range g.slots {
			serial += uint64(len(chain))
		}
		infos = append(infos, GroupInfo{
			Group: g.id, Task: g.task.id, Purpose: g.purpose, Size: g.size,
			Rewarded: g.rewarded, Closed: g.closed, Drop: g.drop,
		})
		return g
	}
	for _, t := range m.tasks {
		g := draw(t.idx)
		for _, chain := range g.slots {
			if a := chain[len(chain)-1]; !a.failed {
				t.probes++
				if a.passed {
					t.passes++
				}
			}
		}
		rate := float64(t.passes) / float64(max(t.probes, 1))
		t.admitted = t.probes >= cfg.MinProbes && rate >= cfg.PassBand[0] && rate <= cfg.PassBand[1]
		if t.admitted {
			m.admitted = append(m.admitted, t)
		}
	}
	target := m.o.Steps * m.o.BatchGroups
	m.want = target + max(1, (target+19)/20)
	for i, usable := 0, 0; len(m.admitted) > 0 && usable < m.want && i < 4*m.want+16; i++ {
		m.trains++
		if draw(len(m.tasks)+i).drop == "" {
			usable++
		}
	}
	// Eval groups run on tasks picked by their own stream, released a third
	// and two thirds of the way through the train groups.
	r := rand.New(rand.NewPCG(m.seed, saltEval))
	for e := 1; e <= evalGroups && len(m.tasks) > 0; e++ {
		t := m.tasks[r.IntN(len(m.tasks))]
		trigger := t.idx // its task's probe group, if there are no train groups
		if m.trains > 0 {
			trigger = len(m.tasks) + min(e*m.trains/(evalGroups+1), m.trains-1)
		}
		m.evals = append(m.evals, evalGroup{task: t, trigger: trigger})
		draw(len(m.tasks) + m.trains + e - 1)
	}
	return infos
}

func (m *model) config() events.Config {
	c := events.DefaultConfig()
	c.GroupSize, c.BatchGroups = m.o.GroupSize, m.o.BatchGroups
	switch {
	case m.o.MaxStaleness > 0:
		c.MaxStaleness = m.o.MaxStaleness
	case m.o.MaxStaleness < 0:
		c.MaxStaleness = 0
	}
	return c
}

// newGroup draws group idx's slots, each an attempt followed by its
// retries while infrastructure keeps failing, and judges the group as the
// projector's rules 1–3 will. With full, the attempts' turns are drawn (and
// dropped) for their durations, which the timeline needs; without, only
// their fates are.
func (m *model) newGroup(idx int, cfg events.Config, full bool) *group {
	var t *task
	var purpose string
	var n, size int
	var passProb float64
	switch i := idx - len(m.tasks); {
	case i < 0:
		t, purpose, n, size = m.tasks[idx], events.PurposeProbe, idx+1, probeSize
		passProb = t.passProb
	case i < m.trains:
		// The policy learns: by the last step a train attempt closes
		// learnGain of the gap between the task's pass chance and 1.
		t, purpose, n, size = m.admitted[i%len(m.admitted)], events.PurposeTrain, i+1, m.o.GroupSize
		progress := min(float64(i)/float64(m.want), 1)
		passProb = t.passProb + (1-t.passProb)*learnGain*progress
	default:
		e := i - m.trains
		t, purpose, n, size = m.evals[e].task, events.PurposeEval, e+1, m.o.GroupSize
		passProb = t.passProb
	}
	g := &group{id: fmt.Sprintf("%s-%04d", purpose, n), idx: idx, task: t, purpose: purpose, size: size}
	serial := m.serials[idx]
	var scores []float64
	for s := range size {
		var chain []*attempt
		for try := 0; try <= maxRetries; try++ {
			a := &attempt{group: g, slot: s, serial: serial, id: fmt.Sprintf("%s/a%d", g.id, s)}
			serial++
			if try > 0 {
				a.id = fmt.Sprintf("%s/a%d-r%d", g.id, s, try)
				a.retryOf = chain[try-1].id
			}
			m.drawAttempt(a, t, passProb, full)
			a.passProb, a.turns = passProb, nil
			chain = append(chain, a)
			if !a.failed {
				break
			}
		}
		g.slots = append(g.slots, chain)
		if a := chain[len(chain)-1]; a.failed {
			g.closed = true
		} else {
			g.rewarded++
			scores = append(scores, score(a, cfg))
		}
	}
	switch {
	case g.closed && g.rewarded < cfg.MinGroup:
		g.drop = "infra_lost"
	case stddev(scores) <= 1e-6:
		g.drop = "zero_signal"
	}
	return g
}

// score is rule 2 (docs/design.md §6.2).
func score(a *attempt, cfg events.Config) float64 {
	if a.passed {
		return 1
	}
	if a.group.task.testsTotal == 0 {
		return 0
	}
	return cfg.PartialCreditCap * float64(a.testsPassed) / float64(a.group.task.testsTotal)
}

func stddev(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(len(xs)))
}

// lognormal draws around median with log-space deviation sigma.
func lognormal(r *rand.Rand, median, sigma float64) float64 {
	return median * math.Exp(sigma*r.NormFloat64())
}

func clampInt(v float64, lo, hi int64) int64 {
	return min(max(int64(v), lo), hi)
}
