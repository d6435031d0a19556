package dataset

import "encoding/json"

// Chat messages (OpenAI's chat-completions shape), one JSON line per
// attempt:
//
//	{"messages":[{"role":"user","content":<task prompt>},
//	             {"role":"assistant","content":<turn text>,"tool_calls":[{"id","type":"function","function":{"name","arguments"}}]},
//	             {"role":"tool","tool_call_id":…,"content":<output>}, …],
//	 "reward":<reward or null>, "metadata":{run, task, group, attempt, purpose, outcome, passed, batch_seq, score, …, ledger_head}}
//
// The user message carries the task's prompt ("" when the task was
// registered without one, as version 1 facts are); each turn is an
// assistant message, its tool calls, by call index, each followed by its
// result; a function's arguments are the JSON string {"input": <input>}.
// reward is the batch's (rule 4) for an attempt a batch trained on, else
// null; passed says what the verifier said.
//
// Text a fact carried cut to fit (docs/design.md §4.3: a prompt, a turn's
// text, a tool's input or output past MaxTextBytes) is marked where it is
// cut: the message whose content was cut has content_cut, the bytes left
// out of its end, and a tool call whose input was cut has input_cut. Both
// are left out when nothing was cut. Trainers that refuse keys they do not
// know drop them (docs/analysts.md, "Chat messages").

type chatLine struct {
	Messages []chatMessage `json:"messages"`
	Reward   *float64      `json:"reward"`
	Metadata outcome       `json:"metadata"`
}

type chatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []chatCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// ContentCut counts the bytes of the content left out of its end.
	ContentCut int64 `json:"content_cut,omitempty"`
}

type chatCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
	// InputCut counts the bytes of the input left out of its end.
	InputCut int64 `json:"input_cut,omitempty"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// WriteMessages writes runs' attempts as chat messages JSONL to path.
func WriteMessages(path string, runs []*Run) (File, error) {
	return writeJSONL(path, "messages", runs, func(r *Run, a *Attempt) (any, error) { return messagesOf(r, a), nil })
}

func messagesOf(r *Run, a *Attempt) chatLine {
	prompt, promptCut := r.Prompt(a.Task)
	l := chatLine{Messages: []chatMessage{{Role: "user", Content: prompt, ContentCut: promptCut}}, Metadata: outcomeOf(r, a)}
	l.Reward = l.Metadata.Reward
	calls := callsByTurn(a)
	for _, t := range a.turns {
		m := chatMessage{Role: "assistant", Content: r.TextOf(t), ContentCut: t.TextCut}
		for _, c := range calls[t.Turn] {
			args, _ := json.Marshal(map[string]string{"input": r.InputOf(c)})
			m.ToolCalls = append(m.ToolCalls, chatCall{ID: callID(c), Type: "function", Function: chatFunction{Name: c.Tool, Arguments: string(args)}, InputCut: c.InputCut})
		}
		l.Messages = append(l.Messages, m)
		for _, c := range calls[t.Turn] {
			l.Messages = append(l.Messages, chatMessage{Role: "tool", ToolCallID: callID(c), Content: r.OutputOf(c), ContentCut: c.OutputCut})
		}
	}
	return l
}
