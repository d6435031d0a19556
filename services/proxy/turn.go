package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// factNamespace is the UUIDv5 namespace of the proxy's fact ids. It never
// changes: the id of a turn is a pure function of its run, attempt and
// number, so the same turn sent twice (a retry, a spool replayed after a
// crash) is a duplicate the ledger drops, and a different turn under the
// same number (a spool lost) is a conflict the ledger reports.
var factNamespace = uuid.MustParse("3b0f7a52-96c4-5d1e-8a27-c1f4e9d06b83")

func turnID(id identity, turn int) string {
	return uuid.NewSHA1(factNamespace, []byte(id.Run+"\x00"+id.Attempt+"\x00turn.generated\x00"+strconv.Itoa(turn))).String()
}

func toolID(id identity, turn, call int) string {
	return uuid.NewSHA1(factNamespace, []byte(id.Run+"\x00"+id.Attempt+"\x00tool.called\x00"+strconv.Itoa(turn)+"\x00"+strconv.Itoa(call))).String()
}

// cutText keeps at most events.MaxTextBytes of s, cut at a character
// boundary, and says how many bytes were left out. NUL characters, which
// the catalogue refuses in text (a model can generate the byte, a tool can
// print it), are left out and counted too: the text is for people, the
// token ids stay exact.
func cutText(s string) (string, int64) {
	var dropped int64
	if strings.IndexByte(s, 0) >= 0 {
		n := len(s)
		s = strings.ReplaceAll(s, "\x00", "")
		dropped = int64(n - len(s))
	}
	if !utf8.ValidString(s) {
		n := len(s)
		s = strings.ToValidUTF8(s, "")
		dropped += int64(n - len(s))
	}
	if len(s) <= events.MaxTextBytes {
		return s, dropped
	}
	n := events.MaxTextBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], dropped + int64(len(s)-n)
}

// turnFacts is what one recorded turn writes: its turn fact, the tool
// calls of the previous turn that this request answered (or left
// unanswered), and the attempt's next state.
type turnFacts struct {
	turn    *events.TurnGenerated
	tools   []*events.ToolCalled
	state   *attemptState
	seq     []int32
	refused bool
}

// toolOutputs reads the tool messages of a chat request: tool_call_id to
// the output text.
func toolOutputs(req obj) map[string]string {
	out := map[string]string{}
	for _, raw := range req.arr("messages") {
		var m obj
		if json.Unmarshal(raw, &m) != nil || m.str("role") != "tool" {
			continue
		}
		id := m.str("tool_call_id")
		if id == "" {
			continue
		}
		out[id] = contentText(m["content"])
	}
	return out
}

