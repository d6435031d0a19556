package events

import (
	"fmt"
	"reflect"
	"sync"
)

// Versions (docs/design.md §18.4). A fact type's schema versions are a
// list: the last is the type's struct in facts.go, which every version
// decodes into, and each older one is the struct of its wire form with
// the step to the next: up converts a decoded value to the next
// version's, down converts back, or says why the value has no form in
// the older version.
//
// Decoding a version k record decodes its wire struct, checks it, then
// runs up from k to the newest; encoding an event of version k runs down
// from the newest to k, so a fact keeps the shape of its record's version:
// the record of a version 1 fact is the same bytes forever (they are a
// Merkle leaf). Adding version 3 of a type is one more step: the struct of
// version 2 moves here under its own name, with up and down to the new
// newest struct.
type schemaVersion struct {
	// newWire returns a new value of the version's wire struct, a pointer;
	// spec is that struct's, looked up once (every fact decoded needs it).
	newWire func() any
	spec    func() *spec
	// up and down step to and from the next version; nil for the newest.
	up   func(any) any
	down func(any) (any, *FieldError)
}

// specFor is the spec of T, built at its first use.
func specFor[T any]() func() *spec {
	return sync.OnceValue(func() *spec { return specOf(reflect.TypeFor[T]()) })
}

// newest is the version whose wire struct is the type's struct.
func newest[T any, PT interface {
	*T
	Fact
}]() schemaVersion {
	return schemaVersion{newWire: func() any { return PT(new(T)) }, spec: specFor[T]()}
}

// older is a version with the steps to and from the next one.
func older[Old, Next any](up func(*Old) *Next, down func(*Next) (*Old, *FieldError)) schemaVersion {
	return schemaVersion{
		newWire: func() any { return new(Old) },
		spec:    specFor[Old](),
		up:      func(x any) any { return up(x.(*Old)) },
		down:    func(x any) (any, *FieldError) { return down(x.(*Next)) },
	}
}

// catalogue lists each fact type's schema versions, version 1 first. Old
// versions stay readable forever.
var catalogue = map[Type][]schemaVersion{
	TypeRunStarted:     {newest[RunStarted]()},
	TypeTaskRegistered: {older(taskRegisteredV1Up, taskRegisteredV1Down), newest[TaskRegistered]()},
	TypeGroupStarted:   {newest[GroupStarted]()},
	TypeAttemptStarted: {newest[AttemptStarted]()},
	TypeTurnGenerated: {older(turnGeneratedV1Up, turnGeneratedV1Down), older(turnGeneratedV2Up, turnGeneratedV2Down),
		newest[TurnGenerated]()},
	TypeToolCalled:           {older(toolCalledV1Up, toolCalledV1Down), older(toolCalledV2Up, toolCalledV2Down), newest[ToolCalled]()},
	TypeContextCompacted:     {newest[ContextCompacted]()},
	TypeAttemptFinished:      {newest[AttemptFinished]()},
	TypeAttemptFailed:        {newest[AttemptFailed]()},
	TypeRewardComputed:       {newest[RewardComputed]()},
	TypeGroupClosed:          {newest[GroupClosed]()},
	TypePolicyPublished:      {newest[PolicyPublished]()},
	TypeGradientApplied:      {newest[GradientApplied]()},
	TypeVocabularyRegistered: {newest[VocabularyRegistered]()},
}

// wireType is the struct type of version v of t's data.
func wireType(t Type, v int) reflect.Type {
	return reflect.TypeOf(catalogue[t][v-1].newWire()).Elem()
}

// upcast converts the decoded wire value w of version v, of the type
// whose versions are given, to the type's struct.
func upcast(versions []schemaVersion, v int, w any) Fact {
	for i := v - 1; i < len(versions)-1; i++ {
		w = versions[i].up(w)
	}
	return w.(Fact)
}

// downcast converts the fact f of type t to the wire value of version v,
// or says why version v cannot hold it.
func downcast(t Type, v int, f Fact) (any, error) {
	versions, ok := catalogue[t]
	if !ok {
		return nil, fmt.Errorf("events: %q is not in the catalogue", t)
	}
	if v < 1 || v > len(versions) {
		return nil, fmt.Errorf("events: %s has no schema version %d", t, v)
	}
	if want := reflect.TypeOf(versions[len(versions)-1].newWire()); reflect.TypeOf(f) != want {
		return nil, fmt.Errorf("events: %s data is a %T, not a %s", t, f, want)
	}
	var w any = f
	for i := len(versions) - 2; i >= v-1; i-- {
		var fe *FieldError
		if w, fe = versions[i].down(w); fe != nil {
			return nil, fe
		}
	}
	return w, nil
}

