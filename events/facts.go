package events

import (
	"cmp"
	"slices"
)

// Type names a fact (or decision) type, e.g. "turn.generated".
type Type string

// The fact types of the catalogue (docs/design.md §3; version 2 of three
// of them, §18).
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
	// TypeVocabularyRegistered carries an engine's vocabulary, in chunks
	// (docs/design.md §18.10).
	TypeVocabularyRegistered Type = "vocabulary.registered"
)

// Fact is the data of one event. Each catalogue type implements it.
type Fact interface {
	// FactType is the catalogue type this data belongs to.
	FactType() Type
}

// The rules of a value live in its field's `rl` tags; rules that span
// fields are listed by the type's ruleSet method (see rules.go). Both are
// written into the catalogue's JSON Schema (schema.go).
//
// Field tags (`rl:"..."`), read once per type by the strict decoder:
//
//	optional   may be absent (required otherwise; null is never accepted)
//	id         an entity id: [A-Za-z0-9._:/-]{1,200}
//	enum=a|b   one of the listed strings
//	signed     a number that may be negative (others must be >= 0)
//	max=X      a number at most X
//	empty      a string that may be empty (others must not be)
//	int32le    an optional []int32 sent as base64 of little-endian int32s
//	float32le  an optional []float32 sent as base64 of little-endian float32s
//	bytes      an optional []byte sent as base64
//	maxbytes=N a string of at most N bytes (MaxTextBytes otherwise)
//
// A pointer is optional, and its zero ("parent": 0) is a value: only its
// absence is absent. A pointer to a struct is an optional object.
//
// Strings are at most MaxTextBytes long, contain no NUL, and are valid
// UTF-8. The bounds of a binary field (signed, max) apply to each value.
//
// Each type below is the newest version of its fact, and the shape every
// version decodes into; the older versions' wire forms and the steps
// between them are in versions.go.

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
	// Prompt is the task's prompt, at most MaxTextBytes; PromptCut counts
	// the bytes of the real prompt left out to fit (version 2).
	Prompt    string `json:"prompt,omitempty" rl:"optional"`
	PromptCut int64  `json:"prompt_cut,omitempty" rl:"optional"`
}

func (*TaskRegistered) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "prompt", RequiredBy: "prompt_cut", Err: ErrMissingField, Message: "prompt_cut {prompt_cut} given without prompt"},
	}}
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

func (*GroupStarted) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "size", Minimum: num(1), Message: "a group holds at least 1 attempt, got {size}"},
	}}
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
	// FinishAbort is a generation the engine aborted (a weight update,
	// say) and nobody continued (turn.generated v3).
	FinishAbort = "abort"
)

// How a v3 turn's prompt ids were obtained (prompt_ids_from).
const (
	PromptIDsEngine   = "engine"   // in the engine's answer
	PromptIDsTokenize = "tokenize" // from the engine's tokenize or render routes
	PromptIDsClient   = "client"   // given token-in by the client
)

// Where a v3 turn's completion ids came from (ids_from).
const (
	IDsEngine = "engine" // the OpenAI-compatible answer's token ids
	IDsNative = "native" // the engine-native route
)

// Tags of a v3 turn: what went wrong while it was recorded.
const (
	TagIDsMismatch     = "ids_mismatch"     // ids, log-probs and usage disagree in length; tokens dropped
	TagLogprobsMissing = "logprobs_missing" // the engine gave no log-probs
	TagClientCut       = "client_cut"       // the client disconnected before the answer ended
	TagContinued       = "continued"        // an update aborted generation and it was continued token-in
	TagRefused         = "refused"          // strict capture refused the turn: the attempt never trains
	TagNoPromptIDs     = "no_prompt_ids"    // the prompt's ids could not be obtained
)

// How a version segment's policy version was known (known).
const (
	KnownEngine    = "engine"    // the engine reported it
	KnownObserved  = "observed"  // the update was seen landing mid-stream
	KnownBracketed = "bracketed" // only the versions before and after are known
)

// TurnRef is a reference to turn i, for TurnGenerated.Parent.
func TurnRef(i int) *int { return &i }