// contentText is a message's content as text: a string, or the text of
// its text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var b bytes.Buffer
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// buildTurn turns an exchange into facts, given the attempt's state and
// last sequence. It never fails: what it cannot verify it tags.
func (s *Server) buildTurn(ex *exchange, st *attemptState, prev []int32, segs []events.VersionSegment, arrived, answered time.Time) *turnFacts {
	c := &ex.cap
	n := st.NextTurn
	t := &events.TurnGenerated{
		Attempt: ex.id.Attempt, Turn: n,
		Sampling:  ex.sampling,
		Engine:    &events.EngineInfo{Name: s.o.Engine, Version: s.engineVersionOf()},
		LatencyMS: c.latency.Milliseconds(),
	}
	if s.o.Engine == EngineLlamaCPP && !ex.req.bool("post_sampling_probs") {
		// llama.cpp's log-probs are the softmax of the model's logits
		// before its sampler chain (temperature, top-k, penalties): what
		// vLLM calls raw_logprobs. vLLM's and SGLang's depend on how the
		// server was started, which the proxy cannot see.
		sp := events.Sampling{}
		if t.Sampling != nil {
			sp = *t.Sampling
		}
		sp.LogprobsMode = "raw_logprobs"
		t.Sampling = &sp
	}
	// Completion: ids, log-probs and usage must agree, or none is kept.
	ids, lps := c.ids, c.logprobs
	completion := c.usageComplete
	if !c.haveUsage && c.usageComplete == 0 {
		completion = int64(len(ids))
	}
	switch {
	case !c.haveIDs && !c.haveLogprobs:
		c.tag("ids_mismatch")
		c.tag("logprobs_missing")
		ids, lps = nil, nil
	case !c.haveLogprobs:
		c.tag("logprobs_missing")
		ids, lps = nil, nil
	case !c.haveIDs || len(ids) != len(lps) || int64(len(ids)) != completion:
		c.tag("ids_mismatch")
		ids, lps = nil, nil
	}
	if slices.ContainsFunc(lps, func(f float32) bool { return f > 0 || f != f }) {
		c.tag("ids_mismatch")
		ids, lps = nil, nil
	}
	t.CompletionTokens = completion
	t.TokenIDs, t.Logprobs = ids, lps
	if ids != nil {
		t.IDsFrom = c.idsFrom
	}
	// Prompt: the engine's ids, checked against its own count.
	prompt := c.promptIDs
	if prompt != nil && c.haveUsage && int64(len(prompt)) != c.usagePrompt {
		s.o.Logger.Warn("proxy: prompt ids disagree with the engine's prompt_tokens; keeping none", "attempt", ex.id.Attempt, "ids", len(prompt), "prompt_tokens", c.usagePrompt, "from", c.promptFrom)
		prompt = nil
	}
	if prompt == nil {
		c.tag("no_prompt_ids")
		t.PromptTokens = c.usagePrompt
	} else {
		t.PromptTokens = int64(len(prompt))
		t.PromptIDsFrom = c.promptFrom
	}
	t.CachedTokens = min(max(c.cached, 0), t.PromptTokens)
	// Relation to earlier turns; only new prompt tokens are stored.
	var seq []int32
	if prompt != nil {
		prevTurn := -1
		if prev != nil && n > 0 {
			prevTurn = st.LastTurn
		} else {
			prev = nil
		}
		rel := relate(prompt, st.Marks, prevTurn, prev)
		if rel.Parent >= 0 {
			t.Parent, t.PrefixTokens = events.TurnRef(rel.Parent), rel.Prefix
		}
		if rel.DivergedFrom >= 0 {
			t.Diverged = &events.Divergence{Turn: rel.DivergedFrom, At: rel.DivergedAt}
		}
		if obs := prompt[rel.Prefix:]; len(obs) > 0 {
			t.ObservationTokenIDs = obs
		}
		if ids != nil {
			seq = make([]int32, 0, len(prompt)+len(ids))
			seq = append(append(seq, prompt...), ids...)
		}
	}
	t.VersionSegments = segs
	switch {
	case len(c.engineVersion) > 0:
		t.VersionSegments = c.engineVersion
	case c.lastVersion >= 0 && c.lastVersion == segs[0].PolicyVersion && len(segs) == 1:
		t.VersionSegments = []events.VersionSegment{{Start: 0, PolicyVersion: c.lastVersion, Known: events.KnownEngine}}
	case c.lastVersion >= 0:
		// The engine names only its last token's version, and it is not
		// the one the turn began under: the turn began under the older.
		first := min(c.lastVersion, segs[0].PolicyVersion)
		t.VersionSegments = []events.VersionSegment{{Start: 0, PolicyVersion: first, Known: events.KnownBracketed}}
	}
	t.Text, t.TextCut = cutText(c.text.String())
	if t.Text == "" {
		t.TextCut = 0
	}
	t.Finish = c.finish
	if t.Finish == "" {
		t.Finish = "stop"
		if len(c.toolCalls) > 0 {
			t.Finish = "tool_call"
		}
	}
	f := &turnFacts{turn: t}
	if s.o.Strict && (slices.Contains(c.tags, "ids_mismatch") || slices.Contains(c.tags, "logprobs_missing") || slices.Contains(c.tags, "no_prompt_ids")) {
		c.tag("refused")
		f.refused = true
	}
	t.Tags = slices.Clone(c.tags)
	slices.Sort(t.Tags)
	// Tool calls of the previous turn, answered (or not) by this request.
	next := &attemptState{NextTurn: n + 1, Marks: st.Marks, LastTurn: st.LastTurn, AnsweredAt: answered.UnixMilli(), replaces: st.AnsweredAt}
	if len(st.Pending) > 0 {
		outs := toolOutputs(ex.req)
		waited := arrived.UnixMilli() - st.AnsweredAt
		for _, pc := range st.Pending {
			tc := &events.ToolCalled{Attempt: ex.id.Attempt, Turn: pc.Turn, Call: pc.Call, Tool: pc.Tool, CallID: pc.ID, ExitUnknown: true}
			tc.Input, tc.InputCut = cutText(pc.Input)
			if out, ok := outs[pc.ID]; ok && pc.ID != "" {
				tc.OutputBytes = int64(len(out))
				tc.Output, tc.OutputCut = cutText(out)
				tc.DurationMS = max(waited, 0)
			} else {
				tc.Unanswered = true
			}
			if tc.Input == "" {
				tc.InputCut = 0
			}
			if tc.Output == "" {
				tc.OutputCut = 0
			}
			f.tools = append(f.tools, tc)
		}
	}
	for i, tc := range c.toolCalls {
		name := tc.name
		if name == "" {
			name = "unnamed"
		}
		next.Pending = append(next.Pending, pendingCall{Turn: n, Call: i, ID: tc.id, Tool: name, Input: tc.args.String()})
	}
	if seq != nil {
		next.Marks = append(slices.Clip(st.Marks), markOf(n, seq))
		next.LastTurn = n
		f.seq = seq
	} else {
		// Without the whole sequence, the next prompt cannot be related
		// to this turn; it is still the last turn.
		next.LastTurn = n
		f.seq = []int32{}
	}
	f.state = next
	return f
}

