package events

import (
	"maps"
	"slices"
)

// Type names a fact (or decision) type, e.g. "turn.generated".
type Type string

// The fact types of catalogue v1 (DESIGN.md §4).
const (
	TypeRunStarted       Type = "run.started"
	TypeTaskRegistered   Type = "task.registered"
	TypeGroupStarted     Type = "group.started"
	TypeAttemptStarted   Type = "attempt.started"
	TypeTurnGenerated    Type = "turn.generated"
	TypeToolCalled       Type = "tool.called"
	TypeContextCompacted Type = "context.compacted"
	TypeAttemptFinished  Type = "attempt.finished"
	TypeAttemptFailed    Type = "attempt.failed"
	TypeRewardComputed   Type = "reward.computed"
	TypeGroupClosed      Type = "group.closed"
	TypePolicyPublished  Type = "policy.published"
	TypeGradientApplied  Type = "gradient.applied"
)

// Fact is the data of one event. Each catalogue type implements it.
type Fact interface {
	// FactType is the catalogue type this data belongs to.
	FactType() Type
}

// validator is implemented by facts with rules that span fields; the
// per-field rules live in the `rl` struct tags (see strict.go).
type validator interface {
	validate() *FieldError
}

// Field tags (`rl:"..."`), read once per type by the strict decoder:
//
//	optional   may be absent (required otherwise; null is never accepted)
//	id         an entity id: [A-Za-z0-9._:/-]{1,200}
//	enum=a|b   one of the listed strings
//	signed     a number that may be negative (others must be >= 0)
//	max=X      a number at most X
//	empty      a string that may be empty (others must not be)
//
// Strings are at most MaxTextBytes long, contain no NUL, and are valid UTF-8.

// RunStarted opens a run and fixes its configuration.
type RunStarted struct {
	Config  RunConfig `json:"config"`
	Model   string    `json:"model"`
	Harness string    `json:"harness"`
	Notes   string    `json:"notes,omitempty" rl:"optional"`
}

// Gate is one validation gate a task went through before registration.
type Gate struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
}

// TaskRegistered makes a task known to the run.
type TaskRegistered struct {
	Task   string `json:"task" rl:"id"`
	Source string `json:"source" rl:"id"`
	Kind   string `json:"kind" rl:"enum=agentic|swe"`
	Tier   int    `json:"tier"`
	Gates  []Gate `json:"gates"`
}

// Group purposes.
const (
	PurposeTrain = "train"
	PurposeProbe = "probe"
	PurposeEval  = "eval"
)

// GroupStarted opens a group of attempts at one task.
type GroupStarted struct {
	Group   string `json:"group" rl:"id"`
	Task    string `json:"task" rl:"id"`
	Size    int    `json:"size"`
	Purpose string `json:"purpose" rl:"enum=train|probe|eval"`
}

func (g *GroupStarted) validate() *FieldError {
	if g.Size < 1 {
		return fieldErr("data.size", ErrInvalidValue, "a group holds at least 1 attempt, got %d", g.Size)
	}
	return nil
}

// AttemptStarted records that an attempt began in its own microVM.
type AttemptStarted struct {
	Attempt string `json:"attempt" rl:"id"`
	Group   string `json:"group" rl:"id"`
	Task    string `json:"task" rl:"id"`
	Engine  string `json:"engine" rl:"id"`
	VM      string `json:"vm" rl:"id"`
	ForkMS  int64  `json:"fork_ms"`
	// RetryOf is the attempt whose slot this one takes, if any.
	RetryOf string `json:"retry_of,omitempty" rl:"optional,id"`
}

// Turn finish reasons.
const (
	FinishToolCall = "tool_call"
	FinishStop     = "stop"
	FinishLength   = "length"
)