// TurnGenerated records one model turn of an attempt.
type TurnGenerated struct {
	Attempt          string `json:"attempt" rl:"id"`
	Turn             int    `json:"turn"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	CachedTokens     int64  `json:"cached_tokens"`
	// VersionSegments say which policy version generated which completion
	// tokens: segment i covers tokens from its Start to the next segment's
	// (or the end). A turn generated by one version has one segment; the
	// weights may change while a turn is generated (an in-flight update),
	// and then it has more. A version 1 fact has one, from its
	// policy_version.
	VersionSegments []VersionSegment `json:"version_segments"`
	// ObservationTokenIDs are the tokens of tool output appended to the
	// context before this turn; from version 3 on, exactly the turn's new
	// prompt tokens (see Parent).
	ObservationTokenIDs []int32 `json:"observation_token_ids,omitempty" rl:"optional,int32le"`
	// TokenIDs and Logprobs cover the completion only; when present both
	// have exactly CompletionTokens entries.
	TokenIDs []int32   `json:"token_ids,omitempty" rl:"optional,int32le"`
	Logprobs []float32 `json:"logprobs,omitempty" rl:"optional,float32le,signed,max=0"`
	// Text is the completion's text, at most MaxTextBytes; TextCut counts
	// the bytes of the real text left out to fit.
	Text      string `json:"text,omitempty" rl:"optional"`
	TextCut   int64  `json:"text_cut,omitempty" rl:"optional"`
	Finish    string `json:"finish" rl:"enum=tool_call|stop|length|abort"`
	LatencyMS int64  `json:"latency_ms"`

	// Version 3 (docs/design.md §18.9): a turn as a recording proxy sees
	// it. Parent is the earlier turn whose prompt and completion are the
	// longest prefix of this turn's prompt, and PrefixTokens how many
	// prompt tokens they share; absent, the turn has no parent (the
	// attempt's first turn, or one whose context was rewritten). From
	// version 3 on, ObservationTokenIDs, when present, are exactly the new
	// prompt tokens, prompt_tokens − prefix_tokens of them: the whole
	// prompt of a turn without a parent.
	Parent       *int  `json:"parent,omitempty"`
	PrefixTokens int64 `json:"prefix_tokens,omitempty" rl:"optional"`
	// Diverged names the previous turn whose sequence this prompt does
	// not extend, and where the two differ.
	Diverged      *Divergence `json:"diverged,omitempty"`
	PromptIDsFrom string      `json:"prompt_ids_from,omitempty" rl:"optional,enum=engine|tokenize|client"`
	IDsFrom       string      `json:"ids_from,omitempty" rl:"optional,enum=engine|native"`
	Sampling      *Sampling   `json:"sampling,omitempty"`
	Engine        *EngineInfo `json:"engine,omitempty"`
	// Tags are sorted and unique.
	Tags []string `json:"tags,omitempty" rl:"optional,enum=ids_mismatch|logprobs_missing|client_cut|continued|refused|no_prompt_ids"`
}

// Divergence is where a turn's prompt stops extending the sequence of an
// earlier turn: Turn's prompt and completion, and this prompt, differ
// first at token At.
type Divergence struct {
	Turn int   `json:"turn"`
	At   int64 `json:"at"`
}

// Sampling is the effective sampling parameters of a turn; each is absent
// when not known.
type Sampling struct {
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty" rl:"max=1"`
	TopK              *int64   `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty" rl:"max=1"`
	MaxTokens         *int64   `json:"max_tokens,omitempty"`
	Seed              *int64   `json:"seed,omitempty" rl:"signed"`
	PresencePenalty   *float64 `json:"presence_penalty,omitempty" rl:"signed"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty" rl:"signed"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	// LogprobsMode says how the engine computed log-probs
	// (raw_logprobs, processed_logprobs, post_sampling, ...).
	LogprobsMode string `json:"logprobs_mode,omitempty" rl:"optional,maxbytes=64"`
}

// EngineInfo names the inference engine that generated a turn.
type EngineInfo struct {
	Name    string `json:"name" rl:"id"`
	Version string `json:"version,omitempty" rl:"optional,maxbytes=128"`
}

// VersionSegment is where the tokens generated by one policy version
// start in a turn's completion.
type VersionSegment struct {
	Start         int64 `json:"start"`
	PolicyVersion int64 `json:"policy_version"`
	// Known says how the version was known (version 3 of turn.generated):
	// absent, the producer declared it.
	Known string `json:"known,omitempty" rl:"optional,enum=engine|observed|bracketed"`
}

// Temperature is the turn's sampling temperature, and whether it is known.
func (t *TurnGenerated) Temperature() (float64, bool) {
	if t.Sampling == nil || t.Sampling.Temperature == nil {
		return 0, false
	}
	return *t.Sampling.Temperature, true
}

// HasTag reports whether the turn carries tag.
func (t *TurnGenerated) HasTag(tag string) bool { return slices.Contains(t.Tags, tag) }

// SingleVersion is the version segments of a turn generated wholly by
// policy version v.
func SingleVersion(v int64) []VersionSegment { return []VersionSegment{{Start: 0, PolicyVersion: v}} }

// PolicyVersion is the version that generated the turn's first token (the
// first segment's): the only one of a turn that has one segment, as every
// version 1 fact has.
func (t *TurnGenerated) PolicyVersion() int64 {
	if len(t.VersionSegments) == 0 {
		return 0
	}
	return t.VersionSegments[0].PolicyVersion
}

// VersionAt is the version that generated completion token i: that of the
// last segment starting at or before i.
func (t *TurnGenerated) VersionAt(i int64) int64 {
	segs := t.VersionSegments
	j, _ := slices.BinarySearchFunc(segs, i, func(s VersionSegment, i int64) int { return cmp.Compare(s.Start, i) })
	switch {
	case j < len(segs) && segs[j].Start == i:
		return segs[j].PolicyVersion
	case j > 0:
		return segs[j-1].PolicyVersion
	case len(segs) > 0:
		return segs[0].PolicyVersion
	}
	return 0
}

// The rules of a version 2 turn (docs/design.md §18.3), checked in this
// order: the segments cover the completion from its first token, in
// order, each at a newer version than the one before.
var turnGeneratedRules = []rule{
	{Field: "cached_tokens", Maximum: ref("prompt_tokens"), Message: "{cached_tokens} cached tokens exceed {prompt_tokens} prompt tokens"},
	{Field: "version_segments", MinItems: num(1), Message: "no version segments: a turn has at least one"},
	{Field: "version_segments", Items: "start", First: num(0), Message: "the first segment starts at token {$value}, not 0"},
	{Field: "version_segments", Items: "start", Ascending: true, Message: "starts at token {$value}, not after the previous segment's start {$previous}"},
	{Field: "version_segments", Items: "start", From: 1, ExclusiveMaximum: ref("completion_tokens"),
		Message: "starts at token {$value}, past the last of {completion_tokens} completion tokens"},
	{Field: "version_segments", Items: "policy_version", Ascending: true,
		Message: "policy version {$value} does not follow the previous segment's {$previous}: versions only move forward, and a version's tokens are one segment"},
	{Field: "token_ids", RequiredBy: "logprobs", Err: ErrMissingField, Message: "logprobs given without token_ids"},
	{Field: "logprobs", RequiredBy: "token_ids", Err: ErrMissingField, Message: "token_ids given without logprobs"},
	{Field: "token_ids", Length: ref("completion_tokens"), Message: "{$len} token ids for {completion_tokens} completion tokens"},
	{Field: "logprobs", Length: ref("completion_tokens"), Message: "{$len} logprobs for {completion_tokens} completion tokens"},
	{Field: "text", RequiredBy: "text_cut", Err: ErrMissingField, Message: "text_cut {text_cut} given without text"},
}

// The rules version 3 adds (docs/design.md §18.9): a parent comes before
// the turn and shares prefix_tokens of its prompt, present together; the
// observation tokens are the new prompt tokens; a divergence names an
// earlier turn; tags are sorted and unique.
var turnGeneratedV3Rules = append(slices.Clone(turnGeneratedRules),
	rule{Field: "parent", ExclusiveMaximum: ref("turn"), Message: "parent turn {parent} is not before turn {turn}"},
	rule{Field: "prefix_tokens", RequiredBy: "parent", Err: ErrMissingField, Message: "parent {parent} given without prefix_tokens"},
	rule{Field: "parent", RequiredBy: "prefix_tokens", Err: ErrMissingField, Message: "prefix_tokens {prefix_tokens} given without parent"},
	rule{Field: "prefix_tokens", Maximum: ref("prompt_tokens"), Message: "{prefix_tokens} prefix tokens exceed {prompt_tokens} prompt tokens"},
	rule{Field: "observation_token_ids", Length: diff("prompt_tokens", "prefix_tokens"),
		Message: "{$len} observation token ids for {prompt_tokens} prompt tokens: they are the prompt's new tokens, all but the prefix_tokens shared with the parent"},
	rule{Field: "diverged", Items: "turn", ExclusiveMaximum: ref("turn"), Message: "diverged from turn {$value}, which is not before turn {turn}"},
	rule{Field: "tags", Ascending: true, Message: "tag {$value} does not follow {$previous}: tags are sorted and unique"},
)

func (*TurnGenerated) ruleSet() ruleSet { return ruleSet{rules: turnGeneratedV3Rules} }

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
	// Input is the call's input and Output what it printed, each at most
	// MaxTextBytes; InputCut and OutputCut count the bytes of the real
	// ones left out to fit (version 2). OutputBytes stays the size of the
	// whole output.
	Input     string `json:"input,omitempty" rl:"optional"`
	InputCut  int64  `json:"input_cut,omitempty" rl:"optional"`
	Output    string `json:"output,omitempty" rl:"optional"`
	OutputCut int64  `json:"output_cut,omitempty" rl:"optional"`
	// CallID is the call's id in the chat API (tool_call_id); Unanswered
	// says its output never came back in the attempt's next request;
	// ExitUnknown says exit_code, duration_ms and timed_out are not known
	// to the producer (a proxy sees only messages), and exit_code 0 then
	// means nothing (version 3).
	CallID      string `json:"call_id,omitempty" rl:"optional,maxbytes=200"`
	Unanswered  bool   `json:"unanswered,omitempty" rl:"optional"`
	ExitUnknown bool   `json:"exit_unknown,omitempty" rl:"optional"`
}

func (*ToolCalled) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "input", RequiredBy: "input_cut", Err: ErrMissingField, Message: "input_cut {input_cut} given without input"},
		{Field: "output", RequiredBy: "output_cut", Err: ErrMissingField, Message: "output_cut {output_cut} given without output"},
		{Field: "output_cut", Maximum: ref("output_bytes"), Message: "{output_cut} bytes cut from an output of {output_bytes} bytes"},
	}}
}

// ContextCompacted records that an attempt's context was compacted after a
// turn; it starts a new training segment.
type ContextCompacted struct {
	Attempt      string `json:"attempt" rl:"id"`
	Turn         int    `json:"turn"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

func (*ContextCompacted) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "tokens_after", Maximum: ref("tokens_before"), Message: "{tokens_after} tokens after compaction exceed {tokens_before} before"},
	}}
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