// notInVersion is the error of a down step: version v of t has no place
// for what field holds.
func notInVersion(t Type, v int, field, format string, args ...any) *FieldError {
	return fieldErr("data."+field, ErrInvalidValue, "%s v%d cannot hold it: %s", t, v, fmt.Sprintf(format, args...))
}

// turnGeneratedV1 is turn.generated version 1: one policy version per
// turn, token arrays as JSON arrays, no text.
type turnGeneratedV1 struct {
	Attempt             string    `json:"attempt" rl:"id"`
	Turn                int       `json:"turn"`
	PolicyVersion       int64     `json:"policy_version"`
	PromptTokens        int64     `json:"prompt_tokens"`
	CompletionTokens    int64     `json:"completion_tokens"`
	CachedTokens        int64     `json:"cached_tokens"`
	ObservationTokenIDs []int32   `json:"observation_token_ids,omitempty" rl:"optional"`
	TokenIDs            []int32   `json:"token_ids,omitempty" rl:"optional"`
	Logprobs            []float32 `json:"logprobs,omitempty" rl:"optional,signed,max=0"`
	Finish              string    `json:"finish" rl:"enum=tool_call|stop|length"`
	LatencyMS           int64     `json:"latency_ms"`
}

var turnGeneratedV1Rules = []rule{
	{Field: "cached_tokens", Maximum: ref("prompt_tokens"), Message: "{cached_tokens} cached tokens exceed {prompt_tokens} prompt tokens"},
	{Field: "token_ids", RequiredBy: "logprobs", Err: ErrMissingField, Message: "logprobs given without token_ids"},
	{Field: "logprobs", RequiredBy: "token_ids", Err: ErrMissingField, Message: "token_ids given without logprobs"},
	{Field: "token_ids", Length: ref("completion_tokens"), Message: "{$len} token ids for {completion_tokens} completion tokens"},
	{Field: "logprobs", Length: ref("completion_tokens"), Message: "{$len} logprobs for {completion_tokens} completion tokens"},
}

func (*turnGeneratedV1) ruleSet() ruleSet { return ruleSet{rules: turnGeneratedV1Rules} }

// A version 1 turn's policy_version P is the one segment [{0, P}].
func turnGeneratedV1Up(o *turnGeneratedV1) *turnGeneratedV2 {
	return &turnGeneratedV2{
		Attempt: o.Attempt, Turn: o.Turn, PromptTokens: o.PromptTokens, CompletionTokens: o.CompletionTokens,
		CachedTokens: o.CachedTokens, VersionSegments: []versionSegmentV2{{Start: 0, PolicyVersion: o.PolicyVersion}},
		ObservationTokenIDs: o.ObservationTokenIDs, TokenIDs: o.TokenIDs, Logprobs: o.Logprobs,
		Finish: o.Finish, LatencyMS: o.LatencyMS,
	}
}

func turnGeneratedV1Down(t *turnGeneratedV2) (*turnGeneratedV1, *FieldError) {
	switch segs := t.VersionSegments; {
	case len(segs) != 1:
		return nil, notInVersion(TypeTurnGenerated, 1, "version_segments", "one policy version per turn, not %d segments", len(segs))
	case segs[0].Start != 0:
		return nil, notInVersion(TypeTurnGenerated, 1, "version_segments", "its one segment starts at token 0, not %d", segs[0].Start)
	case t.Text != "" || t.TextCut != 0:
		return nil, notInVersion(TypeTurnGenerated, 1, "text", "no text")
	}
	return &turnGeneratedV1{
		Attempt: t.Attempt, Turn: t.Turn, PolicyVersion: t.VersionSegments[0].PolicyVersion, PromptTokens: t.PromptTokens,
		CompletionTokens: t.CompletionTokens, CachedTokens: t.CachedTokens, ObservationTokenIDs: t.ObservationTokenIDs,
		TokenIDs: t.TokenIDs, Logprobs: t.Logprobs, Finish: t.Finish, LatencyMS: t.LatencyMS,
	}, nil
}