// TurnGenerated records one model turn of an attempt.
type TurnGenerated struct {
	Attempt          string `json:"attempt" rl:"id"`
	Turn             int    `json:"turn"`
	PolicyVersion    int64  `json:"policy_version"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	CachedTokens     int64  `json:"cached_tokens"`
	// ObservationTokenIDs are the tokens of tool output appended to the
	// context before this turn.
	ObservationTokenIDs []int32 `json:"observation_token_ids,omitempty" rl:"optional"`
	// TokenIDs and Logprobs cover the completion only; when present both
	// have exactly CompletionTokens entries.
	TokenIDs  []int32   `json:"token_ids,omitempty" rl:"optional"`
	Logprobs  []float32 `json:"logprobs,omitempty" rl:"optional,signed,max=0"`
	Finish    string    `json:"finish" rl:"enum=tool_call|stop|length"`
	LatencyMS int64     `json:"latency_ms"`
}

func (t *TurnGenerated) validate() *FieldError {
	if t.CachedTokens > t.PromptTokens {
		return fieldErr("data.cached_tokens", ErrInvalidValue, "%d cached tokens exceed %d prompt tokens", t.CachedTokens, t.PromptTokens)
	}
	if (t.TokenIDs == nil) != (t.Logprobs == nil) {
		if t.TokenIDs == nil {
			return fieldErr("data.token_ids", ErrMissingField, "logprobs given without token_ids")
		}
		return fieldErr("data.logprobs", ErrMissingField, "token_ids given without logprobs")
	}
	if t.TokenIDs != nil && int64(len(t.TokenIDs)) != t.CompletionTokens {
		return fieldErr("data.token_ids", ErrInvalidValue, "%d token ids for %d completion tokens", len(t.TokenIDs), t.CompletionTokens)
	}
	if t.Logprobs != nil && int64(len(t.Logprobs)) != t.CompletionTokens {
		return fieldErr("data.logprobs", ErrInvalidValue, "%d logprobs for %d completion tokens", len(t.Logprobs), t.CompletionTokens)
	}
	return nil
}

// ToolCalled records one tool call made by a turn.
type ToolCalled struct {
	Attempt     string `json:"attempt" rl:"id"`
	Turn        int    `json:"turn"`
	Call        int    `json:"call"`
	Tool        string `json:"tool"`
	ExitCode    int    `json:"exit_code" rl:"signed"`
	DurationMS  int64  `json:"duration_ms"`
	OutputBytes int64  `json:"output_bytes"`
	ToFile      bool   `json:"to_file"`
	Background  bool   `json:"background"`
	TimedOut    bool   `json:"timed_out"`
}

// ContextCompacted records that an attempt's context was compacted after a
// turn; it starts a new training segment.
type ContextCompacted struct {
	Attempt      string `json:"attempt" rl:"id"`
	Turn         int    `json:"turn"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

func (c *ContextCompacted) validate() *FieldError {
	if c.TokensAfter > c.TokensBefore {
		return fieldErr("data.tokens_after", ErrInvalidValue, "%d tokens after compaction exceed %d before", c.TokensAfter, c.TokensBefore)
	}
	return nil
}

// Attempt outcomes.
const (
	OutcomeSubmitted     = "submitted"
	OutcomeTurnBudget    = "turn_budget"
	OutcomeContextBudget = "context_budget"
	OutcomeTimeout       = "timeout"
)

// AttemptFinished records how the model ended an attempt.
type AttemptFinished struct {
	Attempt string `json:"attempt" rl:"id"`
	Outcome string `json:"outcome" rl:"enum=submitted|turn_budget|context_budget|timeout"`
}

// AttemptFailed records an infrastructure failure: not the model's fault.
type AttemptFailed struct {
	Attempt string `json:"attempt" rl:"id"`
	Reason  string `json:"reason"`
}

// RewardComputed is the verifier's verdict on an attempt.
type RewardComputed struct {
	Attempt     string `json:"attempt" rl:"id"`
	Passed      bool   `json:"passed"`
	TestsPassed int    `json:"tests_passed"`
	TestsTotal  int    `json:"tests_total"`
	Verifier    string `json:"verifier"`
}

func (r *RewardComputed) validate() *FieldError {
	if r.TestsPassed > r.TestsTotal {
		return fieldErr("data.tests_passed", ErrInvalidValue, "%d tests passed of %d", r.TestsPassed, r.TestsTotal)
	}
	return nil
}

// GroupClosed says the scheduler gave up waiting for a group.
type GroupClosed struct {
	Group  string `json:"group" rl:"id"`
	Reason string `json:"reason"`
}

// PolicyPublished announces a new policy weight version.
type PolicyPublished struct {
	Version    int64  `json:"version"`
	Checkpoint string `json:"checkpoint"`
	Digest     string `json:"digest"`
	Precision  string `json:"precision"`
}

// GradientApplied is the trainer's report of one optimizer step.
type GradientApplied struct {
	Step              int64   `json:"step"`
	Batch             int64   `json:"batch"`
	BatchDigest       string  `json:"batch_digest"`
	FromVersion       int64   `json:"from_version"`
	ToVersion         int64   `json:"to_version"`
	Loss              float64 `json:"loss" rl:"signed"`
	TrainedTokens     int64   `json:"trained_tokens"`
	TruncatedFraction float64 `json:"truncated_fraction" rl:"max=1"`
	// LogprobGap maps a staleness ("0", "1", ...) to the mean absolute gap
	// between trainer and rollout log-probs at that staleness.
	LogprobGap map[string]float64 `json:"logprob_gap"`
	GradNorm   float64            `json:"grad_norm"`
}

func (g *GradientApplied) validate() *FieldError {
	if g.Step < 1 {
		return fieldErr("data.step", ErrInvalidValue, "steps start at 1, got %d", g.Step)
	}
	if g.Batch < 1 {
		return fieldErr("data.batch", ErrInvalidValue, "batches start at 1, got %d", g.Batch)
	}
	if g.ToVersion <= g.FromVersion {
		return fieldErr("data.to_version", ErrInvalidValue, "to_version %d does not follow from_version %d", g.ToVersion, g.FromVersion)
	}
	// Sorted, so that of several bad keys the same one is always named.
	for _, k := range slices.Sorted(maps.Keys(g.LogprobGap)) {
		if !isStalenessKey(k) {
			return fieldErr("data.logprob_gap."+k, ErrInvalidValue, "key %q is not a staleness (a non-negative integer)", k)
		}
	}
	return nil
}

func isStalenessKey(k string) bool {
	if k == "" || len(k) > 6 || (len(k) > 1 && k[0] == '0') {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '0' || k[i] > '9' {
			return false
		}
	}
	return true
}

func (*RunStarted) FactType() Type       { return TypeRunStarted }
func (*TaskRegistered) FactType() Type   { return TypeTaskRegistered }
func (*GroupStarted) FactType() Type     { return TypeGroupStarted }
func (*AttemptStarted) FactType() Type   { return TypeAttemptStarted }
func (*TurnGenerated) FactType() Type    { return TypeTurnGenerated }
func (*ToolCalled) FactType() Type       { return TypeToolCalled }
func (*ContextCompacted) FactType() Type { return TypeContextCompacted }
func (*AttemptFinished) FactType() Type  { return TypeAttemptFinished }
func (*AttemptFailed) FactType() Type    { return TypeAttemptFailed }
func (*RewardComputed) FactType() Type   { return TypeRewardComputed }
func (*GroupClosed) FactType() Type      { return TypeGroupClosed }
func (*PolicyPublished) FactType() Type  { return TypePolicyPublished }
func (*GradientApplied) FactType() Type  { return TypeGradientApplied }

// catalogue maps each fact type and schema version to a constructor of its
// data. A new schema version is a new entry; old ones stay readable forever.
var catalogue = map[Type]map[int]func() Fact{
	TypeRunStarted:       {1: func() Fact { return new(RunStarted) }},
	TypeTaskRegistered:   {1: func() Fact { return new(TaskRegistered) }},
	TypeGroupStarted:     {1: func() Fact { return new(GroupStarted) }},
	TypeAttemptStarted:   {1: func() Fact { return new(AttemptStarted) }},
	TypeTurnGenerated:    {1: func() Fact { return new(TurnGenerated) }},
	TypeToolCalled:       {1: func() Fact { return new(ToolCalled) }},
	TypeContextCompacted: {1: func() Fact { return new(ContextCompacted) }},
	TypeAttemptFinished:  {1: func() Fact { return new(AttemptFinished) }},
	TypeAttemptFailed:    {1: func() Fact { return new(AttemptFailed) }},
	TypeRewardComputed:   {1: func() Fact { return new(RewardComputed) }},
	TypeGroupClosed:      {1: func() Fact { return new(GroupClosed) }},
	TypePolicyPublished:  {1: func() Fact { return new(PolicyPublished) }},
	TypeGradientApplied:  {1: func() Fact { return new(GradientApplied) }},
}

// FactTypes lists the catalogue's fact types in a fixed order.
func FactTypes() []Type {
	return []Type{
		TypeRunStarted, TypeTaskRegistered, TypeGroupStarted, TypeAttemptStarted,
		TypeTurnGenerated, TypeToolCalled, TypeContextCompacted, TypeAttemptFinished,
		TypeAttemptFailed, TypeRewardComputed, TypeGroupClosed, TypePolicyPublished,
		TypeGradientApplied,
	}
}

// CurrentVersion is the schema version producers write today for t, or 0
// for a type outside the catalogue.
func CurrentVersion(t Type) int {
	best := 0
	for v := range catalogue[t] {
		best = max(best, v)
	}
	return best
}
