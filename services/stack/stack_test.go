package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The ingest contract, run against every Kafka backend (embedded and real).
func TestIngest(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, b.Kafka(t)) })
			t.Run("BadInput", func(t *testing.T) { testBadInput(t, b.Kafka(t)) })
			t.Run("SamePartitionAsJavaClients", func(t *testing.T) { testPartitioning(t, b.Kafka(t)) })
		})
	}
}

func startStack(t *testing.T, kc kafkalog.Config) *stack.Stack {
	t.Helper()
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

var epoch = time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)

// runEvents builds n valid facts for run: a run.started and n-1 turns.
func runEvents(run string, n int) []events.Event {
	out := []events.Event{events.New(run, "scheduler", epoch, &events.RunStarted{Model: "m", Harness: "h"})}
	for i := 1; i < n; i++ {
		out = append(out, events.New(run, "engine-1", epoch.Add(time.Duration(i)*time.Millisecond), &events.TurnGenerated{
			Attempt: "a-1", Turn: i - 1, VersionSegments: events.SingleVersion(0), PromptTokens: int64(100 * i), CompletionTokens: 3,
			TokenIDs: []int32{1, 2, 3}, Logprobs: []float32{-0.1, -0.2, 0}, Finish: events.FinishToolCall, LatencyMS: 7,
		}))
	}
	return out
}

func body(t testing.TB, evs []events.Event) []byte {
	t.Helper()
	vals, err := events.EncodeBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte("["), bytes.Join(vals, []byte(","))...), ']')
}

func post(t *testing.T, url string, b []byte, header http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/events", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/events: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// consumed is one record read back with an independent Kafka client.
type consumed struct {
	key, value []byte
	headers    map[string]string
	partition  int32
	offset     int64
}

// readFacts reads every record of the facts topic with franz-go, a client
// independent of the one ingest writes with, until want records arrived.
func readFacts(t *testing.T, kc kafkalog.Config, want int) []consumed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers...), kgo.ConsumeTopics(kc.FactsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []consumed
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records before the deadline", len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			out = append(out, consumed{key: r.Key, value: r.Value, headers: h, partition: r.Partition, offset: r.Offset})
		})
	}
	return out
}

func endOffsetsSum(t testing.TB, kc kafkalog.Config) int64 {
	t.Helper()
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, o := range ends {
		sum += o
	}
	return sum
}

func testRoundTrip(t *testing.T, kc kafkalog.Config) {
	s := startStack(t, kc)
	const traceparent = "00-4bf92f3577b34ca3a2b9e0d0f2b1c3d4-00f067aa0ba902b7-01"
	sent := map[string][]events.Event{} // run -> events in send order
	acks := map[string]ingest.Appended{}
	// Three runs, each sent in several requests, alternating between runs,
	// each request waiting for the previous acknowledgment.
	for round := 0; round < 3; round++ {
		for _, run := range []string{"run-a", "run-b", "run-c"} {
			evs := runEvents(run, 5+round)
			if round > 0 {
				evs = evs[1:] // one run.started per run
			}
			code, out := post(t, s.URL(), body(t, evs), http.Header{"Traceparent": {traceparent}})
			if code != http.StatusOK {
				t.Fatalf("POST: got %d %s, want 200", code, out)
			}
			var resp ingest.Response
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if len(resp.Events) != len(evs) {
				t.Fatalf("got %d acknowledgments, want %d", len(resp.Events), len(evs))
			}
			for i, a := range resp.Events {
				if a.ID != evs[i].ID {
					t.Fatalf("acknowledgment %d: got id %s, want %s", i, a.ID, evs[i].ID)
				}
				acks[a.ID] = a
			}
			sent[run] = append(sent[run], evs...)
		}
	}
	recs := readFacts(t, kc, len(acks))
	if len(recs) != len(acks) {
		t.Fatalf("got %d records, want %d", len(recs), len(acks))
	}
	got := map[string][]events.Event{}
	seen := map[string]bool{}
	for _, r := range recs {
		ev, err := events.Decode(r.value)
		if err != nil {
			t.Fatalf("record at %d/%d does not decode: %v", r.partition, r.offset, err)
		}
		if seen[ev.ID] {
			t.Fatalf("event %s appears twice", ev.ID)
		}
		seen[ev.ID] = true
		a, ok := acks[ev.ID]
		if !ok {
			t.Fatalf("event %s in the topic was never acknowledged", ev.ID)
		}
		if a.Partition != r.partition || a.Offset != r.offset {
			t.Errorf("event %s: acknowledged at %d/%d, found at %d/%d", ev.ID, a.Partition, a.Offset, r.partition, r.offset)
		}
		if string(r.key) != ev.Run {
			t.Errorf("key: got %q, want run %q", r.key, ev.Run)
		}
		if r.headers["type"] != string(ev.Type) || r.headers["v"] != strconv.Itoa(ev.V) || r.headers["traceparent"] != traceparent {
			t.Errorf("headers: got %v, want type=%s v=%d traceparent", r.headers, ev.Type, ev.V)
		}
		canon, _ := events.Encode(ev)
		if !bytes.Equal(canon, r.value) {
			t.Errorf("stored value is not canonical:\n got %s\nwant %s", r.value, canon)
		}
		got[ev.Run] = append(got[ev.Run], ev)
	}
	// franz-go delivers each partition in offset order; a run lives in one
	// partition, so got[run] is the run's log order.
	for run, want := range sent {
		if len(got[run]) != len(want) {
			t.Fatalf("run %s: got %d events, want %d", run, len(got[run]), len(want))
		}
		for i := range want {
			if got[run][i].ID != want[i].ID {
				t.Fatalf("run %s: event %d is %s, want %s: per-run order broken", run, i, got[run][i].ID, want[i].ID)
			}
		}
	}
}

