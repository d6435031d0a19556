package proxy

import (
	"context"
	"fmt"

	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// maxContinuations bounds how often one turn is continued after aborts.
const maxContinuations = 3

// continueAborted continues, token-in, an SGLang /generate answer that a
// weight update aborted (SGLang aborts every request in flight by
// default): the prompt's ids and the partial output go back as input_ids
// with the tokens left to generate, and the answers are joined, so the
// harness sees one answer and the turn has a version segment per part,
// tagged continued. It returns the joined answer for the client, or the
// first one unchanged when it cannot continue (a text prompt, whose ids the
// proxy does not have).
func (s *Server) continueAborted(ctx context.Context, ex *exchange, up string, first obj) (obj, error) {
	c := &ex.cap
	if ex.kind != routeSGLangNative || c.finish != "abort" || ex.clientIDs == nil || !c.haveIDs {
		return first, nil
	}
	answer := first
	parts := []partVersions{{start: 0, segs: c.engineVersion, last: c.lastVersion}}
	for range maxContinuations {
		if c.finish != "abort" {
			break
		}
		req := obj{}
		for k, v := range ex.req {
			req[k] = v
		}
		input := make([]int32, 0, len(ex.clientIDs)+len(c.ids))
		input = append(append(input, ex.clientIDs...), c.ids...)
		req.set("input_ids", input)
		delete(req, "text")
		req.set("stream", false)
		req.set("return_logprob", true)
		sp := req.obj("sampling_params")
		if sp == nil {
			sp = obj{}
		}
		if n, ok := sp.int("max_new_tokens"); ok {
			left := n - int64(len(c.ids))
			if left <= 0 {
				break
			}
			sp.set("max_new_tokens", left)
		}
		req.set("sampling_params", sp)
		var next obj
		if err := upstreamJSON(ctx, s.o.Client, up, "/generate", map[string]json.RawMessage(req), &next); err != nil {
			return nil, fmt.Errorf("continuing an aborted turn: %w", err)
		}
		var c2 capture
		c2.lastVersion = -1
		c2.readSGLangNative(next, true)
		if !c2.haveIDs {
			break
		}
		parts = append(parts, partVersions{start: int64(len(c.ids)), segs: c2.engineVersion, last: c2.lastVersion})
		c.ids = append(c.ids, c2.ids...)
		c.logprobs = append(c.logprobs, c2.logprobs...)
		c.entries += c2.entries
		c.text.WriteString(c2.text.String())
		c.usageComplete += c2.usageComplete
		c.finish = c2.finish
		c.tag("continued")
		answer = joinSGLang(answer, next, c)
	}
	if len(parts) > 1 {
		c.engineVersion, c.lastVersion = joinParts(parts), -1
	}
	return answer, nil
}

type partVersions struct {
	start int64
	segs  []events.VersionSegment
	last  int64
}

// joinParts makes one turn's segments from its parts', offset to where
// each part began; versions only move forward, so a part generated under
// the version the previous one ended with continues its segment.
func joinParts(parts []partVersions) []events.VersionSegment {
	var out []events.VersionSegment
	add := func(start, v int64, known string) {
		if n := len(out); n > 0 && out[n-1].PolicyVersion >= v {
			return
		}
		out = append(out, events.VersionSegment{Start: start, PolicyVersion: v, Known: known})
	}
	for _, p := range parts {
		switch {
		case len(p.segs) > 0:
			for _, sg := range p.segs {
				add(p.start+sg.Start, sg.PolicyVersion, events.KnownEngine)
			}
		case p.last >= 0:
			add(p.start, p.last, events.KnownEngine)
		}
	}
	if len(out) > 0 {
		out[0].Start = 0
	}
	return out
}

// joinSGLang is the answer the client gets for a continued turn: the text
// and ids of every part, the last part's meta_info with the counts and
// log-probs of all.
func joinSGLang(prev, next obj, c *capture) obj {
	out := obj{}
	for k, v := range next {
		out[k] = v
	}
	out.set("text", c.text.String())
	if prev.has("output_ids") || next.has("output_ids") {
		out.set("output_ids", c.ids)
	}
	mi := next.obj("meta_info")
	if mi == nil {
		mi = obj{}
	}
	mi.set("completion_tokens", c.usageComplete)
	lps := make([][3]any, len(c.ids))
	for i, id := range c.ids {
		var lp float32
		if i < len(c.logprobs) {
			lp = c.logprobs[i]
		}
		lps[i] = [3]any{lp, id, nil}
	}
	mi.set("output_token_logprobs", lps)
	if pm := prev.obj("meta_info"); pm != nil {
		for _, k := range []string{"prompt_tokens", "cached_tokens", "id"} {
			if v, ok := pm[k]; ok {
				mi[k] = v
			}
		}
	}
	out.set("meta_info", mi)
	return out
}
