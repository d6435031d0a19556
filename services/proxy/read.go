package proxy

import (
	"bytes"
	"slices"

	json "github.com/segmentio/encoding/json"
)

// This file reads the OpenAI-compatible answers of every engine: ids,
// log-probs, usage, text and tool calls, wherever each engine puts them,
// and takes out what the proxy asked for and the client did not.

// finishOf maps an OpenAI finish reason to the catalogue's.
func finishOf(r string) string {
	switch r {
	case "tool_calls", "function_call":
		return "tool_call"
	case "length":
		return "length"
	case "abort":
		return "abort"
	case "":
		return ""
	}
	return "stop"
}

// readUsage takes the usage object of an answer or of a stream's last
// chunk.
func (c *capture) readUsage(o obj) {
	u := o.obj("usage")
	if u == nil {
		if t := o.obj("timings"); t != nil {
			if n, ok := t.int("cache_n"); ok {
				c.cached = n
			}
		}
		return
	}
	if p, ok := u.int("prompt_tokens"); ok {
		c.usagePrompt, c.haveUsage = p, true
	}
	if n, ok := u.int("completion_tokens"); ok {
		c.usageComplete = n
	}
	if d := u.obj("prompt_tokens_details"); d != nil {
		if n, ok := d.int("cached_tokens"); ok {
			c.cached = n
		}
	} else if t := o.obj("timings"); t != nil {
		if n, ok := t.int("cache_n"); ok {
			c.cached = n
		}
	}
}

// readLogprobs takes a choice's log-probs: the chat form (content entries,
// with llama.cpp's `id`) or the completions form (tokens and
// token_logprobs). Ids found in entries are used only when the choice has
// no token_ids of its own.
func (c *capture) readLogprobs(lp obj, idsFromEntries bool) {
	if lp == nil {
		return
	}
	if content := lp.arr("content"); content != nil {
		c.haveLogprobs = true
		for _, raw := range content {
			e := newObj()
			if json.Unmarshal(raw, &e) != nil {
				continue
			}
			c.entries++
			f, _ := e.num("logprob")
			c.logprobs = append(c.logprobs, float32(f))
			if idsFromEntries {
				if id, ok := e.int("id"); ok {
					c.ids = append(c.ids, int32(id))
					c.haveIDs = true
				}
			}
		}
		return
	}
	if tl := lp.arr("token_logprobs"); tl != nil {
		c.haveLogprobs = true
		for _, raw := range tl {
			var f float64
			_ = json.Unmarshal(raw, &f)
			c.entries++
			c.logprobs = append(c.logprobs, float32(f))
		}
	}
}

// logprobEntry is what the proxy reads of a chat log-prob entry; the rest
// (text, bytes, top log-probs) is skipped unread.
type logprobEntry struct {
	ID      json.RawMessage `json:"id"`
	Logprob json.RawMessage `json:"logprob"`
}

// readEntries is readLogprobs for a choice's logprobs member whose content
// is an array of entry objects, read in one pass as structs: most of an
// answer's bytes are these entries, and reading them member by member
// (the logprobs object, then its content, then each entry as a map)
// passed over them three times. It reports false, having read nothing,
// for any other shape, which readLogprobs then reads as it always did.
func (c *capture) readEntries(raw json.RawMessage, idsFromEntries bool) bool {
	var lp struct {
		Content []logprobEntry `json:"content"`
	}
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	rest, err := json.Parse(raw, &lp, json.DontMatchCaseInsensitiveStructFields)
	if err != nil || len(bytes.TrimSpace(rest)) > 0 || lp.Content == nil {
		return false
	}
	c.haveLogprobs = true
	for _, e := range lp.Content {
		c.entries++
		f, _ := rawNum(e.Logprob)
		c.logprobs = append(c.logprobs, float32(f))
		if idsFromEntries {
			if id, ok := rawInt(e.ID); ok {
				c.ids = append(c.ids, int32(id))
				c.haveIDs = true
			}
		}
	}
	return true
}

