package explore

import (
	"slices"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// LiveFor is how long after its last fact a run counts as live.
const LiveFor = time.Minute

// RunSummary is one line of the runs list.
type RunSummary struct {
	Run           string    `json:"run"`
	Status        string    `json:"status"` // "live" or "idle", by when the last fact arrived or was made
	Facts         uint64    `json:"facts"`
	Batches       int       `json:"batches"`
	TasksAdmitted int       `json:"tasks_admitted"`
	TasksRejected int       `json:"tasks_rejected"`
	Findings      int       `json:"findings"`
	FirstFactAt   time.Time `json:"first_fact_at"`
	LastActivity  time.Time `json:"last_activity"`
	// LastArrival is when the run's last fact reached the log (zero when
	// unknown, as in a bundle of an archive).
	LastArrival time.Time `json:"last_arrival"`
	// Catalogue lists the catalogue versions of the run's facts.
	Catalogue []int `json:"catalogue"`
}

// Summary is the run's line of the runs list; now decides live or idle.
func (m *Model) Summary(now time.Time) RunSummary {
	s := RunSummary{Run: m.run, Status: "idle", Facts: m.facts, Batches: m.sealed(), TasksAdmitted: m.admitted,
		TasksRejected: m.rejected, Findings: len(m.findings), FirstFactAt: m.firstAt, LastActivity: m.lastAt,
		LastArrival: m.arrivedAt, Catalogue: []int{}}
	last := m.lastAt
	if m.arrivedAt.After(last) {
		last = m.arrivedAt
	}
	if !last.IsZero() && now.Sub(last) < LiveFor {
		s.Status = "live"
	}
	for v := range m.versions {
		s.Catalogue = append(s.Catalogue, v)
	}
	slices.Sort(s.Catalogue)
	return s
}

// Funnel is the admission funnel at a point of the run: tasks registered,
// tasks with a probe group, and the decisions taken.
type Funnel struct {
	Registered int `json:"registered"`
	Probed     int `json:"probed"`
	Admitted   int `json:"admitted"`
	Rejected   int `json:"rejected"`
}

// Step is one step of the run view: the audit's figures for the batch
// ([projections.StepAudit]) and the admission funnel at its watermark.
type Step struct {
	projections.StepAudit
	Funnel Funnel `json:"funnel"`
	// MeanReward and Reward are of the rewards of the batch's attempts
	// (null without any); GradNorm is the trainer's, null before its
	// gradient.applied; TrainedStaleness counts the tokens the batch
	// trains by their staleness.
	MeanReward       *float64            `json:"mean_reward"`
	Reward           *Spread             `json:"reward_spread"`
	GradNorm         *float64            `json:"grad_norm"`
	TrainedStaleness []projections.Count `json:"trained_token_staleness"`
}

// Reference is the recipe's reference figures drawn on the charts.
type Reference struct {
	ZeroSignalRate float64 `json:"zero_signal_rate"`
	InfraLostRate  float64 `json:"infra_lost_rate"`
	TruncatedLow   float64 `json:"truncated_low"`
	TruncatedHigh  float64 `json:"truncated_high"`
}

// RunView is the run view: the summary, the configuration, a series per
// step, and the run's findings.
type RunView struct {
	RunSummary
	Config     events.Config   `json:"config"`
	Configured bool            `json:"configured"`
	Steps      []Step          `json:"steps"`
	Reference  Reference       `json:"reference"`
	Funnel     Funnel          `json:"funnel"`
	InFlight   int             `json:"groups_in_flight"`
	Findings   []Finding       `json:"finding_list"`
	Drops      map[string]int  `json:"drops"`
	Policies   []PolicyVersion `json:"policies"`
}

// PolicyVersion is a policy.published fact.
type PolicyVersion struct {
	Version int64                    `json:"version"`
	Fact    projections.FactPosition `json:"fact"`
}

// RunView builds the run view.
func (m *Model) RunView(now time.Time) RunView {
	rep := m.audit.Report()
	v := RunView{RunSummary: m.Summary(now), Config: m.config, Configured: m.configured, Steps: []Step{},
		Reference: Reference{projections.RefZeroSignalRate, projections.RefInfraLostRate, projections.RefTruncatedLow, projections.RefTruncatedHigh},
		Findings:  append([]Finding{}, m.findings...), Drops: map[string]int{}, Policies: []PolicyVersion{}}
	for _, st := range rep.Steps {
		v.Steps = append(v.Steps, m.step(st))
		for _, d := range st.Dropped {
			v.Drops[d.Name] += d.N
		}
	}
	v.Funnel = m.funnelAt(^uint64(0))
	for _, g := range m.groups {
		if g.batch == 0 && g.dropped == "" && g.Purpose == events.PurposeTrain {
			v.InFlight++
		}
	}
	for _, p := range m.policies {
		v.Policies = append(v.Policies, PolicyVersion{p.Version, p.fact})
	}
	return v
}

// funnelAt is the admission funnel after fact seq.
func (m *Model) funnelAt(seq uint64) Funnel {
	var f Funnel
	for _, id := range m.taskOrder {
		t := m.tasks[id]
		if t.registered && t.fact.Seq <= seq {
			f.Registered++
		}
		for _, gid := range t.groups {
			if g := m.groups[gid]; g.Purpose == events.PurposeProbe && g.fact.Seq <= seq {
				f.Probed++
				break
			}
		}
		if t.decidedAt.Seq != 0 && t.decidedAt.Seq <= seq {
			if t.decision == "admitted" {
				f.Admitted++
			} else {
				f.Rejected++
			}
		}
	}
	return f
}

// AttemptRow is an attempt as lists show it.
type AttemptRow struct {
	Attempt   string `json:"attempt"`
	Group     string `json:"group"`
	Task      string `json:"task"`
	Purpose   string `json:"purpose"`
	Slot      int    `json:"slot"`
	RetryOf   string `json:"retry_of,omitempty"`
	RetriedBy string `json:"retried_by,omitempty"`
	Outcome   string `json:"outcome"` // the finish outcome, "failed: <reason>", or "running"
	// Passed, TestsPassed and TestsTotal are the reward.computed's, null
	// before one arrived.
	Passed           *bool    `json:"passed"`
	TestsPassed      *int     `json:"tests_passed"`
	TestsTotal       *int     `json:"tests_total"`
	Score            *float64 `json:"score"`
	Bonus            *float64 `json:"bonus"`
	Reward           *float64 `json:"reward"`
	Advantage        *float64 `json:"advantage"`
	Batch            uint64   `json:"batch,omitempty"`
	DropReason       string   `json:"drop_reason,omitempty"`
	Turns            int      `json:"turns"`
	TrainedTurns     int      `json:"trained_turns"`
	CompletionTokens int64    `json:"completion_tokens"`
	PromptTokens     int64    `json:"prompt_tokens"`
	ToolCalls        int      `json:"tool_calls"`
	MaxStaleness     *int64   `json:"max_staleness"`
	Finish           string   `json:"finish"` // the last turn's finish reason
	// TurnTrained says, in turn order, whether each turn its batch judged
	// trains (the group view draws it; other lists leave it out).
	TurnTrained []bool `json:"turn_trained,omitempty"`
}

func (m *Model) attemptRow(a *attempt) AttemptRow {
	g := m.groups[a.Group]
	r := AttemptRow{Attempt: a.Attempt, Group: a.Group, Task: a.Task, Purpose: g.Purpose, Slot: a.slot, RetryOf: a.RetryOf,
		RetriedBy: a.retriedBy, Outcome: "running", Batch: a.batch}
	switch {
	case a.failed != "":
		r.Outcome = "failed: " + a.failed
	case a.outcome != "":
		r.Outcome = a.outcome
	}
	if a.batch == 0 && g.dropped != "" {
		r.DropReason = g.dropped
	}
	if a.reward != nil {
		p, tp, tt := a.reward.Passed, a.reward.TestsPassed, a.reward.TestsTotal
		r.Passed, r.TestsPassed, r.TestsTotal = &p, &tp, &tt
	}
	if j := a.judged; j != nil {
		r.Score, r.Bonus, r.Reward, r.Advantage = &j.Score, &j.Bonus, &j.Reward, &j.Advantage
		for _, t := range j.Turns {
			if t.Trained {
				r.TrainedTurns++
			}
			if r.MaxStaleness == nil || t.Staleness > *r.MaxStaleness {
				s := t.Staleness
				r.MaxStaleness = &s
			}
		}
	}
	for _, t := range a.turns {
		r.ToolCalls += len(t.tools)
		if !t.generated {
			continue
		}
		r.Turns++
		r.CompletionTokens += t.CompletionTokens
		r.PromptTokens += t.PromptTokens
		r.Finish = t.Finish
	}
	return r
}

// Attempts lists every attempt of the run in the order started.
func (m *Model) Attempts() []AttemptRow {
	out := make([]AttemptRow, 0, len(m.attList))
	for _, id := range m.attList {
		out = append(out, m.attemptRow(m.attempts[id]))
	}
	return out
}

// StepView is one batch: its manifest joined to the attempts' facts, and
// the gradient step that consumed it.
type StepView struct {
	Seq            uint64                     `json:"seq"`
	TrainerVersion uint64                     `json:"trainer_version"`
	RuleVersion    int                        `json:"rule_version"`
	Watermark      projections.LogPosition    `json:"watermark"`
	Decision       projections.FactPosition   `json:"decision_fact"`
	Tree           projections.TreeHead       `json:"tree"`
	Digest         string                     `json:"digest"`
	Stats          projections.BatchStats     `json:"stats"`
	Groups         []StepGroup                `json:"groups"`
	Dropped        []projections.DroppedGroup `json:"dropped"`
	Gradient       *Gradient                  `json:"gradient"`
	Metrics        *Step                      `json:"metrics"`
	// Next says whether batch seq+1 is sealed (the page links to it).
	Next bool `json:"next"`
}

// StepGroup is a group used by a batch.
type StepGroup struct {
	Group     string                  `json:"group"`
	Task      string                  `json:"task"`
	Completed projections.LogPosition `json:"completed"`
	Attempts  []AttemptRow            `json:"attempts"`
}

// Gradient is the gradient.applied that consumed a batch.
type Gradient struct {
	events.GradientApplied
	Fact          projections.FactPosition `json:"fact"`
	DigestMatches bool                     `json:"digest_matches"`
}

// StepView builds the view of batch seq; ok is false when it is not sealed.
func (m *Model) StepView(seq uint64) (StepView, bool) {
	if seq < 1 || seq > uint64(len(m.batches)) || m.batches[seq-1] == nil {
		return StepView{}, false
	}
	b := m.batches[seq-1]
	v := StepView{Seq: b.Seq, TrainerVersion: b.TrainerVersion, RuleVersion: b.RuleVersion, Watermark: b.Watermark,
		Decision: b.decision, Tree: b.Tree, Digest: b.Digest, Stats: b.Stats, Groups: []StepGroup{},
		Dropped: append([]projections.DroppedGroup{}, b.Dropped...), Next: seq < uint64(len(m.batches)) && m.batches[seq] != nil}
	for _, bg := range b.Groups {
		sg := StepGroup{Group: bg.Group, Task: bg.Task, Completed: bg.Completed, Attempts: []AttemptRow{}}
		for _, ba := range bg.Attempts {
			if a := m.attempts[ba.Attempt]; a != nil && a.started {
				sg.Attempts = append(sg.Attempts, m.attemptRow(a))
			}
		}
		v.Groups = append(v.Groups, sg)
	}
	if g, ok := m.gradients[int64(seq)]; ok {
		v.Gradient = &Gradient{GradientApplied: g.GradientApplied, Fact: g.fact, DigestMatches: g.BatchDigest == b.Digest}
	}
	for _, st := range m.audit.Report().Steps {
		if st.Step == seq {
			s := m.step(st)
			v.Metrics = &s
		}
	}
	return v, true
}

// GroupView is a group with its attempts side by side.
type GroupView struct {
	Group    string                   `json:"group"`
	Task     string                   `json:"task"`
	Purpose  string                   `json:"purpose"`
	Size     int                      `json:"size"`
	Started  projections.FactPosition `json:"started"`
	Closed   string                   `json:"closed,omitempty"`
	State    string                   `json:"state"` // in_batch, dropped, in_flight, not_for_training
	Batch    uint64                   `json:"batch,omitempty"`
	Dropped  string                   `json:"dropped,omitempty"`
	DropSeal uint64                   `json:"dropped_before_batch,omitempty"`
	Slots    int                      `json:"slots"`
	Attempts []AttemptRow             `json:"attempts"`
}

// GroupView builds the view of a group; ok is false when it is unknown.
func (m *Model) GroupView(id string) (GroupView, bool) {
	g := m.groups[id]
	if g == nil {
		return GroupView{}, false
	}
	v := GroupView{Group: g.Group, Task: g.Task, Purpose: g.Purpose, Size: g.Size, Started: g.fact, Closed: g.closed,
		Batch: g.batch, Dropped: g.dropped, DropSeal: g.dropSeal, Slots: g.slots, Attempts: []AttemptRow{}, State: m.groupState(g)}
	for _, id := range g.members {
		a := m.attempts[id]
		r := m.attemptRow(a)
		for _, t := range a.generated() {
			if j := a.judgedTurn(t.Turn); j != nil {
				r.TurnTrained = append(r.TurnTrained, j.Trained)
			}
		}
		v.Attempts = append(v.Attempts, r)
	}
	return v, true
}

func (m *Model) groupState(g *group) string {
	switch {
	case g.batch != 0:
		return "in_batch"
	case g.dropped != "":
		return "dropped"
	case g.Purpose != "" && g.Purpose != events.PurposeTrain:
		return "not_for_training"
	}
	return "in_flight"
}

// AttemptView is one attempt's turns as a timeline.
type AttemptView struct {
	AttemptRow
	Engine         string                   `json:"engine"`
	VM             string                   `json:"vm"`
	ForkMS         int64                    `json:"fork_ms"`
	Started        projections.FactPosition `json:"started"`
	TrainerVersion *uint64                  `json:"trainer_version"`
	MaxStaleness   int                      `json:"config_max_staleness"`
	Gradient       *Gradient                `json:"gradient"`
	// TaskPrompt is the task's registered prompt, TaskPromptCut the bytes
	// of it left out of the fact.
	TaskPrompt    string     `json:"task_prompt,omitempty"`
	TaskPromptCut int64      `json:"task_prompt_cut"`
	TurnList      []TurnView `json:"turn_list"`
	// PrevAttempt and NextAttempt are the attempts started just before and
	// after it ("" at the ends), for stepping through a run.
	PrevAttempt string `json:"prev_attempt"`
	NextAttempt string `json:"next_attempt"`
	// Vocabulary decodes the turns' token ids: the attempt's engine's
	// vocabulary (or the run's only one), null when the run has none.
	Vocabulary *Vocabulary `json:"vocabulary"`
}

// TurnView is one turn with its tokens, tools and lineage.
type TurnView struct {
	Turn             int                       `json:"turn"`
	Fact             projections.FactPosition  `json:"fact"`
	PromptTokens     int64                     `json:"prompt_tokens"`
	CompletionTokens int64                     `json:"completion_tokens"`
	CachedTokens     int64                     `json:"cached_tokens"`
	ObservationIDs   []int32                   `json:"observation_token_ids"`
	TokenIDs         []int32                   `json:"token_ids"`
	Logprobs         []float32                 `json:"logprobs"`
	Text             string                    `json:"text,omitempty"`
	TextCut          int64                     `json:"text_cut,omitempty"`
	Finish           string                    `json:"finish"`
	LatencyMS        int64                     `json:"latency_ms"`
	Segments         []projections.TurnSegment `json:"segments"`
	// Judged says a batch judged the segments: their staleness and
	// trained are the batch's; otherwise they are unknown yet.
	Judged     bool                     `json:"judged"`
	Tools      []events.ToolCalled      `json:"tools"`
	Compaction *events.ContextCompacted `json:"compaction"`
	Lineage    Lineage                  `json:"lineage"`
}

// Lineage says what became of a turn: the batch and gradient step that
// trained it, or why it did not train.
type Lineage struct {
	State        string `json:"state"` // trained, partly_trained, masked, dropped, failed, not_for_training, pending
	Batch        uint64 `json:"batch,omitempty"`
	GradientStep *int64 `json:"gradient_step"`
	Reason       string `json:"reason"`
}

// AttemptView builds an attempt's timeline; ok is false when it is unknown.
func (m *Model) AttemptView(id string) (AttemptView, bool) {
	a := m.attempts[id]
	if a == nil || !a.started {
		return AttemptView{}, false
	}
	g := m.groups[a.Group]
	v := AttemptView{AttemptRow: m.attemptRow(a), Engine: a.Engine, VM: a.VM, ForkMS: a.ForkMS, Started: a.fact,
		MaxStaleness: m.config.MaxStaleness, TurnList: make([]TurnView, 0, len(a.turns))}
	if t := m.tasks[a.Task]; t != nil {
		v.TaskPrompt, v.TaskPromptCut = t.Prompt, t.PromptCut
	}
	var grad *Gradient
	if a.batch != 0 {
		b := m.batches[a.batch-1]
		tv := b.TrainerVersion
		v.TrainerVersion = &tv
		if gr, ok := m.gradients[int64(a.batch)]; ok {
			grad = &Gradient{GradientApplied: gr.GradientApplied, Fact: gr.fact, DigestMatches: gr.BatchDigest == b.Digest}
			v.Gradient = grad
		}
	}
	for _, t := range a.generated() {
		tv := TurnView{Turn: t.Turn, Fact: t.fact, PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens,
			CachedTokens: t.CachedTokens, ObservationIDs: orEmpty(t.ObservationTokenIDs), TokenIDs: orEmpty(t.TokenIDs),
			Logprobs: t.Logprobs, Text: t.Text, TextCut: t.TextCut, Finish: t.Finish, LatencyMS: t.LatencyMS,
			Tools: t.tools, Compaction: t.compaction}
		if tv.Logprobs == nil {
			tv.Logprobs = []float32{}
		}
		if tv.Tools == nil {
			tv.Tools = []events.ToolCalled{}
		}
		tv.Segments, tv.Lineage = m.lineage(a, g, t, v.TrainerVersion, grad)
		tv.Judged = a.judgedTurn(t.Turn) != nil
		v.TurnList = append(v.TurnList, tv)
	}
	if i := slices.Index(m.attList, id); i >= 0 {
		if i > 0 {
			v.PrevAttempt = m.attList[i-1]
		}
		if i+1 < len(m.attList) {
			v.NextAttempt = m.attList[i+1]
		}
	}
	if voc := m.vocabularyOf(a.Engine); voc != nil {
		v.Vocabulary = voc.decode(v.TurnList)
	}
	return v, true
}

func orEmpty(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// lineage judges a turn: the version segments as its batch judged them (or
// as generated, with staleness unknown, before one did), and its fate.
func (m *Model) lineage(a *attempt, g *group, t *turn, trainerVersion *uint64, grad *Gradient) ([]projections.TurnSegment, Lineage) {
	segs := make([]projections.TurnSegment, 0, len(t.VersionSegments))
	if j := a.judgedTurn(t.Turn); j != nil {
		if len(j.Segments) > 0 {
			segs = append(segs, j.Segments...)
		} else {
			segs = append(segs, projections.TurnSegment{Start: 0, PolicyVersion: j.PolicyVersion, Staleness: j.Staleness, Trained: j.Trained})
		}
		l := Lineage{State: "masked", Batch: a.batch}
		trained := 0
		for _, s := range segs {
			if s.Trained {
				trained++
			}
		}
		switch {
		case trained == len(segs):
			l.State, l.Reason = "trained", "trained in batch"
		case trained > 0:
			l.State, l.Reason = "partly_trained", "some version segments exceed max_staleness and are masked"
		default:
			l.Reason = "masked: staleness exceeds max_staleness"
		}
		if grad != nil && trained > 0 {
			st := grad.Step
			l.GradientStep = &st
		} else if trained > 0 {
			l.Reason += "; no gradient.applied reported for the batch yet"
		}
		return segs, l
	}
	for _, s := range t.VersionSegments {
		segs = append(segs, projections.TurnSegment{Start: s.Start, PolicyVersion: s.PolicyVersion})
	}
	switch {
	case g.Purpose != "" && g.Purpose != events.PurposeTrain:
		return segs, Lineage{State: "not_for_training", Reason: g.Purpose + " group: never trains"}
	case g.dropped != "":
		return segs, Lineage{State: "dropped", Reason: "group dropped: " + g.dropped, Batch: g.dropSeal}
	case a.failed != "":
		return segs, Lineage{State: "failed", Reason: "attempt failed: " + a.failed}
	case a.batch != 0:
		return segs, Lineage{State: "masked", Batch: a.batch, Reason: "turn not held by the batch"}
	}
	return segs, Lineage{State: "pending", Reason: "group not in a batch yet"}
}

// TaskRow is a task as the tasks list shows it.
type TaskRow struct {
	Task       string  `json:"task"`
	Kind       string  `json:"kind"`
	Tier       int     `json:"tier"`
	Registered bool    `json:"registered"`
	Decision   string  `json:"decision"`
	Probes     int64   `json:"probes"`
	Passes     int64   `json:"passes"`
	PassRate   float64 `json:"pass_rate"`
	Groups     int     `json:"groups"`
	Attempts   int     `json:"attempts"`
	Solved     int     `json:"solved"`
}

func (m *Model) taskRow(t *task) TaskRow {
	r := TaskRow{Task: t.Task, Kind: t.Kind, Tier: t.Tier, Registered: t.registered, Decision: t.decision,
		Probes: t.admission.Probes, Passes: t.admission.Passes, PassRate: t.admission.PassRate, Groups: len(t.groups)}
	for _, gid := range t.groups {
		for _, aid := range m.groups[gid].members {
			r.Attempts++
			if rw := m.attempts[aid].reward; rw != nil && rw.Passed {
				r.Solved++
			}
		}
	}
	return r
}

// Tasks lists the run's tasks in the order first seen.
func (m *Model) Tasks() []TaskRow {
	out := make([]TaskRow, 0, len(m.taskOrder))
	for _, id := range m.taskOrder {
		out = append(out, m.taskRow(m.tasks[id]))
	}
	return out
}

// TaskView is one task: its registration, probes and admission.
type TaskView struct {
	TaskRow
	Source string `json:"source"`
	Prompt string `json:"prompt,omitempty"`
	// PromptCut counts the bytes of the prompt left out of the fact.
	PromptCut    int64                    `json:"prompt_cut"`
	Gates        []events.Gate            `json:"gates"`
	RegisteredAt projections.FactPosition `json:"registered_at"`
	// DecidedAt is the position of the fact that caused the admission
	// decision; DecisionSeq its number among decisions of its kind.
	DecidedAt   *projections.FactPosition `json:"decided_at"`
	DecisionSeq uint64                    `json:"decision_seq,omitempty"`
	GroupList   []GroupView               `json:"group_list"`
}

// TaskView builds a task's view; ok is false when it is unknown.
func (m *Model) TaskView(id string) (TaskView, bool) {
	t := m.tasks[id]
	if t == nil {
		return TaskView{}, false
	}
	v := TaskView{TaskRow: m.taskRow(t), Source: t.Source, Prompt: t.Prompt, PromptCut: t.PromptCut, Gates: t.Gates, RegisteredAt: t.fact,
		DecisionSeq: t.decisionSeq, GroupList: []GroupView{}}
	if v.Gates == nil {
		v.Gates = []events.Gate{}
	}
	if t.decidedAt.Seq != 0 {
		p := t.decidedAt
		v.DecidedAt = &p
	}
	for _, gid := range t.groups {
		gv, _ := m.GroupView(gid)
		v.GroupList = append(v.GroupList, gv)
	}
	return v, true
}