// encode makes the records of a turn's facts, tool calls first (they
// belong to the previous turn).
func (s *Server) encode(id identity, f *turnFacts) ([]pending, error) {
	at := s.now().UTC()
	var out []pending
	for _, tc := range f.tools {
		ev := events.Event{ID: toolID(id, tc.Turn, tc.Call), Run: id.Run, Type: events.TypeToolCalled, V: events.CurrentVersion(events.TypeToolCalled), At: at, Source: s.o.Source, Data: tc}
		rec, err := encodeChecked(ev)
		if err != nil {
			return nil, fmt.Errorf("proxy: tool call %d of turn %d: %w", tc.Call, tc.Turn, err)
		}
		out = append(out, pending{run: id.Run, record: rec})
	}
	ev := events.Event{ID: turnID(id, f.turn.Turn), Run: id.Run, Type: events.TypeTurnGenerated, V: events.CurrentVersion(events.TypeTurnGenerated), At: at, Source: s.o.Source, Data: f.turn}
	rec, err := encodeChecked(ev)
	if err != nil && errors.Is(err, events.ErrTooLarge) && len(f.turn.ObservationTokenIDs) > 0 {
		// A prompt of hundreds of thousands of new tokens does not fit in
		// one record (1 MiB): keep the turn without them, tagged, rather
		// than lose it. Its sequence is still marked, so later turns
		// relate to it.
		s.o.Logger.Warn("proxy: turn too large with its prompt ids; recording it without them", "attempt", id.Attempt, "turn", f.turn.Turn, "err", err)
		t := *f.turn
		t.ObservationTokenIDs, t.Parent, t.PrefixTokens = nil, nil, 0
		t.Tags = addTag(t.Tags, "no_prompt_ids")
		ev.Data = &t
		rec, err = encodeChecked(ev)
		if err == nil {
			f.turn = &t
		}
	}
	if err != nil {
		return nil, fmt.Errorf("proxy: turn %d: %w", f.turn.Turn, err)
	}
	return append(out, pending{run: id.Run, record: rec}), nil
}

// encodeChecked encodes an event and decodes it again as the ledger's
// ingest will, so a fact the ledger would refuse is known here, before
// the harness has its answer, not later as a dead letter.
func encodeChecked(ev events.Event) ([]byte, error) {
	rec, err := events.Encode(ev)
	if err != nil {
		return nil, err
	}
	if _, err := events.Decode(rec); err != nil {
		return nil, err
	}
	return rec, nil
}

func addTag(tags []string, t string) []string {
	if slices.Contains(tags, t) {
		return tags
	}
	out := append(slices.Clone(tags), t)
	slices.Sort(out)
	return out
}
