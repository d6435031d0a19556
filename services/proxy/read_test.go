package proxy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	json "github.com/segmentio/encoding/json"
)

// llamaAnswer is a llama.cpp-shaped whole answer of n tokens, as the proxy
// gets it when it asked for log-probs the client did not: each entry with
// its id, text, bytes, log-prob and one top log-prob.
func llamaAnswer(kind routeKind, n int) []byte {
	var b strings.Builder
	entry := func(i int) string {
		return fmt.Sprintf(`{"id":%d,"token":" tok%d","bytes":[32,116,111,107],"logprob":-0.%04d,"top_logprobs":[{"id":%d,"token":" tok%d","bytes":[32,116,111,107],"logprob":-0.%04d}]}`, 1000+i, i, i+1, 1000+i, i, i+1)
	}
	b.WriteString(`{"choices":[{"finish_reason":"length","index":0,`)
	text := strings.Repeat(" tok", n)
	if kind == routeChat {
		fmt.Fprintf(&b, `"message":{"role":"assistant","content":%q},`, text)
	} else {
		fmt.Fprintf(&b, `"text":%q,`, text)
	}
	b.WriteString(`"logprobs":{"content":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(entry(i))
	}
	fmt.Fprintf(&b, `]}}],"created":1796450666,"model":"m","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":%d,"prompt_tokens":18,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-x","timings":{"cache_n":0,"prompt_n":18}}`, n, n+18)
	return []byte(b.String())
}

// BenchmarkReadAnswer: reading a whole answer of a real turn's length
// (ids, log-probs, text, usage) and taking out the log-probs the client
// did not ask for; per answer, and per token.
func BenchmarkReadAnswer(b *testing.B) {
	for _, kind := range []routeKind{routeChat, routeCompletion} {
		for _, n := range []int{12, 400} {
			raw := llamaAnswer(kind, n)
			b.Run(fmt.Sprintf("%s/tokens=%d", kind, n), func(b *testing.B) {
				b.SetBytes(int64(len(raw)))
				s := &Server{}
				for b.Loop() {
					ex := newExchange(kind, identity{Run: "r", Attempt: "a"}, obj{})
					if _, err := s.readAnswer(ex, raw); err != nil {
						b.Fatal(err)
					}
					if len(ex.cap.ids) != n || len(ex.cap.logprobs) != n {
						b.Fatalf("%d ids, %d log-probs", len(ex.cap.ids), len(ex.cap.logprobs))
					}
				}
			})
		}
	}
}

// TestReadEntriesAsMembers: the one-pass reading of log-prob entries gives
// what reading them member by member gives, for every answer and stream
// chunk of the recorded engines and for odd shapes an engine might send;
// where it declines (a shape it does not read), it has read nothing.
func TestReadEntriesAsMembers(t *testing.T) {
	var members []json.RawMessage // logprobs members to read
	for _, engine := range []string{"llamacpp", "vllm", "sglang"} {
		files, _ := filepath.Glob(filepath.Join("testdata", engine, "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var payloads [][]byte
			switch {
			case strings.HasSuffix(f, ".response.json"):
				payloads = append(payloads, b)
			case strings.HasSuffix(f, ".sse"):
				for line := range strings.Lines(string(b)) {
					if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && d != "[DONE]" {
						payloads = append(payloads, []byte(d))
					}
				}
			}
			for _, p := range payloads {
				o, err := parseObj(p)
				if err != nil {
					continue
				}
				ans := newAnswer(o)
				for i := range ans.choices() {
					if ch, ok := ans.choice(i); ok && ch.has("logprobs") {
						members = append(members, ch["logprobs"])
					}
				}
			}
		}
	}
	if len(members) < 10 {
		t.Fatalf("only %d recorded logprobs members found", len(members))
	}
	for _, odd := range []string{
		`null`, `[]`, `"x"`, `{}`, `{"content":null}`, `{"content":[]}`, `{"content":"x"}`,
		`{"content":[null]}`, `{"content":[5,{"id":1,"logprob":-1}]}`, `{"content":[{"ID":7,"logprob":-1}]}`,
		`{"content":[{"id":"7","logprob":"-1"}]}`, `{"content":[{"id":7.5,"logprob":null}]}`,
		`{"content":[{"id":1,"id":2,"logprob":-1,"logprob":-2}]}`, `{"content":[{"id":-3,"logprob":1e999}]}`,
		`{"content":[{"id":1}],"token_logprobs":[-1]}`, `{"token_logprobs":[-1,-2],"tokens":["a","b"]}`,
		`{"content":{"id":1}}`, ` {"content":[{"logprob":-0.5}]} `,
	} {
		members = append(members, json.RawMessage(odd))
	}
	for _, raw := range members {
		for _, idsFromEntries := range []bool{true, false} {
			var fast, slow capture
			if !fast.readEntries(raw, idsFromEntries) {
				if !reflect.DeepEqual(fast, capture{}) {
					t.Errorf("%s: declined, but read %+v", raw, fast)
				}
				continue
			}
			o, _ := parseObj([]byte(`{"logprobs":` + string(raw) + `}`))
			slow.readLogprobs(o.obj("logprobs"), idsFromEntries)
			if !reflect.DeepEqual(fast, slow) {
				t.Errorf("%s (ids from entries %v): read in one pass %+v, member by member %+v", raw, idsFromEntries, fast, slow)
			}
		}
	}
}

// TestStripKeepsTheEngineBytes: taking out the log-probs the proxy asked
// for rewrites only the members it takes out; the text the engine wrote
// reaches the client byte for byte (HTML characters and escapes as they
// were), in a whole answer and in a stream's chunk alike.
func TestStripKeepsTheEngineBytes(t *testing.T) {
	text := `<tool_call>\n{\"a\": \"x & y\", \"b\": \"\u00e9\"}</tool_call>`
	for _, stream := range []bool{false, true} {
		raw := []byte(`{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"` + text +
			`"},"logprobs":{"content":[{"id":1,"token":"<","logprob":-0.5}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		o, err := parseObj(raw)
		if err != nil {
			t.Fatal(err)
		}
		out, changed := strip(raw, newAnswer(o), asked{tokenIDs: true, usage: true}, stream)
		if !changed {
			t.Fatalf("stream=%v: the log-probs the client did not ask for were left in", stream)
		}
		if !bytes.Contains(out, []byte(`"content":"`+text+`"`)) {
			t.Errorf("stream=%v: the engine's text changed on the way:\n%s", stream, out)
		}
		if bytes.Contains(out, []byte(`"logprobs":{`)) {
			t.Errorf("stream=%v: log-probs left in: %s", stream, out)
		}
	}
}
