package explore

import (
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
	Config     events.Config `json:"config"`
	Configured bool          `json:"configured"`
	// Steps are every step of a run of at most [RunViewSteps]; of a
	// longer one (StepsSampled), the newest half of them and older ones
	// evenly spaced. StepsTotal counts the run's steps.
	Steps        []Step    `json:"steps"`
	StepsTotal   int       `json:"steps_total"`
	StepsSampled bool      `json:"steps_sampled"`
	Reference    Reference `json:"reference"`
	Funnel       Funnel    `json:"funnel"`
	InFlight     int       `json:"groups_in_flight"`
	// Findings are the first [RunViewFindings] of the run's (the
	// summary's findings counts every one).
	Findings []Finding      `json:"finding_list"`
	Drops    map[string]int `json:"drops"`
	// Policies are the newest [RunViewPolicies] of the PoliciesTotal
	// published.
	Policies      []PolicyVersion `json:"policies"`
	PoliciesTotal uint64          `json:"policies_total"`
}

// StepPage is a page of the steps list.
type StepPage struct {
	Steps []Step `json:"steps"`
	Total int    `json:"total"`
	// Next is the cursor of the next page, "" on the last.
	Next string `json:"next"`
}

// PolicyVersion is a policy.published fact.
type PolicyVersion struct {
	Version int64                    `json:"version"`
	Fact    projections.FactPosition `json:"fact"`
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
	Turn             int                      `json:"turn"`
	Fact             projections.FactPosition `json:"fact"`
	PromptTokens     int64                    `json:"prompt_tokens"`
	CompletionTokens int64                    `json:"completion_tokens"`
	CachedTokens     int64                    `json:"cached_tokens"`
	ObservationIDs   []int32                  `json:"observation_token_ids"`
	TokenIDs         []int32                  `json:"token_ids"`
	Logprobs         []float32                `json:"logprobs"`
	// TokensGone says why a turn that had token arrays shows none: the
	// facts log, their one home, no longer holds its record.
	TokensGone string                    `json:"tokens_gone,omitempty"`
	Text       string                    `json:"text,omitempty"`
	TextCut    int64                     `json:"text_cut,omitempty"`
	Finish     string                    `json:"finish"`
	LatencyMS  int64                     `json:"latency_ms"`
	Segments   []projections.TurnSegment `json:"segments"`
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
	// GroupList is a page of the task's groups in the order started
	// (TaskGroupPage of them); GroupsNext the cursor of the next page,
	// empty at the end.
	GroupList  []GroupView `json:"group_list"`
	GroupsNext string      `json:"groups_next"`
}
