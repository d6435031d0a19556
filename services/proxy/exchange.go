package proxy

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// routeKind is what a request asks of the engine.
type routeKind int

const (
	routeChat         routeKind = iota // POST /v1/chat/completions
	routeCompletion                    // POST /v1/completions
	routeLlamaNative                   // POST /completion (llama.cpp)
	routeSGLangNative                  // POST /generate (SGLang)
	routeVLLMNative                    // POST /inference/v1/generate (vLLM)
)

func (k routeKind) String() string {
	return [...]string{"chat", "completions", "llamacpp_completion", "sglang_generate", "vllm_generate"}[k]
}

// obj is a JSON object whose members keep their raw bytes, so a request
// or answer is changed only where the proxy means to.
type obj map[string]json.RawMessage

func parseObj(b []byte) (obj, error) {
	o := newObj()
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, err
	}
	if o == nil {
		return nil, fmt.Errorf("the body is null, not an object")
	}
	return o, nil
}

// newObj is an empty object to decode into. The decoder makes a map of 64
// slots for a nil one, and clearing those is most of the cost of reading a
// small object: one of 8 grows as needed instead.
func newObj() obj { return make(obj, 8) }

func (o obj) set(k string, v any) {
	raw, _ := json.Append(nil, v, marshalFlags)
	o[k] = raw
}

// marshalFlags are json.Marshal's, less two of its checks: raw members
// are copied as they are (each was checked when it was parsed, or made by
// Marshal, so checking again only spent a pass over an answer's bytes),
// and HTML characters are not escaped, in raw members or in new strings:
// Marshal wrote the engine's `<` as `\u003c`, and the client is owed the
// engine's bytes wherever the proxy did not change them.
const marshalFlags = json.SortMapKeys | json.TrustRawMessage

