package events_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rolloutledger/rolloutledger/events"
)

// update rewrites the golden files (testdata/golden) and the shared test
// vectors (../testdata/vectors) from the cases in these tests:
//
//	go test ./events/ -run 'TestGolden|TestVectors' -update
var update = flag.Bool("update", false, "rewrite golden files and test vectors")

// obj is a JSON object written field by field, in order, so that tests can
// build records, change one field, drop one or reorder them. Values are raw
// JSON.
type obj []kv

type kv struct{ k, v string }

// set returns a copy of o with field k set to the raw JSON v (appended when
// o lacks it).
func (o obj) set(k, v string) obj {
	out := slices.Clone(o)
	for i := range out {
		if out[i].k == k {
			out[i].v = v
			return out
		}
	}
	return append(out, kv{k, v})
}

// del returns a copy of o without field k.
func (o obj) del(k string) obj {
	return slices.DeleteFunc(slices.Clone(o), func(f kv) bool { return f.k == k })
}

// reversed returns o with its fields in reverse order.
func (o obj) reversed() obj {
	out := slices.Clone(o)
	slices.Reverse(out)
	return out
}

func (o obj) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(q(f.k))
		b.WriteByte(':')
		b.WriteString(f.v)
	}
	b.WriteByte('}')
	return b.String()
}