// turnGeneratedV2 is turn.generated version 2: per-token version
// segments, binary token arrays and text, without what a recording proxy
// adds in version 3.
type turnGeneratedV2 struct {
	Attempt             string             `json:"attempt" rl:"id"`
	Turn                int                `json:"turn"`
	PromptTokens        int64              `json:"prompt_tokens"`
	CompletionTokens    int64              `json:"completion_tokens"`
	CachedTokens        int64              `json:"cached_tokens"`
	VersionSegments     []versionSegmentV2 `json:"version_segments"`
	ObservationTokenIDs []int32            `json:"observation_token_ids,omitempty" rl:"optional,int32le"`
	TokenIDs            []int32            `json:"token_ids,omitempty" rl:"optional,int32le"`
	Logprobs            []float32          `json:"logprobs,omitempty" rl:"optional,float32le,signed,max=0"`
	Text                string             `json:"text,omitempty" rl:"optional"`
	TextCut             int64              `json:"text_cut,omitempty" rl:"optional"`
	Finish              string             `json:"finish" rl:"enum=tool_call|stop|length"`
	LatencyMS           int64              `json:"latency_ms"`
}

// versionSegmentV2 is a version segment of turn.generated version 2:
// without how its version was known.
type versionSegmentV2 struct {
	Start         int64 `json:"start"`
	PolicyVersion int64 `json:"policy_version"`
}

func (*turnGeneratedV2) ruleSet() ruleSet { return ruleSet{rules: turnGeneratedRules} }

// A version 2 turn has no parent, no divergence, no sampling, engine or
// tags, and its segments' versions were declared by the producer.
func turnGeneratedV2Up(o *turnGeneratedV2) *TurnGenerated {
	segs := make([]VersionSegment, len(o.VersionSegments))
	for i, vs := range o.VersionSegments {
		segs[i] = VersionSegment{Start: vs.Start, PolicyVersion: vs.PolicyVersion}
	}
	return &TurnGenerated{
		Attempt: o.Attempt, Turn: o.Turn, PromptTokens: o.PromptTokens, CompletionTokens: o.CompletionTokens,
		CachedTokens: o.CachedTokens, VersionSegments: segs, ObservationTokenIDs: o.ObservationTokenIDs,
		TokenIDs: o.TokenIDs, Logprobs: o.Logprobs, Text: o.Text, TextCut: o.TextCut, Finish: o.Finish, LatencyMS: o.LatencyMS,
	}
}

func turnGeneratedV2Down(t *TurnGenerated) (*turnGeneratedV2, *FieldError) {
	v2 := func(field, what string) *FieldError { return notInVersion(TypeTurnGenerated, 2, field, "%s", what) }
	switch {
	case t.Parent != nil || t.PrefixTokens != 0:
		return nil, v2("parent", "no parent")
	case t.Diverged != nil:
		return nil, v2("diverged", "no divergence")
	case t.PromptIDsFrom != "":
		return nil, v2("prompt_ids_from", "no prompt_ids_from")
	case t.IDsFrom != "":
		return nil, v2("ids_from", "no ids_from")
	case t.Sampling != nil:
		return nil, v2("sampling", "no sampling parameters")
	case t.Engine != nil:
		return nil, v2("engine", "no engine")
	case len(t.Tags) > 0:
		return nil, v2("tags", "no tags")
	case t.Finish == FinishAbort:
		return nil, v2("finish", "no finish reason abort")
	}
	segs := make([]versionSegmentV2, len(t.VersionSegments))
	for i, vs := range t.VersionSegments {
		if vs.Known != "" {
			return nil, notInVersion(TypeTurnGenerated, 2, fmt.Sprintf("version_segments[%d].known", i), "no known")
		}
		segs[i] = versionSegmentV2{Start: vs.Start, PolicyVersion: vs.PolicyVersion}
	}
	return &turnGeneratedV2{
		Attempt: t.Attempt, Turn: t.Turn, PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens,
		CachedTokens: t.CachedTokens, VersionSegments: segs, ObservationTokenIDs: t.ObservationTokenIDs,
		TokenIDs: t.TokenIDs, Logprobs: t.Logprobs, Text: t.Text, TextCut: t.TextCut, Finish: t.Finish, LatencyMS: t.LatencyMS,
	}, nil
}