func (o obj) has(k string) bool {
	v, ok := o[k]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (o obj) bool(k string) bool {
	var b bool
	_ = json.Unmarshal(o[k], &b)
	return b
}

func (o obj) str(k string) string {
	var s string
	_ = json.Unmarshal(o[k], &s)
	return s
}

func (o obj) obj(k string) obj {
	if !o.has(k) {
		return nil
	}
	x := newObj()
	if json.Unmarshal(o[k], &x) != nil {
		return nil
	}
	return x
}

func (o obj) arr(k string) []json.RawMessage {
	var x []json.RawMessage
	if o.has(k) {
		_ = json.Unmarshal(o[k], &x)
	}
	return x
}

// num reads a number member; ok is false when it is absent or no number.
func (o obj) num(k string) (float64, bool) { return rawNum(o[k]) }

func (o obj) int(k string) (int64, bool) { return rawInt(o[k]) }

// rawNum reads a member's value as a number; ok is false when it is
// absent (nil), null or no finite number.
func rawNum(v json.RawMessage) (float64, bool) {
	if len(v) == 0 || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return 0, false
	}
	if c := v[0]; c == '-' || '0' <= c && c <= '9' {
		// A number as parsed (a log-prob entry has one or two): its
		// syntax was checked then, and JSON's is a subset of ParseFloat's.
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return 0, false
		}
		return f, true
	}
	var f float64
	if json.Unmarshal(v, &f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// rawInt is rawNum for whole numbers.
func rawInt(v json.RawMessage) (int64, bool) {
	f, ok := rawNum(v)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

func (o obj) bytes() []byte {
	b, _ := json.Append(nil, map[string]json.RawMessage(o), marshalFlags)
	return b
}

// asked is what the client asked for itself, so that what the proxy added
// to the upstream request is taken out of the answer again.
type asked struct {
	logprobs bool // log-probs of any kind
	tokenIDs bool // vLLM return_token_ids
	usage    bool // stream_options.include_usage
	tokens   bool // llama.cpp return_tokens
	probs    bool // llama.cpp n_probs > 0
	logprob  bool // SGLang return_logprob
}

// exchange is one recorded request and what the engine answered.
type exchange struct {
	kind   routeKind
	id     identity
	req    obj
	asked  asked
	stream bool
	// promptIDs is the prompt as ids when the client gave them (token-in).
	clientIDs []int32
	sampling  *events.Sampling
	// body and answer are the request and the engine's answer as they
	// came, kept only for a held turn (held.go).
	body, answer []byte
	// what the answer said
	cap capture
}

func newExchange(kind routeKind, id identity, req obj) *exchange {
	ex := &exchange{kind: kind, id: id, req: req}
	ex.cap.lastVersion = -1
	return ex
}

// capture is what the engine's answer says about the turn.
type capture struct {
	promptIDs     []int32
	promptFrom    string
	ids           []int32
	logprobs      []float32
	idsFrom       string
	haveIDs       bool // the answer carried completion ids (possibly none)
	haveLogprobs  bool
	usagePrompt   int64
	usageComplete int64
	haveUsage     bool
	cached        int64
	text          strings.Builder
	finish        string
	toolCalls     []*toolCall
	tags          []string
	engineVersion []events.VersionSegment // versions the engine reported, per span
	lastVersion   int64                   // the engine's version of the last token, -1 unknown
	// logprob entries seen in a stream, and ids seen, for the length check
	entries int
	latency time.Duration
}

// toolCall is one tool call of an assistant message, assembled from
// stream deltas by index.
type toolCall struct {
	index int
	id    string
	name  string
	args  strings.Builder
}

func (c *capture) tag(t string) {
	for _, x := range c.tags {
		if x == t {
			return
		}
	}
	c.tags = append(c.tags, t)
}

func (c *capture) call(index int) *toolCall {
	for _, tc := range c.toolCalls {
		if tc.index == index {
			return tc
		}
	}
	tc := &toolCall{index: index}
	c.toolCalls = append(c.toolCalls, tc)
	return tc
}

// parseIDs reads a JSON array of token ids.
func parseIDs(raw json.RawMessage) ([]int32, error) {
	var xs []int64
	if err := json.Unmarshal(raw, &xs); err != nil {
		return nil, err
	}
	out := make([]int32, len(xs))
	for i, x := range xs {
		if x < 0 || x > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d at index %d is out of range", x, i)
		}
		out[i] = int32(x)
	}
	return out, nil
}

// promptTokenIDs reads a token-in prompt: an array of ids. A string (or
// anything else) is not one.
func promptTokenIDs(raw json.RawMessage) ([]int32, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false, nil
	}
	var first []json.RawMessage
	if err := json.Unmarshal(raw, &first); err != nil {
		return nil, false, err
	}
	if len(first) > 0 && bytes.HasPrefix(bytes.TrimSpace(first[0]), []byte("[")) {
		if len(first) != 1 {
			return nil, false, fmt.Errorf("%d prompts in one request: an attempt's request is one prompt", len(first))
		}
		raw = first[0]
	} else if len(first) > 0 && bytes.HasPrefix(bytes.TrimSpace(first[0]), []byte(`"`)) {
		if len(first) != 1 {
			return nil, false, fmt.Errorf("%d prompts in one request: an attempt's request is one prompt", len(first))
		}
		return nil, false, nil
	}
	ids, err := parseIDs(raw)
	return ids, err == nil, err
}

// samplingOf reads the effective sampling parameters a request names,
// under the names the engines use.
func samplingOf(o obj) *events.Sampling {
	s := &events.Sampling{}
	any := false
	f := func(dst **float64, keys ...string) {
		for _, k := range keys {
			if v, ok := o.num(k); ok {
				*dst, any = &v, true
				return
			}
		}
	}
	i := func(dst **int64, keys ...string) {
		for _, k := range keys {
			if v, ok := o.int(k); ok {
				*dst, any = &v, true
				return
			}
		}
	}
	f(&s.Temperature, "temperature")
	f(&s.TopP, "top_p")
	i(&s.TopK, "top_k")
	if s.TopK != nil && *s.TopK < 0 {
		s.TopK = nil // an engine's "disabled"
	}
	if s.Temperature != nil && *s.Temperature < 0 {
		s.Temperature = nil
	}
	f(&s.MinP, "min_p")
	i(&s.MaxTokens, "max_completion_tokens", "max_tokens", "max_new_tokens", "n_predict")
	i(&s.Seed, "seed")
	f(&s.PresencePenalty, "presence_penalty")
	f(&s.FrequencyPenalty, "frequency_penalty")
	f(&s.RepetitionPenalty, "repetition_penalty", "repeat_penalty")
	if !any {
		return nil
	}
	return s
}
