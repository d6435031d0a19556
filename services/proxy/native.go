package proxy

import (
	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// This file reads the engines' native token-in answers.

// readLlamaNative takes a llama.cpp /completion answer, or one chunk of
// its stream: `tokens` are the generated ids (asked with return_tokens),
// `completion_probabilities` one entry per token with its `logprob`.
func (c *capture) readLlamaNative(o obj) {
	c.idsFrom = "native"
	if o.has("tokens") {
		if ids, err := parseIDs(o["tokens"]); err == nil {
			c.ids = append(c.ids, ids...)
			c.haveIDs = true
		}
	}
	if o.has("completion_probabilities") {
		c.haveLogprobs = true
		for _, raw := range o.arr("completion_probabilities") {
			e := newObj()
			if json.Unmarshal(raw, &e) != nil {
				continue
			}
			c.entries++
			f, _ := e.num("logprob")
			c.logprobs = append(c.logprobs, float32(f))
		}
	}
	c.text.WriteString(o.str("content"))
	if n, ok := o.int("tokens_evaluated"); ok {
		c.usagePrompt, c.haveUsage = n, true
	}
	if n, ok := o.int("tokens_predicted"); ok {
		c.usageComplete = n
	}
	if n, ok := o.int("tokens_cached"); ok {
		c.cached = n
	}
	if o.bool("stop") || o.has("stop_type") {
		switch o.str("stop_type") {
		case "limit":
			c.finish = "length"
		case "eos", "word":
			c.finish = "stop"
		case "":
			if o.bool("stopped_limit") {
				c.finish = "length"
			} else if o.bool("stop") {
				c.finish = "stop"
			}
		default:
			c.finish = "stop"
		}
	}
}

// stripLlamaNative takes out the ids and probabilities the client did not
// ask for.
func stripLlamaNative(raw []byte, o obj, a asked) []byte {
	changed := false
	if !a.tokens && o.has("tokens") {
		delete(o, "tokens")
		changed = true
	}
	if !a.probs && o.has("completion_probabilities") {
		delete(o, "completion_probabilities")
		changed = true
	}
	if !changed {
		return raw
	}
	return o.bytes()
}

// readSGLangNative takes an SGLang /generate answer (or stream chunk):
// meta_info.output_token_logprobs holds [logprob, id, text] per token,
// meta_info.weight_version the version of the weights that generated it.
// A stream's chunks carry what was generated so far, or only the new
// tokens when the request asked for incremental output; cumulative says
// which.
func (c *capture) readSGLangNative(o obj, cumulative bool) {
	c.idsFrom = "native"
	mi := o.obj("meta_info")
	if mi == nil {
		return
	}
	if cumulative {
		c.ids, c.logprobs, c.entries = c.ids[:0], c.logprobs[:0], 0
		c.text.Reset()
	}
	c.text.WriteString(o.str("text"))
	if mi.has("output_token_logprobs") {
		c.haveLogprobs, c.haveIDs = true, true
		for _, raw := range mi.arr("output_token_logprobs") {
			var e []json.RawMessage
			if json.Unmarshal(raw, &e) != nil || len(e) < 2 {
				continue
			}
			var lp float64
			var id int64
			_ = json.Unmarshal(e[0], &lp)
			if json.Unmarshal(e[1], &id) != nil {
				continue
			}
			c.entries++
			c.logprobs = append(c.logprobs, float32(lp))
			c.ids = append(c.ids, int32(id))
		}
	}
	if n, ok := mi.int("prompt_tokens"); ok {
		c.usagePrompt, c.haveUsage = n, true
	}
	if n, ok := mi.int("completion_tokens"); ok {
		c.usageComplete = n
	}
	if n, ok := mi.int("cached_tokens"); ok {
		c.cached = n
	}
	if fr := mi.obj("finish_reason"); fr != nil {
		c.finish = finishOf(fr.str("type"))
	}
	c.engineVersion, c.lastVersion = nil, -1
	// weight_versions: spans {version, start, end} over the output tokens;
	// weight_version alone is the version of the last token only.
	for _, raw := range mi.arr("weight_versions") {
		var sp obj
		if json.Unmarshal(raw, &sp) != nil {
			continue
		}
		v, ok := versionOf(sp, "version")
		start, _ := sp.int("start")
		if !ok {
			continue
		}
		if n := len(c.engineVersion); n > 0 && c.engineVersion[n-1].PolicyVersion >= v {
			continue // versions only move forward; a repeat is one segment
		}
		c.engineVersion = append(c.engineVersion, events.VersionSegment{Start: start, PolicyVersion: v, Known: events.KnownEngine})
	}
	if len(c.engineVersion) > 0 {
		c.engineVersion[0].Start = 0
	}
	if v, ok := versionOf(mi, "weight_version"); ok {
		c.lastVersion = v
	}
}

// versionOf reads a weight version given as a number or as text.
func versionOf(o obj, k string) (int64, bool) {
	if v, ok := o.int(k); ok && v >= 0 {
		return v, true
	}
	return parseVersion(o.str(k))
}

// stripSGLangNative takes out the log-probs the client did not ask for.
func stripSGLangNative(raw []byte, o obj, a asked) []byte {
	if a.logprob {
		return raw
	}
	mi := o.obj("meta_info")
	if mi == nil {
		return raw
	}
	changed := false
	for _, k := range []string{"output_token_logprobs", "input_token_logprobs", "output_top_logprobs", "input_top_logprobs"} {
		if _, ok := mi[k]; ok {
			delete(mi, k)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	o.set("meta_info", mi)
	return o.bytes()
}

// parseVersion reads a weight version an engine gives as text ("7", "v7").
func parseVersion(s string) (int64, bool) {
	if len(s) > 0 && (s[0] == 'v' || s[0] == 'V') {
		s = s[1:]
	}
	var v int64
	if s == "" {
		return 0, false
	}
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		v = v*10 + int64(ch-'0')
		if v > 1<<53 {
			return 0, false
		}
	}
	return v, true
}
