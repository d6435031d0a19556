package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	json "github.com/segmentio/encoding/json"
)

// The engines the proxy speaks to.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineLlamaCPP = "llamacpp"
)

// prepare edits a recorded request for the upstream: it asks the engine
// for what the turn needs (ids, log-probs, usage) and notes what the
// client asked for itself. It refuses what one turn cannot record.
func prepare(engine string, ex *exchange) error {
	o := ex.req
	if n, ok := o.int("n"); ok && n > 1 {
		return badRequest("n_unsupported", "n=%d: a request of an attempt records one turn; send n=1 (one attempt per sample)", n)
	}
	if o.has("best_of") {
		if n, ok := o.int("best_of"); ok && n > 1 {
			return badRequest("n_unsupported", "best_of=%d: a request of an attempt records one turn", n)
		}
	}
	ex.stream = o.bool("stream")
	ex.sampling = samplingOf(o)
	switch ex.kind {
	case routeChat, routeCompletion:
		if ex.kind == routeChat {
			if !o.has("messages") {
				return badRequest("bad_request", "a chat completion needs messages")
			}
			ex.asked.logprobs = o.bool("logprobs")
			switch {
			case engine == EngineLlamaCPP && ex.stream && o.has("tools"):
				// llama.cpp refuses log-probs on a streamed request with
				// tools (400): such a turn is recorded without ids, tagged.
			case !ex.asked.logprobs && engine == EngineLlamaCPP:
				// llama.cpp returns no log-probs at all for top_logprobs 0.
				o.set("logprobs", true)
				o.set("top_logprobs", 1)
			case !ex.asked.logprobs:
				o.set("logprobs", true)
				o.set("top_logprobs", 0)
			case engine == EngineLlamaCPP:
				if n, ok := o.int("top_logprobs"); !ok || n == 0 {
					o.set("top_logprobs", 1)
				}
			}
		} else {
			if !o.has("prompt") {
				return badRequest("bad_request", "a completion needs a prompt")
			}
			ids, isIDs, err := promptTokenIDs(o["prompt"])
			if err != nil {
				return badRequest("bad_prompt", "prompt: %v", err)
			}
			if isIDs {
				ex.clientIDs = ids
			}
			ex.asked.logprobs = o.has("logprobs")
			n, _ := o.int("logprobs")
			switch {
			case engine == EngineLlamaCPP && n == 0:
				// llama.cpp takes logprobs as n_probs: 0 returns none.
				o.set("logprobs", 1)
			case !ex.asked.logprobs:
				o.set("logprobs", 0)
			}
		}
		if ex.stream {
			so := o.obj("stream_options")
			if so == nil {
				so = obj{}
			}
			ex.asked.usage = so.bool("include_usage")
			so.set("include_usage", true)
			o.set("stream_options", so)
		}
		if engine == EngineVLLM {
			ex.asked.tokenIDs = o.bool("return_token_ids")
			o.set("return_token_ids", true)
		} else {
			ex.asked.tokenIDs = true // nothing to take out
		}
	case routeLlamaNative:
		if !o.has("prompt") {
			return badRequest("bad_request", "a /completion request needs a prompt")
		}
		ids, isIDs, err := promptTokenIDs(o["prompt"])
		if err != nil {
			return badRequest("bad_prompt", "prompt: %v", err)
		}
		if isIDs {
			ex.clientIDs = ids
		}
		ex.asked.tokens = o.bool("return_tokens")
		o.set("return_tokens", true)
		if n, ok := o.int("n_probs"); ok && n > 0 {
			ex.asked.probs = true
		} else {
			o.set("n_probs", 1)
		}
	case routeSGLangNative:
		sp := o.obj("sampling_params")
		if sp != nil {
			ex.sampling = samplingOf(sp)
		}
		if o.has("input_ids") {
			ids, isIDs, err := promptTokenIDs(o["input_ids"])
			if err != nil || !isIDs {
				return badRequest("bad_prompt", "input_ids: want one list of token ids")
			}
			ex.clientIDs = ids
		} else if !o.has("text") {
			return badRequest("bad_request", "a /generate request needs text or input_ids")
		}
		ex.asked.logprob = o.bool("return_logprob")
		o.set("return_logprob", true)
	case routeVLLMNative:
		sp := o.obj("sampling_params")
		if sp != nil {
			ex.sampling = samplingOf(sp)
		}
		ids, isIDs, err := promptTokenIDs(o["token_ids"])
		if err != nil || !isIDs {
			return badRequest("bad_prompt", "token_ids: want one list of token ids (this route is token-in)")
		}
		ex.clientIDs = ids
		if sp == nil {
			sp = obj{}
		}
		if !sp.has("logprobs") {
			sp.set("logprobs", 0)
		} else {
			ex.asked.logprobs = true
		}
		o.set("sampling_params", sp)
	}
	return nil
}

// upstreamJSON posts a JSON body to an engine route and decodes the answer.
func upstreamJSON(ctx context.Context, c *http.Client, base, path string, body any, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", path, resp.Status, clip(string(ans)))
	}
	return json.Unmarshal(ans, out)
}

// promptIDs asks the engine for the ids of a request's prompt when its
// answer will not carry them: llama.cpp renders a chat with its own
// template (/apply-template) and tokenizes the text as its chat route does
// (/tokenize with special tokens added and parsed); a text prompt is
// tokenized alone. The proxy never tokenizes in Go.
func promptIDs(ctx context.Context, c *http.Client, engine, base string, ex *exchange) ([]int32, error) {
	var text string
	switch ex.kind {
	case routeChat:
		if engine != EngineLlamaCPP {
			return nil, fmt.Errorf("%s gives a chat prompt's ids only in its answer", engine)
		}
		tmpl := map[string]json.RawMessage{}
		for _, k := range []string{"messages", "tools", "tool_choice", "chat_template_kwargs", "add_generation_prompt", "reasoning_format", "parallel_tool_calls", "response_format"} {
			if v, ok := ex.req[k]; ok {
				tmpl[k] = v
			}
		}
		var out struct {
			Prompt *string `json:"prompt"`
		}
		if err := upstreamJSON(ctx, c, base, "/apply-template", tmpl, &out); err != nil {
			return nil, err
		}
		if out.Prompt == nil {
			return nil, fmt.Errorf("/apply-template answered no prompt")
		}
		text = *out.Prompt
	case routeCompletion, routeLlamaNative:
		if err := json.Unmarshal(ex.req["prompt"], &text); err != nil {
			var texts []string
			if json.Unmarshal(ex.req["prompt"], &texts) != nil || len(texts) != 1 {
				return nil, fmt.Errorf("the prompt is neither text nor token ids")
			}
			text = texts[0]
		}
		if engine != EngineLlamaCPP {
			return nil, fmt.Errorf("%s gives a text prompt's ids only in its answer", engine)
		}
	case routeSGLangNative:
		return nil, fmt.Errorf("sglang: a text prompt's ids come in its answer only with input_ids; send input_ids")
	default:
		return nil, fmt.Errorf("no prompt ids for %s", ex.kind)
	}
	var tok struct {
		Tokens []int64 `json:"tokens"`
	}
	if err := upstreamJSON(ctx, c, base, "/tokenize", map[string]any{"content": text, "add_special": true, "parse_special": true}, &tok); err != nil {
		return nil, err
	}
	ids := make([]int32, len(tok.Tokens))
	for i, t := range tok.Tokens {
		ids[i] = int32(t)
	}
	return ids, nil
}