func testBadInput(t *testing.T, kc kafkalog.Config) {
	s := startStack(t, kc)
	good := string(body(t, runEvents("run-bad", 3)))
	one := func(mutate func(m map[string]any)) string {
		var m map[string]any
		vals, _ := events.EncodeBatch(runEvents("run-bad", 2)[1:])
		_ = json.Unmarshal(vals[0], &m)
		mutate(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	data := func(m map[string]any) map[string]any { return m["data"].(map[string]any) }
	// 200,000 six-digit token ids alone encode to 1.4 MB.
	ids, lps := make([]int32, 200_000), make([]float32, 200_000)
	for i := range ids {
		ids[i] = 100_000 + int32(i%900_000)
	}
	huge := events.New("run-bad", "engine-1", epoch, &events.TurnGenerated{
		Attempt: "a-1", CompletionTokens: int64(len(ids)), VersionSegments: events.SingleVersion(0), TokenIDs: ids, Logprobs: lps,
		Finish: events.FinishStop,
	})
	idx := func(i int) *int { return &i }
	cases := []struct {
		name        string
		body        string
		contentType string
		status      int
		code        string
		index       *int
		field       string
	}{
		{"malformed", `[{"id":`, "", 400, "malformed", nil, ""},
		{"empty array", `[]`, "", 400, "empty", nil, ""},
		{"unknown type", one(func(m map[string]any) { m["type"] = "turn.imagined" }), "", 400, "unknown_type", idx(0), "type"},
		{"unknown version", one(func(m map[string]any) { m["v"] = 9 }), "", 400, "unknown_version", idx(0), "v"},
		{"unknown field", one(func(m map[string]any) { data(m)["temperature"] = 1 }), "", 400, "unknown_field", idx(0), "data.temperature"},
		{"missing field", one(func(m map[string]any) { delete(data(m), "finish") }), "", 400, "missing_field", idx(0), "data.finish"},
		{"wrong type", one(func(m map[string]any) { data(m)["turn"] = "zero" }), "", 400, "wrong_type", idx(0), "data.turn"},
		{"non-UUID id", one(func(m map[string]any) { m["id"] = "not-a-uuid" }), "", 400, "invalid_value", idx(0), "id"},
		{"path-shaped run", one(func(m map[string]any) { m["run"] = "../etc" }), "", 400, "invalid_value", idx(0), "run"},
		{"token count mismatch", one(func(m map[string]any) { data(m)["completion_tokens"] = 4 }), "", 400, "invalid_value", idx(0), "data.token_ids"},
		{"third event bad", strings.Replace(good, `"finish":"tool_call"`, `"finish":"maybe"`, 2), "", 400, "invalid_value", idx(1), "data.finish"},
		{"record over 1 MiB", "[" + good[1:len(good)-1] + "," + rawJSON(t, huge) + "]", "", 413, "too_large", idx(3), ""},
		{"not JSON content", good, "text/plain", 415, "unsupported_media_type", nil, ""},
	}
	before := endOffsetsSum(t, kc)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.contentType != "" {
				h.Set("Content-Type", c.contentType)
			}
			code, out := post(t, s.URL(), []byte(c.body), h)
			if code != c.status {
				t.Fatalf("status: got %d (%s), want %d", code, out, c.status)
			}
			var eb struct {
				Error struct {
					Code, Message, Field string
					Index                *int
				}
			}
			if err := json.Unmarshal(out, &eb); err != nil {
				t.Fatalf("error body %q: %v", out, err)
			}
			e := eb.Error
			if e.Code != c.code || e.Field != c.field || fmt.Sprint(deref(e.Index)) != fmt.Sprint(deref(c.index)) || e.Message == "" {
				t.Errorf("error: got code=%s index=%v field=%q message=%q, want code=%s index=%v field=%q",
					e.Code, deref(e.Index), e.Field, e.Message, c.code, deref(c.index), c.field)
			}
		})
	}
	if after := endOffsetsSum(t, kc); after != before {
		t.Fatalf("refused requests appended %d records", after-before)
	}
	// The same good body is then accepted: refusals left nothing behind.
	if code, out := post(t, s.URL(), []byte(good), nil); code != 200 {
		t.Fatalf("good body after refusals: got %d %s", code, out)
	}
}