// readChoice takes one choice of a whole answer or a stream chunk
// (message or delta).
func (c *capture) readChoice(ch obj, kind routeKind) {
	ownIDs := false
	if ch.has("token_ids") {
		if ids, err := parseIDs(ch["token_ids"]); err == nil {
			c.ids = append(c.ids, ids...)
			c.haveIDs, ownIDs = true, true
			c.idsFrom = "engine"
		}
	}
	if ch.has("prompt_token_ids") && c.promptIDs == nil {
		if ids, err := parseIDs(ch["prompt_token_ids"]); err == nil {
			c.promptIDs, c.promptFrom = ids, "engine"
		}
	}
	if !c.readEntries(ch["logprobs"], !ownIDs) {
		c.readLogprobs(ch.obj("logprobs"), !ownIDs)
	}
	if !ownIDs && c.haveIDs {
		c.idsFrom = "engine"
	}
	if r := ch.str("finish_reason"); r != "" {
		c.finish = finishOf(r)
	}
	if kind == routeCompletion {
		c.text.WriteString(ch.str("text"))
		return
	}
	msg := ch.obj("message")
	if msg == nil {
		msg = ch.obj("delta")
	}
	if msg == nil {
		return
	}
	c.text.WriteString(msg.str("content"))
	for i, raw := range msg.arr("tool_calls") {
		tc := newObj()
		if json.Unmarshal(raw, &tc) != nil {
			continue
		}
		idx := i
		if n, ok := tc.int("index"); ok {
			idx = int(n)
		}
		call := c.call(idx)
		if id := tc.str("id"); id != "" {
			call.id = id
		}
		if fn := tc.obj("function"); fn != nil {
			if name := fn.str("name"); name != "" {
				call.name = name
			}
			call.args.WriteString(fn.str("arguments"))
		}
	}
}

// answer is an answer (or stream chunk) as read once: its members, its
// choices, and each choice's members once asked for, so that reading and
// stripping do not parse the same bytes again.
type answer struct {
	o      obj
	raw    []json.RawMessage // each choice's bytes; nil when all were parsed at once
	parsed []obj             // one per choice, nil until choice(i) is first asked for
	failed []bool
}

func newAnswer(o obj) *answer {
	// Most answers' choices are all objects: their members are read in the
	// same pass that finds them. Any other shape is read choice by choice.
	var parsed []obj
	if o.has("choices") && json.Unmarshal(o["choices"], &parsed) == nil && !slices.ContainsFunc(parsed, func(ch obj) bool { return ch == nil }) {
		return &answer{o: o, parsed: parsed, failed: make([]bool, len(parsed))}
	}
	chs := o.arr("choices")
	return &answer{o: o, raw: chs, parsed: make([]obj, len(chs)), failed: make([]bool, len(chs))}
}

// choice is choice i's members (nil for a null choice), or false when it
// is neither an object nor null. Callers that change it own the change:
// strip is the last to read an answer.
func (a *answer) choice(i int) (obj, bool) {
	if a.parsed[i] == nil && !a.failed[i] {
		ch := newObj()
		if json.Unmarshal(a.raw[i], &ch) != nil {
			a.failed[i] = true
		} else {
			a.parsed[i] = ch
		}
	}
	return a.parsed[i], !a.failed[i]
}

// choices is how many choices the answer has.
func (a *answer) choices() int { return len(a.parsed) }

// choiceBytes is choice i as it is now: its bytes as received when it was
// read alone and not parsed (or failed to), else its members written out.
func (a *answer) choiceBytes(i int) json.RawMessage {
	if a.raw != nil && (a.parsed[i] == nil || a.failed[i]) {
		return a.raw[i]
	}
	return a.parsed[i].bytes()
}

// readAnswer takes a whole OpenAI-compatible answer.
func (c *capture) readAnswer(ans *answer, kind routeKind) {
	o := ans.o
	if o.has("prompt_token_ids") {
		if ids, err := parseIDs(o["prompt_token_ids"]); err == nil {
			c.promptIDs, c.promptFrom = ids, "engine"
		}
	}
	c.readUsage(o)
	if ans.choices() > 0 {
		if ch, ok := ans.choice(0); ok {
			c.readChoice(ch, kind)
		}
	}
}

// strip takes out of an answer (or chunk) what the proxy added. It
// returns the bytes to send on, the original ones when nothing changed.
func strip(raw []byte, ans *answer, a asked, stream bool) ([]byte, bool) {
	o := ans.o
	changed := false
	if !a.tokenIDs && o.has("prompt_token_ids") {
		delete(o, "prompt_token_ids")
		changed = true
	}
	if stream && !a.usage && ans.choices() == 0 && o.has("usage") {
		return nil, true // the usage-only chunk the client did not ask for
	}
	if ans.choices() > 0 && (!a.logprobs || !a.tokenIDs) {
		out := make([]json.RawMessage, ans.choices())
		for i := range ans.choices() {
			ch, ok := ans.choice(i)
			if !ok {
				out[i] = ans.choiceBytes(i)
				continue
			}
			chg := false
			if !a.logprobs && ch.has("logprobs") {
				ch["logprobs"] = json.RawMessage("null")
				chg = true
			}
			if !a.tokenIDs {
				for _, k := range []string{"token_ids", "prompt_token_ids"} {
					if _, ok := ch[k]; ok {
						delete(ch, k)
						chg = true
					}
				}
			}
			if chg {
				changed = true
			}
			out[i] = ans.choiceBytes(i)
		}
		if changed {
			o.set("choices", out)
		}
	}
	if !changed {
		return raw, false
	}
	return o.bytes(), true
}

// isDone reports whether an SSE data payload is the stream's terminator.
func isDone(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) }
