package pgsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// runSink runs a sink into schema until the test ends.
func runSink(t *testing.T, kc kafkalog.Config, url, schema string) *pgsink.Sink {
	t.Helper()
	if _, err := pgsink.Migrate(context.Background(), url, schema, nil); err != nil {
		t.Fatal(err)
	}
	s, err := pgsink.New(pgsink.Options{Kafka: kc, DatabaseURL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// appendRecords writes records as they are to a topic.
func appendRecords(t *testing.T, kc kafkalog.Config, topic string, recs []kafkalog.Record) {
	t.Helper()
	w := kafkalog.NewWriter(kc, topic, kafkalog.WriterOptions{})
	defer w.Close()
	if _, err := w.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

func factRecord(t *testing.T, ev events.Event) kafkalog.Record {
	t.Helper()
	b, err := events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return kafkalog.Record{Key: []byte(ev.Run), Value: b}
}

// hostile are text values that break naive quoting, COPY's text format,
// or byte-oriented truncation. Events carry no NUL, so neither do these.
func hostile() []string {
	var long strings.Builder
	for long.Len() < 10<<10 {
		long.WriteString(`x'; DROP TABLE runs; -- "ü" \N \. 🚀	`)
	}
	return []string{
		`it's "quoted"; DROP TABLE runs; --`,
		"back\\slash \\N \\. \\x41 tab\there\nnewline\r\ncarriage return\rend",
		"ünïcödé 日本語 emoji 🚀 עברית zero\u200bwidth line\u2028separator",
		"$$ dollar $$ $tag$ quoted $tag$ %s %d {} [] \x01\x1f",
		long.String(),
	}
}

// Every free-text field of every fact type, and of a decision, lands
// verbatim whatever it holds.
func TestHostileTextLandsVerbatim(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	const run = "hostile-run"
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var facts, decisions []kafkalog.Record
	type check struct {
		table, id string
		cols      []string
		want      []string
	}
	var checks []check
	add := func(ev events.Event, table string, cols []string, want ...string) {
		facts = append(facts, factRecord(t, ev))
		checks = append(checks, check{table, ev.ID, cols, want})
	}
	for i, h := range hostile() {
		add(events.New(run, "scheduler", at, &events.RunStarted{Model: h, Harness: h, Notes: h}),
			"runs", []string{"model", "harness", "notes"}, h, h, h)
		task := events.New(run, "scheduler", at, &events.TaskRegistered{Task: fmt.Sprintf("t/%d:x", i), Source: "src.v1", Kind: "swe",
			Gates: []events.Gate{{Name: h, Passed: true}, {Name: "second " + h, Passed: false}}})
		facts = append(facts, factRecord(t, task))
		checks = append(checks, check{"task_gates", task.ID, []string{"name"}, []string{h}})
		add(events.New(run, "engine-1", at, &events.AttemptFailed{Attempt: "a", Reason: h}), "attempt_failures", []string{"reason"}, h)
		// Catalogue v2's text.
		add(events.New(run, "scheduler", at, &events.TaskRegistered{Task: fmt.Sprintf("t/%d:p", i), Source: "src.v2", Kind: "swe",
			Gates: []events.Gate{}, Prompt: h}), "tasks", []string{"prompt"}, h)
		add(events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "a", Turn: i, VersionSegments: events.SingleVersion(0),
			Finish: events.FinishStop, Text: h}), "turns", []string{"text"}, h)
		add(events.New(run, "engine-1", at, &events.ToolCalled{Attempt: "a", Turn: i, Tool: "bash", OutputBytes: int64(len(h)),
			Input: h, Output: h}), "tool_calls", []string{"input", "output"}, h, h)
		add(events.New(run, "scheduler", at, &events.GroupClosed{Group: "g", Reason: h}), "group_closures", []string{"reason"}, h)
		add(events.New(run, "verifier", at, &events.RewardComputed{Attempt: "a", Verifier: h}), "rewards", []string{"verifier"}, h)
		add(events.New(run, "trainer", at, &events.PolicyPublished{Version: int64(i), Checkpoint: h, Digest: h, Precision: h}),
			"policy_versions", []string{"checkpoint", "digest", "precision"}, h, h, h)
		add(events.New(run, "trainer", at, &events.GradientApplied{Step: 1, Batch: 1, BatchDigest: h, FromVersion: 0, ToVersion: 1,
			LogprobGap: map[string]float64{"0": 0.01}}), "gradient_steps", []string{"batch_digest"}, h)

		// A decision with hostile text, as a projector of a later version
		// might word one.
		id := events.DecisionID(run, projections.KindAuditFinding, uint64(i+1))
		data, _ := json.Marshal(projections.Finding{Kind: h, Detail: h, Event: h, Type: events.Type(h), Task: h, Group: h, Attempt: h, Want: h, Got: h})
		var value bytes.Buffer
		enc := json.NewEncoder(&value)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(projections.Envelope{ID: id, Run: run, Type: projections.KindAuditFinding, V: 1, Source: "projector",
			RuleVersion: 1, Data: data}); err != nil {
			t.Fatal(err)
		}
		decisions = append(decisions, kafkalog.Record{Key: []byte(run), Value: bytes.TrimSpace(value.Bytes())})
		checks = append(checks, check{"audit_findings", id, []string{"kind", "detail", "event_id", "fact_type", "task", "group_id", "attempt", "want", "got"},
			[]string{h, h, h, h, h, h, h, h, h}})
	}
	appendRecords(t, kc, kc.FactsTopic(), facts)
	appendRecords(t, kc, kc.DecisionsTopic(), decisions)
	runSink(t, kc, url, schema)
	waitStored(t, url, schema, kc)

	conn := connect(t, url)
	for _, c := range checks {
		key := "event_id"
		if c.table == "audit_findings" {
			key = "decision_id"
		}
		q := fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", strings.Join(c.cols, ", "), pgx.Identifier{schema, c.table}.Sanitize(), key)
		if c.table == "task_gates" {
			q += " AND ordinal = 0"
		}
		got := make([]string, len(c.cols))
		dest := make([]any, len(c.cols))
		for i := range got {
			dest[i] = &got[i]
		}
		if err := conn.QueryRow(context.Background(), q, c.id).Scan(dest...); err != nil {
			t.Fatalf("%s of %s: %v", c.table, c.id, err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s.%s: got %.80q (%d bytes), want %.80q (%d bytes)", c.table, c.cols[i], got[i], len(got[i]), c.want[i], len(c.want[i]))
			}
		}
	}
	if n := count(t, conn, schema, "skipped_records"); n != 0 {
		t.Errorf("%d records skipped", n)
	}
}

// A fact delivered twice (a producer's retry) and a decision emitted twice
// (a projector's re-emission) land once; a conflicting duplicate — same id,
// other content — is ignored, children and all, as the projections ignore
// it; a record that is not a fact is accounted for in skipped_records.
func TestDuplicatesLandOnce(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	const run = "dup-run"
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	task := events.New(run, "scheduler", at, &events.TaskRegistered{Task: "t1", Source: "s", Kind: "swe",
		Gates: []events.Gate{{Name: "builds", Passed: true}}})
	conflicting := task
	conflicting.Data = &events.TaskRegistered{Task: "t1", Source: "s", Kind: "agentic",
		Gates: []events.Gate{{Name: "other", Passed: false}, {Name: "extra", Passed: true}}}
	grad := events.New(run, "trainer", at, &events.GradientApplied{Step: 1, Batch: 1, BatchDigest: "d", FromVersion: 0, ToVersion: 1,
		LogprobGap: map[string]float64{"0": 0.05, "1": 0.065}})
	turn := events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "a1", Turn: 0, VersionSegments: events.SingleVersion(0), PromptTokens: 10,
		CompletionTokens: 3, TokenIDs: []int32{1, 2, 3}, Logprobs: []float32{-0.1, -0.2, -0.3}, Finish: "stop"})
	recs := []kafkalog.Record{factRecord(t, task), factRecord(t, grad), factRecord(t, turn), factRecord(t, conflicting),
		{Key: []byte(run), Value: []byte(`{"not":"a fact"}`)}}
	appendRecords(t, kc, kc.FactsTopic(), recs)
	// The whole delivery again, in a later transaction of the sink.
	s := runSink(t, kc, url, schema)
	waitStored(t, url, schema, kc)
	appendRecords(t, kc, kc.FactsTopic(), recs)
	adm, _ := json.Marshal(projections.Admission{Task: "t1", Probes: 4, Passes: 2, PassRate: 0.5})
	env, _ := json.Marshal(projections.Envelope{ID: events.DecisionID(run, projections.KindTaskAdmitted, 1), Run: run,
		Type: projections.KindTaskAdmitted, V: 1, Source: "projector", RuleVersion: 1, Data: adm})
	appendRecords(t, kc, kc.DecisionsTopic(), []kafkalog.Record{{Key: []byte(run), Value: env}, {Key: []byte(run), Value: env}})
	waitStored(t, url, schema, kc)

	conn := connect(t, url)
	for table, want := range map[string]int64{"tasks": 1, "task_gates": 1, "gradient_steps": 1, "gradient_logprob_gaps": 2,
		"turns": 1, "admissions": 1, "skipped_records": 2} {
		if got := count(t, conn, schema, table); got != want {
			t.Errorf("%s: %d rows, want %d", table, got, want)
		}
	}
	var kind, gate string
	var inline int64
	ctx := context.Background()
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT t.kind, g.name FROM %s t JOIN %s g USING (event_id)`,
		pgx.Identifier{schema, "tasks"}.Sanitize(), pgx.Identifier{schema, "task_gates"}.Sanitize())).Scan(&kind, &gate); err != nil {
		t.Fatal(err)
	}
	if kind != "swe" || gate != "builds" {
		t.Errorf("the task is stored as %s with gate %s; want the first delivery's swe and builds", kind, gate)
	}
	if err := conn.QueryRow(ctx, "SELECT inline_tokens FROM "+pgx.Identifier{schema, "turns"}.Sanitize()).Scan(&inline); err != nil || inline != 3 {
		t.Errorf("turn: inline_tokens %d (%v), want 3", inline, err)
	}
	if st := s.Stats(); st.Records != int64(2*len(recs)+2) {
		t.Errorf("the sink stored %d records, want %d", st.Records, 2*len(recs)+2)
	}
}

// Version 2 facts land with their segments, text and the bytes cut;
// version 1 facts with one segment, no text and nothing cut. Token ids and
// log-probs are counted, not stored.
func TestV2FactsLand(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	const run = "v2-run"
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	v1 := events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "a", Turn: 0, VersionSegments: events.SingleVersion(3),
		CompletionTokens: 2, TokenIDs: []int32{1, 2}, Logprobs: []float32{-1, -2}, Finish: events.FinishToolCall})
	v1.V = 1
	v2 := events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "a", Turn: 1, CompletionTokens: 5,
		VersionSegments:     []events.VersionSegment{{Start: 0, PolicyVersion: 3}, {Start: 2, PolicyVersion: 4}, {Start: 4, PolicyVersion: 6}},
		ObservationTokenIDs: []int32{9}, TokenIDs: []int32{1, 2, 3, 4, 5}, Logprobs: []float32{-1, -1, -1, -1, -1},
		Text: "abc", TextCut: 70000, Finish: events.FinishLength})
	tool := events.New(run, "engine-1", at, &events.ToolCalled{Attempt: "a", Turn: 1, Tool: "bash", OutputBytes: 9000,
		Input: "make", Output: "ok", OutputCut: 8998})
	task := events.New(run, "scheduler", at, &events.TaskRegistered{Task: "t", Source: "s", Kind: "swe", Gates: []events.Gate{},
		Prompt: "Fix it.", PromptCut: 12})
	// Version 2 records, as the test's name says (version 3 turns hold the
	// whole new prompt as observation tokens).
	v2.V, tool.V = 2, 2
	appendRecords(t, kc, kc.FactsTopic(), []kafkalog.Record{factRecord(t, v1), factRecord(t, v2), factRecord(t, tool), factRecord(t, task)})
	runSink(t, kc, url, schema)
	waitStored(t, url, schema, kc)

	conn := connect(t, url)
	ctx := context.Background()
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	for _, tc := range []struct {
		id               string
		policy           int64
		starts, versions []int64
		text             *string
		cut, inline      int64
	}{
		{v1.ID, 3, []int64{0}, []int64{3}, nil, 0, 2},
		{v2.ID, 3, []int64{0, 2, 4}, []int64{3, 4, 6}, ptr("abc"), 70000, 5},
	} {
		var policy, cut, inline int64
		var starts, versions []int64
		var text *string
		err := conn.QueryRow(ctx, "SELECT policy_version, segment_starts, segment_versions, text, text_cut, inline_tokens FROM "+q("turns")+
			" WHERE event_id = $1", tc.id).Scan(&policy, &starts, &versions, &text, &cut, &inline)
		if err != nil {
			t.Fatal(err)
		}
		if policy != tc.policy || !slices.Equal(starts, tc.starts) || !slices.Equal(versions, tc.versions) ||
			(text == nil) != (tc.text == nil) || text != nil && *text != *tc.text || cut != tc.cut || inline != tc.inline {
			t.Errorf("turn %s: got %d %v %v %v %d %d, want %d %v %v %v %d %d", tc.id, policy, starts, versions, text, cut, inline,
				tc.policy, tc.starts, tc.versions, tc.text, tc.cut, tc.inline)
		}
	}
	var input, output string
	var inCut, outCut int64
	if err := conn.QueryRow(ctx, "SELECT input, input_cut, output, output_cut FROM "+q("tool_calls")+" WHERE event_id = $1", tool.ID).
		Scan(&input, &inCut, &output, &outCut); err != nil {
		t.Fatal(err)
	}
	if input != "make" || inCut != 0 || output != "ok" || outCut != 8998 {
		t.Errorf("tool call: got %q %d %q %d", input, inCut, output, outCut)
	}
	var prompt string
	var promptCut int64
	if err := conn.QueryRow(ctx, "SELECT prompt, prompt_cut FROM "+q("tasks")+" WHERE event_id = $1", task.ID).Scan(&prompt, &promptCut); err != nil {
		t.Fatal(err)
	}
	if prompt != "Fix it." || promptCut != 12 {
		t.Errorf("task: got %q %d", prompt, promptCut)
	}
	if n := count(t, conn, schema, "skipped_records"); n != 0 {
		t.Errorf("%d records skipped", n)
	}
}

func ptr[T any](v T) *T { return &v }