// rawJSON encodes ev, a turn, as version 1 without the codec's size check,
// as a careless producer might.
func rawJSON(t *testing.T, ev events.Event) string {
	t.Helper()
	d := ev.Data.(*events.TurnGenerated)
	b, err := json.Marshal(map[string]any{"id": ev.ID, "run": ev.Run, "type": ev.Type, "v": 1,
		"at": ev.At.Format(time.RFC3339Nano), "source": ev.Source, "data": map[string]any{
			"attempt": d.Attempt, "turn": d.Turn, "policy_version": d.PolicyVersion(), "prompt_tokens": d.PromptTokens,
			"completion_tokens": d.CompletionTokens, "cached_tokens": d.CachedTokens, "token_ids": d.TokenIDs,
			"logprobs": d.Logprobs, "finish": d.Finish, "latency_ms": d.LatencyMS,
		}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func deref(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}

// testPartitioning checks that a run lands on the partition a Java-style
// client (franz-go's default murmur2 partitioner) would choose, so producers
// in other languages keep each run in one partition too.
func testPartitioning(t *testing.T, kc kafkalog.Config) {
	s := startStack(t, kc)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers...), kgo.DefaultProduceTopic(kc.DecisionsTopic()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 20 {
		run := fmt.Sprintf("flash-%d-r%d", i*7919, i)
		code, out := post(t, s.URL(), body(t, runEvents(run, 1)), nil)
		if code != 200 {
			t.Fatalf("POST: %d %s", code, out)
		}
		var resp ingest.Response
		_ = json.Unmarshal(out, &resp)
		r, err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(run), Value: []byte("x")}).First()
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition != resp.Events[0].Partition {
			t.Errorf("run %s: ingest chose partition %d, the murmur2 partitioner %d", run, resp.Events[0].Partition, r.Partition)
		}
	}
}

// With the broker gone, ingest answers 503 and never 200.
func TestIngestAnswers503WhenKafkaCannotAcknowledge(t *testing.T) {
	kc, broker := testenv.EmbeddedKafka(t, "")
	s := startStack(t, kc)
	if code, out := post(t, s.URL(), body(t, runEvents("run-503", 2)), nil); code != 200 {
		t.Fatalf("before: got %d %s", code, out)
	}
	broker.Close()
	code, out := post(t, s.URL(), body(t, runEvents("run-503", 2)[1:]), nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(out), "not_acknowledged") {
		t.Fatalf("got %d %s, want 503 not_acknowledged", code, out)
	}
}