// toolCalledV2 is tool.called version 2: input and output, without the
// call's id and what a proxy cannot know.
type toolCalledV2 struct {
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
	Input       string `json:"input,omitempty" rl:"optional"`
	InputCut    int64  `json:"input_cut,omitempty" rl:"optional"`
	Output      string `json:"output,omitempty" rl:"optional"`
	OutputCut   int64  `json:"output_cut,omitempty" rl:"optional"`
}

func (*toolCalledV2) ruleSet() ruleSet { return (*ToolCalled)(nil).ruleSet() }

func toolCalledV2Up(o *toolCalledV2) *ToolCalled {
	return &ToolCalled{
		Attempt: o.Attempt, Turn: o.Turn, Call: o.Call, Tool: o.Tool, ExitCode: o.ExitCode, DurationMS: o.DurationMS,
		OutputBytes: o.OutputBytes, ToFile: o.ToFile, Background: o.Background, TimedOut: o.TimedOut,
		Input: o.Input, InputCut: o.InputCut, Output: o.Output, OutputCut: o.OutputCut,
	}
}

func toolCalledV2Down(t *ToolCalled) (*toolCalledV2, *FieldError) {
	switch {
	case t.CallID != "":
		return nil, notInVersion(TypeToolCalled, 2, "call_id", "no call_id")
	case t.Unanswered:
		return nil, notInVersion(TypeToolCalled, 2, "unanswered", "no unanswered")
	case t.ExitUnknown:
		return nil, notInVersion(TypeToolCalled, 2, "exit_unknown", "no exit_unknown")
	}
	return &toolCalledV2{
		Attempt: t.Attempt, Turn: t.Turn, Call: t.Call, Tool: t.Tool, ExitCode: t.ExitCode, DurationMS: t.DurationMS,
		OutputBytes: t.OutputBytes, ToFile: t.ToFile, Background: t.Background, TimedOut: t.TimedOut,
		Input: t.Input, InputCut: t.InputCut, Output: t.Output, OutputCut: t.OutputCut,
	}, nil
}

// toolCalledV1 is tool.called version 1: no input or output.
type toolCalledV1 struct {
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

func toolCalledV1Up(o *toolCalledV1) *toolCalledV2 {
	return &toolCalledV2{
		Attempt: o.Attempt, Turn: o.Turn, Call: o.Call, Tool: o.Tool, ExitCode: o.ExitCode, DurationMS: o.DurationMS,
		OutputBytes: o.OutputBytes, ToFile: o.ToFile, Background: o.Background, TimedOut: o.TimedOut,
	}
}

func toolCalledV1Down(t *toolCalledV2) (*toolCalledV1, *FieldError) {
	switch {
	case t.Input != "" || t.InputCut != 0:
		return nil, notInVersion(TypeToolCalled, 1, "input", "no input")
	case t.Output != "" || t.OutputCut != 0:
		return nil, notInVersion(TypeToolCalled, 1, "output", "no output")
	}
	return &toolCalledV1{
		Attempt: t.Attempt, Turn: t.Turn, Call: t.Call, Tool: t.Tool, ExitCode: t.ExitCode, DurationMS: t.DurationMS,
		OutputBytes: t.OutputBytes, ToFile: t.ToFile, Background: t.Background, TimedOut: t.TimedOut,
	}, nil
}

// taskRegisteredV1 is task.registered version 1: no prompt.
type taskRegisteredV1 struct {
	Task   string `json:"task" rl:"id"`
	Source string `json:"source" rl:"id"`
	Kind   string `json:"kind" rl:"enum=agentic|swe"`
	Tier   int    `json:"tier"`
	Gates  []Gate `json:"gates"`
}

func taskRegisteredV1Up(o *taskRegisteredV1) *TaskRegistered {
	return &TaskRegistered{Task: o.Task, Source: o.Source, Kind: o.Kind, Tier: o.Tier, Gates: o.Gates}
}

func taskRegisteredV1Down(t *TaskRegistered) (*taskRegisteredV1, *FieldError) {
	if t.Prompt != "" || t.PromptCut != 0 {
		return nil, notInVersion(TypeTaskRegistered, 1, "prompt", "no prompt")
	}
	return &taskRegisteredV1{Task: t.Task, Source: t.Source, Kind: t.Kind, Tier: t.Tier, Gates: t.Gates}, nil
}