// q quotes s as a JSON string, leaving HTML characters alone.
func q(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

const (
	testID  = "0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11"
	testRun = "flash-300b-r7"
	testAt  = "2026-11-29T19:10:00.123Z"
)

// record is a valid version 1 envelope around data.
func record(typ events.Type, data obj) obj { return recordV(typ, 1, data) }

// recordV is a valid envelope of version v around data.
func recordV(typ events.Type, v int, data obj) obj {
	return obj{
		{"id", q(testID)},
		{"run", q(testRun)},
		{"type", q(string(typ))},
		{"v", strconv.Itoa(v)},
		{"at", q(testAt)},
		{"source", q("engine-17")},
		{"data", data.String()},
	}
}

// Valid data of every fact type. Each is referred to by the bad-input cases,
// which change one thing about it.
var (
	runStartedData = obj{
		{"config", obj{
			{"group_size", "16"},
			{"batch_groups", "32"},
			{"min_group", "4"},
			{"max_staleness", "4"},
			{"pass_band", "[0.2,0.8]"},
			{"min_probes", "8"},
			{"enforce_admission", "false"},
			{"partial_credit_cap", "0.4"},
			{"efficiency_weight", "0.2"},
			{"advantage", q("rloo")},
		}.String()},
		{"model", q("flash-300b")},
		{"harness", q("terminal-bench-2")},
		{"notes", q("ablation: no compaction")},
	}
	runStartedMinimal = obj{
		{"config", "{}"},
		{"model", q("flash-300b")},
		{"harness", q("terminal-bench-2")},
	}
	taskRegisteredData = obj{
		{"task", q("t-3")},
		{"source", q("swe-smith")},
		{"kind", q("swe")},
		{"tier", "2"},
		{"gates", `[{"name":"builds","passed":true},{"name":"tests-flaky","passed":false}]`},
	}
	groupStartedData = obj{
		{"group", q("g-17")},
		{"task", q("t-3")},
		{"size", "8"},
		{"purpose", q("train")},
	}
	attemptStartedData = obj{
		{"attempt", q("a-1")},
		{"group", q("g-17")},
		{"task", q("t-3")},
		{"engine", q("engine-17")},
		{"vm", q("vm/host-4:0192")},
		{"fork_ms", "38"},
	}
	turnData = obj{
		{"attempt", q("a-1")},
		{"turn", "0"},
		{"policy_version", "1"},
		{"prompt_tokens", "100"},
		{"completion_tokens", "3"},
		{"cached_tokens", "50"},
		{"observation_token_ids", "[7,8]"},
		{"token_ids", "[11,12,13]"},
		{"logprobs", "[-0.5,-0.25,0]"},
		{"finish", q("tool_call")},
		{"latency_ms", "900"},
	}
	turnBare = turnData.del("observation_token_ids").del("token_ids").del("logprobs")
	toolData = obj{
		{"attempt", q("a-1")},
		{"turn", "0"},
		{"call", "0"},
		{"tool", q("bash")},
		{"exit_code", "-1"},
		{"duration_ms", "1200"},
		{"output_bytes", "52000"},
		{"to_file", "true"},
		{"background", "false"},
		{"timed_out", "false"},
	}
	compactedData = obj{
		{"attempt", q("a-1")},
		{"turn", "40"},
		{"tokens_before", "120000"},
		{"tokens_after", "30000"},
	}
	finishedData = obj{
		{"attempt", q("a-1")},
		{"outcome", q("submitted")},
	}
	failedData = obj{
		{"attempt", q("a-1")},
		{"reason", q("microVM lost its host")},
	}
	rewardData = obj{
		{"attempt", q("a-1")},
		{"passed", "false"},
		{"tests_passed", "3"},
		{"tests_total", "5"},
		{"verifier", q("pytest-8")},
	}
	closedData = obj{
		{"group", q("g-17")},
		{"reason", q("retries exhausted")},
	}
	policyData = obj{
		{"version", "2"},
		{"checkpoint", q("s3://ckpt/flash-300b-r7/2")},
		{"digest", q("sha256:9f2c")},
		{"precision", q("fp8")},
	}
	gradientData = obj{
		{"step", "3"},
		{"batch", "3"},
		{"batch_digest", q("sha256:77ab")},
		{"from_version", "2"},
		{"to_version", "3"},
		{"loss", "-0.0123"},
		{"trained_tokens", "29870"},
		{"truncated_fraction", "0.021"},
		{"logprob_gap", `{"1":0.065,"4":0.08}`},
		{"grad_norm", "0.73"},
	}

	// Version 2 (docs/design.md §18): a turn whose weights changed at its
	// third token, with binary token arrays and text; a tool call and a
	// task with text.
	turnV2Data = obj{
		{"attempt", q("a-1")},
		{"turn", "0"},
		{"prompt_tokens", "100"},
		{"completion_tokens", "3"},
		{"cached_tokens", "50"},
		{"version_segments", `[{"start":0,"policy_version":1},{"start":2,"policy_version":2}]`},
		{"observation_token_ids", q(b64i(7, 8))},
		{"token_ids", q(b64i(11, 12, 13))},
		{"logprobs", q(b64f(-0.5, -0.25, 0))},
		{"text", q("ls -la <src> && cat \"a&b\" — ✓")},
		{"finish", q("tool_call")},
		{"latency_ms", "900"},
	}
	turnV2Bare = obj{
		{"attempt", q("a-1")},
		{"turn", "1"},
		{"prompt_tokens", "100"},
		{"completion_tokens", "3"},
		{"cached_tokens", "50"},
		{"version_segments", `[{"start":0,"policy_version":2}]`},
		{"finish", q("stop")},
		{"latency_ms", "900"},
	}
	turnV2Cut = append(turnV2Bare.del("finish").del("latency_ms"),
		kv{"text", q("the first 64 KiB of a longer completion")}, kv{"text_cut", "4096"},
		kv{"finish", q("length")}, kv{"latency_ms", "61000"})
	toolV2Data = toolData.
			set("input", q("grep -rn TODO src/")).
			set("output", q("src/a.go:12: // TODO\n")).
			set("output_cut", "51978")
	taskV2Data = taskRegisteredData.
			set("prompt", q("Fix the failing test in tests/test_io.py.")).
			set("prompt_cut", "120")

	// turnV3Data is a turn as a recording proxy writes it (version 3): a
	// child of turn 1 sharing 97 of its 100 prompt tokens, the 3 new ones
	// inline.
	turnV3Data = obj{
		{"attempt", q("a-1")},
		{"turn", "2"},
		{"prompt_tokens", "100"},
		{"completion_tokens", "3"},
		{"cached_tokens", "97"},
		{"version_segments", `[{"start":0,"policy_version":1,"known":"engine"},{"start":2,"policy_version":2,"known":"observed"}]`},
		{"observation_token_ids", q(b64i(7, 8, 9))},
		{"token_ids", q(b64i(11, 12, 13))},
		{"logprobs", q(b64f(-0.5, -0.25, 0))},
		{"text", q("ls")},
		{"finish", q("tool_call")},
		{"latency_ms", "900"},
		{"parent", "1"},
		{"prefix_tokens", "97"},
		{"diverged", `{"turn":1,"at":97}`},
		{"prompt_ids_from", q("engine")},
		{"ids_from", q("native")},
		{"sampling", `{"temperature":0.7,"top_p":0.95,"top_k":20,"min_p":0,"max_tokens":4096,"seed":-3,` +
			`"presence_penalty":-0.5,"frequency_penalty":0.25,"repetition_penalty":1.05,"logprobs_mode":"processed_logprobs"}`},
		{"engine", `{"name":"vllm","version":"0.11.0"}`},
		{"tags", `["client_cut","continued"]`},
	}
	// turnV3First is an attempt's first turn: no parent, its whole prompt
	// inline; a greedy turn (temperature 0 is a value) that was aborted.
	turnV3First = obj{
		{"attempt", q("a-1")},
		{"turn", "0"},
		{"prompt_tokens", "4"},
		{"completion_tokens", "2"},
		{"cached_tokens", "0"},
		{"version_segments", `[{"start":0,"policy_version":1}]`},
		{"observation_token_ids", q(b64i(1, 2, 3, 4))},
		{"token_ids", q(b64i(5, 6))},
		{"logprobs", q(b64f(-1, -2))},
		{"finish", q("abort")},
		{"latency_ms", "12"},
		{"prompt_ids_from", q("tokenize")},
		{"sampling", `{"temperature":0}`},
		{"tags", `["refused"]`},
	}
	toolV3Data = toolV2Data.
			set("call_id", q("call_9f8e7d")).
			set("unanswered", "true").
			set("exit_unknown", "true")
	vocabularyData = obj{
		{"engine", q("vllm")},
		{"model", q("Qwen/Qwen3-8B")},
		{"size", "151936"},
		{"chunk", "1"},
		{"chunks", "40"},
		{"first", "4096"},
		{"pieces", q(base64.StdEncoding.EncodeToString([]byte("hello world!")))},
		{"offsets", q(b64i(5, 6, 11, 12))},
	}
)

// b64i is the version 2 wire form of int32 values: base64 of their
// little-endian bytes.
func b64i(vs ...int32) string {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// b64f is b64i for float32 values.
func b64f(vs ...float32) string {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(b)
}

type example struct {
	name string
	typ  events.Type
	data obj
	v    int // 0 means 1
}

func (e example) version() int { return max(e.v, 1) }

func (e example) body() string { return recordV(e.typ, e.version(), e.data).String() }

// examples holds a valid event of every fact type, with the optional fields
// both present and absent. Their names are the golden files' names.
var examples = []example{
	{"run_started", events.TypeRunStarted, runStartedData, 0},
	{"run_started_minimal", events.TypeRunStarted, runStartedMinimal, 0},
	{"task_registered", events.TypeTaskRegistered, taskRegisteredData, 0},
	{"task_registered_no_gates", events.TypeTaskRegistered, taskRegisteredData.set("gates", "[]"), 0},
	{"group_started", events.TypeGroupStarted, groupStartedData, 0},
	{"attempt_started", events.TypeAttemptStarted, attemptStartedData, 0},
	{"attempt_started_retry", events.TypeAttemptStarted, attemptStartedData.set("attempt", q("a-9")).set("retry_of", q("a-1")), 0},
	{"turn_generated", events.TypeTurnGenerated, turnData, 0},
	{"turn_generated_bare", events.TypeTurnGenerated, turnBare, 0},
	{"tool_called", events.TypeToolCalled, toolData, 0},
	{"context_compacted", events.TypeContextCompacted, compactedData, 0},
	{"attempt_finished", events.TypeAttemptFinished, finishedData, 0},
	{"attempt_failed", events.TypeAttemptFailed, failedData, 0},
	{"reward_computed", events.TypeRewardComputed, rewardData, 0},
	{"group_closed", events.TypeGroupClosed, closedData, 0},
	{"policy_published", events.TypePolicyPublished, policyData, 0},
	{"gradient_applied", events.TypeGradientApplied, gradientData, 0},

	{"turn_generated_v2", events.TypeTurnGenerated, turnV2Data, 2},
	{"turn_generated_v2_cut", events.TypeTurnGenerated, turnV2Cut, 2},
	{"turn_generated_v2_bare", events.TypeTurnGenerated, turnV2Bare, 2},
	{"tool_called_v2", events.TypeToolCalled, toolV2Data, 2},
	{"task_registered_v2", events.TypeTaskRegistered, taskV2Data, 2},

	{"turn_generated_v3", events.TypeTurnGenerated, turnV3Data, 3},
	{"turn_generated_v3_first", events.TypeTurnGenerated, turnV3First, 3},
	{"turn_generated_v3_as_v2", events.TypeTurnGenerated, turnV2Bare, 3},
	{"tool_called_v3", events.TypeToolCalled, toolV3Data, 3},
	{"vocabulary_registered", events.TypeVocabularyRegistered, vocabularyData, 0},
}

func mustDecode(t testing.TB, body string) events.Event {
	t.Helper()
	ev, err := events.Decode([]byte(body))
	if err != nil {
		t.Fatalf("Decode(%s): %v", clipped(body), err)
	}
	return ev
}

func mustEncode(t testing.TB, ev events.Event) []byte {
	t.Helper()
	b, err := events.Encode(ev)
	if err != nil {
		t.Fatalf("Encode(%s %s): %v", ev.Type, ev.ID, err)
	}
	return b
}

func clipped(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

func TestExamplesCoverCatalogue(t *testing.T) {
	seen := map[events.Type]bool{}
	for _, ex := range examples {
		seen[ex.typ] = true
	}
	for _, typ := range events.FactTypes() {
		if !seen[typ] {
			t.Errorf("no valid example of %s", typ)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ev := mustDecode(t, ex.body())
			if ev.Type != ex.typ || ev.V != ex.version() {
				t.Errorf("got type %s v%d, want %s v%d", ev.Type, ev.V, ex.typ, ex.version())
			}
			if got := ev.Data.FactType(); got != ex.typ {
				t.Errorf("got data of type %s, want %s", got, ex.typ)
			}
			enc := mustEncode(t, ev)
			again := mustDecode(t, string(enc))
			if !reflect.DeepEqual(again, ev) {
				t.Errorf("Decode(Encode(ev)):\ngot  %#v\nwant %#v", again, ev)
			}
			if enc2 := mustEncode(t, again); !bytes.Equal(enc2, enc) {
				t.Errorf("encoding is not stable:\ngot  %s\nwant %s", enc2, enc)
			}
			// The examples are written in canonical form already.
			if string(enc) != ex.body() {
				t.Errorf("canonical form differs from the example:\ngot  %s\nwant %s", enc, ex.body())
			}
		})
	}
}

func TestEncodeIsByteStable(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ev := mustDecode(t, ex.body())
			a, b := mustEncode(t, ev), mustEncode(t, ev)
			if !bytes.Equal(a, b) {
				t.Errorf("two encodings differ:\n%s\n%s", a, b)
			}
		})
	}
}

