package dataset

// ATIF is the Agent Trajectory Interchange Format of the Harbor project
// (its RFC 0001, "trajectory format"), version ATIFVersion: one trajectory
// per attempt, one JSON line each.
//
//   - session_id is "<run>/<attempt>"; agent.name is the run's harness,
//     agent.model_name its model; agent.version is required by the format
//     and unknown to the ledger: "unrecorded".
//   - step 1 has source "user" and the task's prompt ("" when the task was
//     registered without one); then one step with source "agent" per turn,
//     by turn index: message the turn's text, tool_calls its calls
//     (tool_call_id as in the chat export, arguments {"input": …}),
//     observation their outputs, metrics prompt, completion and cached
//     tokens, completion_token_ids and logprobs where the turn carried
//     them (v1.3). The ledger does not keep a turn's whole prompt, so
//     prompt_token_ids (v1.4) is left out; the observation tokens
//     appended before the turn are in metrics.extra.observation_token_ids.
//     step extra holds the turn's policy-version segments, its staleness
//     and whether it trained in its batch, finish and latency.
//   - text cut to fit a fact (docs/design.md §4.3) is marked on its step,
//     in extra, by the bytes left out of its end: prompt_cut on step 1,
//     text_cut on a turn's step, and tool_cuts, one {tool_call_id,
//     input_cut, output_cut} per call of the turn whose input or output
//     was cut (an observation result has no extra of its own). None is
//     written when nothing was cut.
//   - final_metrics totals the tokens; its extra, and the root's, carry
//     the reward, score, advantage, pass, batch and outcome (the format
//     has no reward field of its own) and the ledger head.
const ATIFVersion = "ATIF-v1.4"

type atifTrajectory struct {
	SchemaVersion string         `json:"schema_version"`
	SessionID     string         `json:"session_id"`
	Agent         atifAgent      `json:"agent"`
	Steps         []atifStep     `json:"steps"`
	Notes         string         `json:"notes,omitempty"`
	FinalMetrics  atifFinal      `json:"final_metrics"`
	Extra         map[string]any `json:"extra"`
}

type atifAgent struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	ModelName string `json:"model_name,omitempty"`
}

type atifStep struct {
	StepID      int              `json:"step_id"`
	Source      string           `json:"source"`
	Message     string           `json:"message"`
	ToolCalls   []atifToolCall   `json:"tool_calls,omitempty"`
	Observation *atifObservation `json:"observation,omitempty"`
	Metrics     *atifMetrics     `json:"metrics,omitempty"`
	Extra       map[string]any   `json:"extra,omitempty"`
}

type atifToolCall struct {
	ToolCallID   string            `json:"tool_call_id"`
	FunctionName string            `json:"function_name"`
	Arguments    map[string]string `json:"arguments"`
}

// atifToolCut marks a tool call whose input or output was cut.
type atifToolCut struct {
	ToolCallID string `json:"tool_call_id"`
	InputCut   int64  `json:"input_cut"`
	OutputCut  int64  `json:"output_cut"`
}

type atifObservation struct {
	Results []atifResult `json:"results"`
}

type atifResult struct {
	SourceCallID string `json:"source_call_id"`
	Content      string `json:"content"`
}

type atifMetrics struct {
	PromptTokens       int64          `json:"prompt_tokens"`
	CompletionTokens   int64          `json:"completion_tokens"`
	CachedTokens       int64          `json:"cached_tokens"`
	CompletionTokenIDs []int32        `json:"completion_token_ids,omitempty"`
	Logprobs           []float32      `json:"logprobs,omitempty"`
	Extra              map[string]any `json:"extra,omitempty"`
}

type atifFinal struct {
	TotalPromptTokens     int64   `json:"total_prompt_tokens"`
	TotalCompletionTokens int64   `json:"total_completion_tokens"`
	TotalCachedTokens     int64   `json:"total_cached_tokens"`
	TotalSteps            int     `json:"total_steps"`
	Extra                 outcome `json:"extra"`
}

// WriteATIF writes runs' attempts as ATIF trajectories, one per line, to
// path.
func WriteATIF(path string, runs []*Run) (File, error) {
	return writeJSONL(path, "atif", runs, func(r *Run, a *Attempt) (any, error) { return trajectoryOf(r, a) })
}

func trajectoryOf(r *Run, a *Attempt) (atifTrajectory, error) {
	prompt, promptCut := r.Prompt(a.Task)
	o := outcomeOf(r, a)
	tr := atifTrajectory{SchemaVersion: ATIFVersion, SessionID: r.Run + "/" + a.Attempt,
		Agent: atifAgent{Name: orUnknown(r.Harness), Version: "unrecorded", ModelName: r.Model},
		Steps: []atifStep{{StepID: 1, Source: "user", Message: prompt}},
		Notes: "exported by rolloutledger from the ledger's facts; reward and outcome in final_metrics.extra",
		Extra: map[string]any{"run": r.Run, "task": a.Task, "group": a.Group, "attempt": a.Attempt, "purpose": a.Purpose,
			"reward": o.Reward, "ledger_head": o.LedgerHead}}
	if promptCut > 0 {
		tr.Steps[0].Extra = map[string]any{"prompt_cut": promptCut}
	}
	calls := callsByTurn(a)
	for _, t := range a.turns {
		obs, ids, lps, err := r.TokensOf(t)
		if err != nil {
			return tr, err
		}
		s := atifStep{StepID: len(tr.Steps) + 1, Source: "agent", Message: r.TextOf(t),
			Metrics: &atifMetrics{PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens, CachedTokens: t.Cached,
				CompletionTokenIDs: ids, Logprobs: lps},
			Extra: map[string]any{"turn": t.Turn, "segment_starts": t.SegmentStarts, "segment_versions": t.SegmentVersions,
				"finish": t.Finish, "latency_ms": t.LatencyMS}}
		if len(obs) > 0 {
			s.Metrics.Extra = map[string]any{"observation_token_ids": obs}
		}
		if t.Batch > 0 {
			s.Extra["batch_seq"], s.Extra["staleness"], s.Extra["trained"] = t.Batch, t.Staleness, t.Trained
		}
		if t.TextCut > 0 {
			s.Extra["text_cut"] = t.TextCut
		}
		for _, c := range calls[t.Turn] {
			s.ToolCalls = append(s.ToolCalls, atifToolCall{ToolCallID: callID(c), FunctionName: c.Tool, Arguments: map[string]string{"input": r.InputOf(c)}})
			if s.Observation == nil {
				s.Observation = &atifObservation{}
			}
			s.Observation.Results = append(s.Observation.Results, atifResult{SourceCallID: callID(c), Content: r.OutputOf(c)})
			if c.InputCut > 0 || c.OutputCut > 0 {
				cuts, _ := s.Extra["tool_cuts"].([]atifToolCut)
				s.Extra["tool_cuts"] = append(cuts, atifToolCut{ToolCallID: callID(c), InputCut: c.InputCut, OutputCut: c.OutputCut})
			}
		}
		tr.Steps = append(tr.Steps, s)
		tr.FinalMetrics.TotalPromptTokens += t.PromptTokens
		tr.FinalMetrics.TotalCompletionTokens += t.CompletionTokens
		tr.FinalMetrics.TotalCachedTokens += t.Cached
	}
	tr.FinalMetrics.TotalSteps = len(tr.Steps)
	tr.FinalMetrics.Extra = o
	return tr, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