func (*RewardComputed) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "tests_passed", Maximum: ref("tests_total"), Message: "{tests_passed} tests passed of {tests_total}"},
	}}
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

// stalenessKey is a staleness written as a map key: a non-negative integer
// of at most six digits, without leading zeros.
const stalenessKey = `^(?:0|[1-9][0-9]{0,5})$`

func (*GradientApplied) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "step", Minimum: num(1), Message: "steps start at 1, got {step}"},
		{Field: "batch", Minimum: num(1), Message: "batches start at 1, got {batch}"},
		{Field: "to_version", ExclusiveMinimum: ref("from_version"), Message: "to_version {to_version} does not follow from_version {from_version}"},
		// Keys are checked in sorted order, so that of several bad keys the
		// same one is always named.
		{Field: "logprob_gap", PropertyNames: stalenessKey, Message: "key {$key} is not a staleness (a non-negative integer)"},
	}}
}

// VocabularyRegistered is one chunk of an engine's vocabulary: the pieces
// of tokens First to First+len(Offsets)-1, so that tools can show decoded
// tokens. A producer registers it once per run, in Chunks chunks, each
// within the record limit; the projections ignore it.
type VocabularyRegistered struct {
	Engine string `json:"engine" rl:"id"`
	Model  string `json:"model"`
	// Size is the vocabulary's token count.
	Size   int64 `json:"size"`
	Chunk  int   `json:"chunk"`
	Chunks int   `json:"chunks"`
	// First is the id of this chunk's first token.
	First int32 `json:"first"`
	// Pieces is the tokens' bytes concatenated, and Offsets the end of
	// each token's piece within Pieces.
	Pieces  []byte  `json:"pieces,omitempty" rl:"optional,bytes"`
	Offsets []int32 `json:"offsets,omitempty" rl:"optional,int32le"`
}