// TestCanonicalForm checks that spacing, key order and the other freedoms a
// producer has do not reach the canonical bytes.
func TestCanonicalForm(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			want := mustEncode(t, mustDecode(t, ex.body()))

			var indented bytes.Buffer
			if err := json.Indent(&indented, []byte(ex.body()), "\t", "    "); err != nil {
				t.Fatal(err)
			}
			reordered := recordV(ex.typ, ex.version(), ex.data.reversed()).reversed().String()
			variants := map[string]string{
				"indented":  "\n  " + indented.String() + "\r\n",
				"reordered": reordered,
			}
			for name, body := range variants {
				got := mustEncode(t, mustDecode(t, body))
				if !bytes.Equal(got, want) {
					t.Errorf("%s: got %s, want %s", name, got, want)
				}
			}
		})
	}
}

func TestCanonicalNormalizes(t *testing.T) {
	base := record(events.TypeAttemptFailed, failedData)
	grad := record(events.TypeGradientApplied, gradientData)
	for _, tc := range []struct {
		name string
		body string
		want string
	}{
		{"upper-case id", base.set("id", q(strings.ToUpper(testID))).String(), base.String()},
		{"at with offset", base.set("at", q("2026-11-29T20:40:00.123+01:30")).String(), base.String()},
		{"at with trailing zeros", base.set("at", q("2026-11-29T19:10:00.123000Z")).String(), base.String()},
		{"escaped characters", base.set("run", `"flash\u002d300b-r7"`).set("data", `{"attempt":"a-1","reason":"microVM lost its \u0068ost"}`).String(), base.String()},
		{"number spelling", grad.set("data", gradientData.set("loss", "-1.23e-2").set("grad_norm", "0.730").String()).String(), grad.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(mustEncode(t, mustDecode(t, tc.body))); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestEmptyOptionalArrays: an optional array given empty is the same fact as
// one left out, and decodes to the same value its canonical form does.
func TestEmptyOptionalArrays(t *testing.T) {
	body := record(events.TypeTurnGenerated, turnBare.
		set("completion_tokens", "0").
		set("observation_token_ids", "[]").
		set("token_ids", "[]").
		set("logprobs", "[]")).String()
	ev := mustDecode(t, body)
	turn := ev.Data.(*events.TurnGenerated)
	if turn.ObservationTokenIDs != nil || turn.TokenIDs != nil || turn.Logprobs != nil {
		t.Errorf("got %v %v %v, want nil arrays", turn.ObservationTokenIDs, turn.TokenIDs, turn.Logprobs)
	}
	enc := mustEncode(t, ev)
	if again := mustDecode(t, string(enc)); !reflect.DeepEqual(again, ev) {
		t.Errorf("Decode(Encode(ev)):\ngot  %#v\nwant %#v", again.Data, ev.Data)
	}
	if want := record(events.TypeTurnGenerated, turnBare.set("completion_tokens", "0")).String(); string(enc) != want {
		t.Errorf("got %s, want %s", enc, want)
	}
}

func TestGolden(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	for _, ex := range examples {
		name := ex.name + ".json"
		want[name] = true
		t.Run(ex.name, func(t *testing.T) {
			got := append(mustEncode(t, mustDecode(t, ex.body())), '\n')
			path := filepath.Join(dir, name)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			// The canonical bytes are Merkle leaves: they must never change
			// for the same fact.
			if !bytes.Equal(got, golden) {
				t.Errorf("canonical encoding changed:\ngot  %s\nwant %s", got, golden)
			}
			// And a golden file is itself a valid, canonical record.
			if again := mustEncode(t, mustDecode(t, string(golden))); !bytes.Equal(append(again, '\n'), golden) {
				t.Errorf("golden %s is not canonical: re-encodes to %s", name, again)
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("stale golden file %s: no example has that name", e.Name())
		}
	}
}

func TestTextLandsVerbatim(t *testing.T) {
	const notes = `<script>alert("x")</script> a&b <= c && d > e — naïve 日本語 ✓ 😀`
	body := record(events.TypeRunStarted, runStartedMinimal.set("notes", q(notes))).String()
	enc := mustEncode(t, mustDecode(t, body))
	for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`, `\u00`, `\u65e5`} {
		if bytes.Contains(enc, []byte(esc)) {
			t.Errorf("canonical form holds the escape %s: %s", esc, enc)
		}
	}
	if !bytes.Contains(enc, []byte(`<script>alert(\"x\")</script> a&b <= c && d > e — naïve 日本語 ✓ 😀`)) {
		t.Errorf("got %s, want the notes verbatim", enc)
	}
	// The one exception: encoding/json always escapes the JavaScript line
	// separators U+2028 and U+2029. Pin it, since the canonical bytes are
	// Merkle leaves, and check it reads back as the same text.
	body = record(events.TypeRunStarted, runStartedMinimal.set("notes", q("a\u2028b\u2029c"))).String()
	ev := mustDecode(t, body)
	enc = mustEncode(t, ev)
	if !bytes.Contains(enc, []byte(`"notes":"a\u2028b\u2029c"`)) {
		t.Errorf("got %s, want U+2028 and U+2029 escaped", enc)
	}
	if got := mustDecode(t, string(enc)).Data.(*events.RunStarted).Notes; got != "a\u2028b\u2029c" {
		t.Errorf("got notes %q, want %q", got, "a\u2028b\u2029c")
	}
}

func TestRunConfigEncoding(t *testing.T) {
	// An explicit zero is kept through the round trip; an absent field stays
	// absent.
	body := record(events.TypeRunStarted, runStartedMinimal.set("config", `{"efficiency_weight":0}`)).String()
	ev := mustDecode(t, body)
	if got := string(mustEncode(t, ev)); got != body {
		t.Errorf("got %s, want %s", got, body)
	}
	cfg := ev.Data.(*events.RunStarted).Config
	if cfg.EfficiencyWeight == nil || *cfg.EfficiencyWeight != 0 {
		t.Errorf("got efficiency_weight %v, want a pointer to 0", cfg.EfficiencyWeight)
	}
	if cfg.GroupSize != nil {
		t.Errorf("got group_size %v, want nil", *cfg.GroupSize)
	}
	if got, want := (events.RunConfig{}).Resolve(), events.DefaultConfig(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if err := events.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v, want nil", err)
	}
	full := mustDecode(t, record(events.TypeRunStarted, runStartedData).String()).Data.(*events.RunStarted).Config.Resolve()
	want := events.Config{
		GroupSize: 16, BatchGroups: 32, MinGroup: 4, MaxStaleness: 4, PassBand: [2]float64{0.2, 0.8},
		MinProbes: 8, EnforceAdmission: false, PartialCreditCap: 0.4, EfficiencyWeight: 0.2, Advantage: events.AdvantageRLOO,
	}
	if full != want {
		t.Errorf("got %+v, want %+v", full, want)
	}
}

func TestDecisionID(t *testing.T) {
	id := events.DecisionID(testRun, "batch.sealed", 1)
	// Decision ids are persisted: this value must never change.
	if want := pinnedDecisionID; id != want {
		t.Errorf("got %s, want %s", id, want)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	if u.Version() != 5 || u.Variant() != uuid.RFC4122 {
		t.Errorf("got version %d variant %s, want 5 RFC4122", u.Version(), u.Variant())
	}
	for i := 0; i < 3; i++ {
		if again := events.DecisionID(testRun, "batch.sealed", 1); again != id {
			t.Errorf("got %s on call %d, want %s", again, i, id)
		}
	}
	seen := map[string]string{}
	for _, c := range []struct {
		run  string
		kind events.Type
		seq  uint64
	}{
		{testRun, "batch.sealed", 1},
		{testRun, "batch.sealed", 2},
		{testRun, "batch.sealed", 12},
		{testRun, "audit.checkpoint", 1},
		{testRun, "task.admitted", 1},
		{"flash-300b-r8", "batch.sealed", 1},
		// Neighbours that plain concatenation would confuse.
		{"r1", "batch.sealed", 2},
		{"r", "1batch.sealed", 2},
		{"r", "batch.sealed1", 2},
		{"r", "batch.sealed", 12},
	} {
		id := events.DecisionID(c.run, c.kind, c.seq)
		name := fmt.Sprintf("(%q, %q, %d)", c.run, c.kind, c.seq)
		if prev, dup := seen[id]; dup {
			t.Errorf("%s collides with %s: %s", name, prev, id)
		}
		seen[id] = name
	}
}

// pinnedDecisionID is DecisionID("flash-300b-r7", "batch.sealed", 1): the
// UUIDv5, in the decision namespace, of "flash-300b-r7\x00batch.sealed\x001"
// (in Python, uuid.uuid5(ns, "flash-300b-r7\x00batch.sealed\x001")).
const pinnedDecisionID = "173d7249-5360-5b15-afa4-fe9bf59dd4bb"

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	var prev string
	for i := 0; i < 1000; i++ {
		id := events.NewID()
		u, err := uuid.Parse(id)
		if err != nil {
			t.Fatalf("NewID() = %q: %v", id, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != id {
			t.Fatalf("NewID() = %q: got version %d variant %s, want a canonical UUIDv7", id, u.Version(), u.Variant())
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %s", id)
		}
		seen[id] = true
		// UUIDv7s from one process are time-ordered.
		if id <= prev {
			t.Errorf("NewID() = %s after %s, want increasing", id, prev)
		}
		prev = id
	}
	body := record(events.TypeAttemptFailed, failedData).set("id", q(prev)).String()
	if ev := mustDecode(t, body); ev.ID != prev {
		t.Errorf("got id %s, want %s", ev.ID, prev)
	}
}

func TestNew(t *testing.T) {
	at := time.Date(2026, 11, 29, 20, 10, 0, 123e6, time.FixedZone("CET", 3600))
	ev := events.New(testRun, "trainer-0", at, &events.PolicyPublished{Version: 3, Checkpoint: "c", Digest: "d", Precision: "bf16"})
	if ev.Type != events.TypePolicyPublished || ev.V != events.CurrentVersion(events.TypePolicyPublished) {
		t.Errorf("got %s v%d, want %s v%d", ev.Type, ev.V, events.TypePolicyPublished, events.CurrentVersion(events.TypePolicyPublished))
	}
	enc := mustEncode(t, ev)
	back := mustDecode(t, string(enc))
	if back.ID != ev.ID || !back.At.Equal(at) || !reflect.DeepEqual(back.Data, ev.Data) {
		t.Errorf("got %+v, want %+v", back, ev)
	}
	if !bytes.Contains(enc, []byte(`"at":"2026-11-29T19:10:00.123Z"`)) {
		t.Errorf("got %s, want at in UTC", enc)
	}
}

func TestCatalogue(t *testing.T) {
	// docs/design.md §3, and §18 for the types at version 2.
	want := []events.Type{
		"run.started", "task.registered", "group.started", "attempt.started",
		"turn.generated", "tool.called", "context.compacted", "attempt.finished",
		"attempt.failed", "reward.computed", "group.closed", "policy.published",
		"gradient.applied", "vocabulary.registered",
	}
	got := events.FactTypes()
	if !slices.Equal(got, want) {
		t.Errorf("got FactTypes() = %v, want %v", got, want)
	}
	v2 := []events.Type{"task.registered"}
	v3 := []events.Type{"turn.generated", "tool.called"}
	for _, typ := range got {
		want := 1
		if slices.Contains(v2, typ) {
			want = 2
		}
		if slices.Contains(v3, typ) {
			want = 3
		}
		if v := events.CurrentVersion(typ); v != want {
			t.Errorf("got CurrentVersion(%s) = %d, want %d", typ, v, want)
		}
	}
	// Decisions and strangers are not facts.
	for _, typ := range []events.Type{"batch.sealed", "task.admitted", "audit.finding", "", "Run.Started"} {
		if v := events.CurrentVersion(typ); v != 0 {
			t.Errorf("got CurrentVersion(%q) = %d, want 0", typ, v)
		}
	}
}