func (*VocabularyRegistered) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "chunks", Minimum: num(1), Message: "a vocabulary comes in at least 1 chunk, got {chunks}"},
		{Field: "chunk", ExclusiveMaximum: ref("chunks"), Message: "chunk {chunk} of {chunks}: chunks count from 0"},
		{Field: "first", ExclusiveMaximum: ref("size"), Message: "first token {first} is outside a vocabulary of {size}"},
		{Field: "offsets", MaxItems: diff("size", "first"), Message: "{$len} tokens from token {first} overrun a vocabulary of {size}"},
		{Field: "offsets", RequiredBy: "pieces", Err: ErrMissingField, Message: "pieces given without offsets"},
	}}
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
func (*VocabularyRegistered) FactType() Type {
	return TypeVocabularyRegistered
}

// FactTypes lists the catalogue's fact types in a fixed order.
func FactTypes() []Type {
	return []Type{
		TypeRunStarted, TypeTaskRegistered, TypeGroupStarted, TypeAttemptStarted,
		TypeTurnGenerated, TypeToolCalled, TypeContextCompacted, TypeAttemptFinished,
		TypeAttemptFailed, TypeRewardComputed, TypeGroupClosed, TypePolicyPublished,
		TypeGradientApplied, TypeVocabularyRegistered,
	}
}

// CurrentVersion is the schema version producers write today for t, or 0
// for a type outside the catalogue.
func CurrentVersion(t Type) int { return len(catalogue[t]) }
