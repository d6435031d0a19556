package events_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
)

// validVectors are the bodies of the shared valid vectors.
func validVectors(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, v := range wantVectors() {
		if !v.Valid {
			continue
		}
		b, err := v.body()
		if err != nil {
			t.Fatal(err)
		}
		out[v.Name] = b
	}
	return out
}

// Version 1 facts are Merkle leaves: each decodes into the newest struct
// of its type, and encodes back to its own bytes, whether through Encode
// or CanonicalBatch.
func TestV1RecordsReencodeByteForByte(t *testing.T) {
	check := func(t *testing.T, name string, rec []byte) {
		t.Helper()
		ev, err := events.Decode(rec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ev.V != 1 {
			return
		}
		if got := reflect.TypeOf(ev.Data).Elem().Name(); strings.HasPrefix(got, strings.ToLower(got[:1])) {
			t.Fatalf("%s: decoded into the wire struct %s, want the type's struct", name, got)
		}
		enc, err := events.Encode(ev)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		_, recs, err := events.CanonicalBatch(rec)
		if err != nil {
			t.Fatalf("%s: CanonicalBatch: %v", name, err)
		}
		if !bytes.Equal(enc, rec) || !bytes.Equal(recs[0], rec) {
			t.Fatalf("%s: v1 record re-encodes to other bytes:\ngot  %s\nwant %s", name, enc, rec)
		}
	}
	t.Run("vectors", func(t *testing.T) {
		n := 0
		for name, body := range validVectors(t) {
			evs, err := events.DecodeBatch(body)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := events.EncodeBatch(evs)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if evs[0].V == 1 {
					n++
				}
				check(t, name, r)
			}
		}
		if n < len(events.FactTypes()) {
			t.Errorf("only %d v1 vectors", n)
		}
	})
	t.Run("simulated run", func(t *testing.T) {
		plan, err := simulate.Generate(simulate.Options{Seed: 7, Tasks: 6, Steps: 2, BatchGroups: 2, MaxTurns: 12, Tokens: true, FactVersion: 1}, "v1-run")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := events.EncodeBatch(plan.All())
		if err != nil {
			t.Fatal(err)
		}
		turns := 0
		for i, r := range recs {
			if bytes.Contains(r, []byte(`"type":"turn.generated","v":1`)) && bytes.Contains(r, []byte(`"logprobs":[`)) {
				turns++
			}
			check(t, plan.All()[i].ID, r)
		}
		if turns == 0 {
			t.Fatal("the simulated run has no v1 turns with token arrays")
		}
	})
}

// The upcaster from version 1 is the identity on what both versions hold:
// a v1 turn is the v2 turn of one segment at its policy version.
func TestUpcastV1(t *testing.T) {
	v1 := mustDecode(t, turn(turnData))
	got := v1.Data.(*events.TurnGenerated)
	want := &events.TurnGenerated{
		Attempt: "a-1", Turn: 0, PromptTokens: 100, CompletionTokens: 3, CachedTokens: 50,
		VersionSegments: events.SingleVersion(1), ObservationTokenIDs: []int32{7, 8}, TokenIDs: []int32{11, 12, 13},
		Logprobs: []float32{-0.5, -0.25, 0}, Finish: events.FinishToolCall, LatencyMS: 900,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 turn decodes to\n%+v\nwant\n%+v", got, want)
	}
	if got.PolicyVersion() != 1 || got.VersionAt(2) != 1 {
		t.Errorf("PolicyVersion() = %d, VersionAt(2) = %d, want 1", got.PolicyVersion(), got.VersionAt(2))
	}
	// The same fact written as version 2 reads back as the same data.
	as2 := v1
	as2.V = 2
	enc := mustEncode(t, as2)
	if !bytes.Contains(enc, []byte(`"version_segments":[{"start":0,"policy_version":1}],"observation_token_ids":"`+b64i(7, 8)+`"`)) {
		t.Errorf("v2 encoding of a v1 turn: %s", enc)
	}
	if back := mustDecode(t, string(enc)); !reflect.DeepEqual(back.Data, v1.Data) {
		t.Errorf("v2 round trip of a v1 turn:\ngot  %+v\nwant %+v", back.Data, v1.Data)
	}
	for _, tc := range []struct {
		body string
		want events.Fact
	}{
		{record(events.TypeToolCalled, toolData).String(), &events.ToolCalled{Attempt: "a-1", Tool: "bash", ExitCode: -1, DurationMS: 1200, OutputBytes: 52000, ToFile: true}},
		{record(events.TypeTaskRegistered, taskRegisteredData).String(), &events.TaskRegistered{Task: "t-3", Source: "swe-smith", Kind: "swe", Tier: 2,
			Gates: []events.Gate{{Name: "builds", Passed: true}, {Name: "tests-flaky", Passed: false}}}},
	} {
		if got := mustDecode(t, tc.body).Data; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("got %+v, want %+v", got, tc.want)
		}
	}
}

// An event is written in its own version's shape, and a version that
// cannot hold its data refuses it, naming the field.
func TestEncodeRefusesWhatItsVersionCannotHold(t *testing.T) {
	turnOf := func(f func(*events.TurnGenerated)) events.Fact {
		tg := mustDecode(t, turn(turnData)).Data.(*events.TurnGenerated)
		f(tg)
		return tg
	}
	for _, tc := range []struct {
		name  string
		typ   events.Type
		data  events.Fact
		field string
	}{
		{"two segments", events.TypeTurnGenerated, turnOf(func(t *events.TurnGenerated) {
			t.VersionSegments = append(t.VersionSegments, events.VersionSegment{Start: 2, PolicyVersion: 2})
		}), "data.version_segments"},
		{"no segment", events.TypeTurnGenerated, turnOf(func(t *events.TurnGenerated) { t.VersionSegments = nil }), "data.version_segments"},
		{"text", events.TypeTurnGenerated, turnOf(func(t *events.TurnGenerated) { t.Text = "hello" }), "data.text"},
		{"text cut", events.TypeTurnGenerated, turnOf(func(t *events.TurnGenerated) { t.TextCut = 5 }), "data.text"},
		{"tool input", events.TypeToolCalled, &events.ToolCalled{Attempt: "a", Tool: "t", Input: "ls"}, "data.input"},
		{"tool output", events.TypeToolCalled, &events.ToolCalled{Attempt: "a", Tool: "t", Output: "x", OutputBytes: 1}, "data.output"},
		{"task prompt", events.TypeTaskRegistered, &events.TaskRegistered{Task: "t", Source: "s", Kind: "swe", Gates: []events.Gate{}, Prompt: "p"}, "data.prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := events.Event{ID: testID, Run: testRun, Type: tc.typ, V: 1, At: time.Unix(0, 0), Source: "s", Data: tc.data}
			_, err := events.Encode(ev)
			fe, ok := events.AsFieldError(err)
			if !ok || fe.Field != tc.field || !errors.Is(err, events.ErrInvalidValue) {
				t.Fatalf("got %v, want invalid_value at %s", err, tc.field)
			}
			if _, err := events.EncodeBatch([]events.Event{mustDecode(t, failed(failedData)), ev}); err == nil || !strings.HasPrefix(err.Error(), "event 1 field "+tc.field) {
				t.Errorf("EncodeBatch: got %v, want event 1 named", err)
			}
			ev.V = 2
			if _, err := events.Encode(ev); err != nil && tc.name != "no segment" {
				t.Errorf("as version 2: %v", err)
			}
		})
	}
	for _, ev := range []events.Event{
		{ID: testID, Run: testRun, Type: events.TypeTurnGenerated, V: 4, Source: "s", Data: &events.TurnGenerated{}},
		{ID: testID, Run: testRun, Type: events.TypeTurnGenerated, V: 0, Source: "s", Data: &events.TurnGenerated{}},
		{ID: testID, Run: testRun, Type: events.TypeTurnGenerated, V: 1, Source: "s", Data: &events.ToolCalled{}},
		{ID: testID, Run: testRun, Type: "batch.sealed", V: 1, Source: "s", Data: &events.ToolCalled{}},
	} {
		if _, err := events.Encode(ev); err == nil {
			t.Errorf("Encode(%s v%d of %T): got no error", ev.Type, ev.V, ev.Data)
		}
	}
}

// Version 2 cannot hold what version 3 adds: Encode names the field.
func TestEncodeRefusesV3FieldsAsV2(t *testing.T) {
	base := func() *events.TurnGenerated {
		return &events.TurnGenerated{Attempt: "a", Turn: 1, PromptTokens: 4, VersionSegments: events.SingleVersion(1), Finish: events.FinishStop}
	}
	temp := 0.5
	for _, tc := range []struct {
		name  string
		data  events.Fact
		field string
	}{
		{"parent", func() events.Fact { t := base(); t.Parent, t.PrefixTokens = events.TurnRef(0), 2; return t }(), "data.parent"},
		{"diverged", func() events.Fact { t := base(); t.Diverged = &events.Divergence{Turn: 0, At: 1}; return t }(), "data.diverged"},
		{"sampling", func() events.Fact { t := base(); t.Sampling = &events.Sampling{Temperature: &temp}; return t }(), "data.sampling"},
		{"engine", func() events.Fact { t := base(); t.Engine = &events.EngineInfo{Name: "vllm"}; return t }(), "data.engine"},
		{"tags", func() events.Fact { t := base(); t.Tags = []string{events.TagRefused}; return t }(), "data.tags"},
		{"abort", func() events.Fact { t := base(); t.Finish = events.FinishAbort; return t }(), "data.finish"},
		{"ids_from", func() events.Fact { t := base(); t.IDsFrom = events.IDsNative; return t }(), "data.ids_from"},
		{"known", func() events.Fact {
			t := base()
			t.VersionSegments[0].Known = events.KnownEngine
			return t
		}(), "data.version_segments[0].known"},
		{"call_id", &events.ToolCalled{Attempt: "a", Tool: "t", CallID: "c"}, "data.call_id"},
		{"exit_unknown", &events.ToolCalled{Attempt: "a", Tool: "t", ExitUnknown: true}, "data.exit_unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := events.Event{ID: testID, Run: testRun, Type: tc.data.FactType(), V: 2, At: time.Unix(0, 0), Source: "s", Data: tc.data}
			_, err := events.Encode(ev)
			fe, ok := events.AsFieldError(err)
			if !ok || fe.Field != tc.field || !errors.Is(err, events.ErrInvalidValue) {
				t.Fatalf("got %v, want invalid_value at %s", err, tc.field)
			}
			ev.V = 3
			if _, err := events.Encode(ev); err != nil {
				t.Errorf("as version 3: %v", err)
			}
		})
	}
}

// Records of versions 1 and 2 read as the newest shape and encode back to
// their own bytes; a v2 turn read as v3 has every new field absent.
func TestOlderVersionsKeepTheirBytes(t *testing.T) {
	for _, body := range []string{turn(turnData), turn2(turnV2Data), turn2(turnV2Cut),
		recordV(events.TypeToolCalled, 2, toolV2Data).String(), record(events.TypeToolCalled, toolData).String()} {
		ev := mustDecode(t, body)
		if got := mustEncode(t, ev); string(got) != body {
			t.Errorf("got %s, want %s", got, body)
		}
		if tg, ok := ev.Data.(*events.TurnGenerated); ok {
			if tg.Parent != nil || tg.PrefixTokens != 0 || tg.Sampling != nil || tg.Engine != nil || tg.Tags != nil || tg.Diverged != nil {
				t.Errorf("v%d turn upcast with v3 fields: %+v", ev.V, tg)
			}
		}
	}
}

// A v3 turn roundtrips: decode, encode, the same bytes; Temperature and
// HasTag read it.
func TestTurnV3Roundtrip(t *testing.T) {
	body := turn3(turnV3Data)
	ev := mustDecode(t, body)
	if got := mustEncode(t, ev); string(got) != body {
		t.Errorf("got %s, want %s", got, body)
	}
	tg := ev.Data.(*events.TurnGenerated)
	if tg.Parent == nil || *tg.Parent != 1 || tg.PrefixTokens != 97 || tg.Diverged == nil || *tg.Diverged != (events.Divergence{Turn: 1, At: 97}) {
		t.Errorf("parent, prefix, diverged: %v %d %v", tg.Parent, tg.PrefixTokens, tg.Diverged)
	}
	if temp, ok := tg.Temperature(); !ok || temp != 0.7 {
		t.Errorf("Temperature() = %v, %v", temp, ok)
	}
	if !tg.HasTag(events.TagContinued) || tg.HasTag(events.TagRefused) {
		t.Errorf("tags %v", tg.Tags)
	}
	if tg.VersionSegments[1].Known != events.KnownObserved {
		t.Errorf("known %q", tg.VersionSegments[1].Known)
	}
	first := mustDecode(t, turn3(turnV3First)).Data.(*events.TurnGenerated)
	if temp, ok := first.Temperature(); !ok || temp != 0 || first.Parent != nil {
		t.Errorf("greedy first turn: %v %v %v", temp, ok, first.Parent)
	}
	// Built in Go: parent 0 is a value, not absent.
	temp := 1.0
	built := &events.TurnGenerated{Attempt: "a", Turn: 1, PromptTokens: 5, CompletionTokens: 1, VersionSegments: events.SingleVersion(1),
		ObservationTokenIDs: []int32{9}, TokenIDs: []int32{3}, Logprobs: []float32{-1}, Finish: events.FinishStop,
		Parent: events.TurnRef(0), PrefixTokens: 4, Sampling: &events.Sampling{Temperature: &temp}}
	enc := mustEncode(t, events.New(testRun, "proxy-1", time.Unix(0, 0), built))
	if !bytes.Contains(enc, []byte(`"parent":0,"prefix_tokens":4`)) || !bytes.Contains(enc, []byte(`"v":3`)) {
		t.Errorf("got %s", enc)
	}
	if back := mustDecode(t, string(enc)); !reflect.DeepEqual(back.Data, built) {
		t.Errorf("got %+v, want %+v", back.Data, built)
	}
}

// A vocabulary chunk roundtrips, its pieces as base64.
func TestVocabularyRoundtrip(t *testing.T) {
	body := record(events.TypeVocabularyRegistered, vocabularyData).String()
	ev := mustDecode(t, body)
	if got := mustEncode(t, ev); string(got) != body {
		t.Errorf("got %s, want %s", got, body)
	}
	v := ev.Data.(*events.VocabularyRegistered)
	if string(v.Pieces) != "hello world!" || !slices.Equal(v.Offsets, []int32{5, 6, 11, 12}) {
		t.Errorf("got %q %v", v.Pieces, v.Offsets)
	}
}

// New writes each type at its newest version: producers in Go write v3
// turns.
func TestNewWritesTheNewestVersion(t *testing.T) {
	tg := &events.TurnGenerated{Attempt: "a", VersionSegments: []events.VersionSegment{{Start: 0, PolicyVersion: 3}, {Start: 2, PolicyVersion: 4}}, CompletionTokens: 4,
		TokenIDs: []int32{1, 2, 3, 4}, Logprobs: []float32{-1, -2, -3, -4}, Text: "abc", TextCut: 9, Finish: events.FinishStop}
	ev := events.New(testRun, "engine-1", time.Unix(0, 0), tg)
	if ev.V != 3 {
		t.Fatalf("got v%d, want 3", ev.V)
	}
	enc := mustEncode(t, ev)
	want := `"version_segments":[{"start":0,"policy_version":3},{"start":2,"policy_version":4}],"token_ids":"` + b64i(1, 2, 3, 4) +
		`","logprobs":"` + b64f(-1, -2, -3, -4) + `","text":"abc","text_cut":9,"finish":"stop"`
	if !bytes.Contains(enc, []byte(want)) {
		t.Errorf("got %s, want it to hold %s", enc, want)
	}
	if back := mustDecode(t, string(enc)); !reflect.DeepEqual(back.Data, ev.Data) {
		t.Errorf("got %+v, want %+v", back.Data, ev.Data)
	}
}

// CanonicalBatch puts the base64 text of a v2 binary field into the record
// as it came, after strict decoding proved it canonical; escapes in the
// JSON string are undone.
func TestCanonicalBatchCopiesBinaryText(t *testing.T) {
	ids := make([]int32, 2048)
	lps := make([]float32, 2048)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range ids {
		ids[i], lps[i] = r.Int32N(151936), -r.Float32()*8
	}
	tokenText, lpText := b64i(ids...), b64f(lps...)
	// In canonical order: the arrays before finish.
	body := turn2(append(turnV2Bare.del("finish").del("latency_ms").set("completion_tokens", "2048"),
		kv{"token_ids", q(tokenText)}, kv{"logprobs", q(lpText)}, kv{"finish", q("stop")}, kv{"latency_ms", "900"}))
	evs, recs, err := events.CanonicalBatch([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if string(recs[0]) != body {
		t.Errorf("a canonical v2 body is not stored as sent:\ngot  %.300s\nwant %.300s", recs[0], body)
	}
	if enc := mustEncode(t, evs[0]); !bytes.Equal(enc, recs[0]) {
		t.Errorf("Encode from the values differs from CanonicalBatch")
	}
	// Escaped slashes are the same characters.
	escaped := strings.ReplaceAll(body, "/", `\/`)
	if escaped == body {
		t.Fatal("no slash in the base64 text")
	}
	_, recs2, err := events.CanonicalBatch([]byte(escaped))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(recs2[0], recs[0]) {
		t.Errorf("escaped base64 is not stored unescaped")
	}
}

// A Canonicalizer reused for bodies of every size gives each the records
// and events CanonicalBatch gives, and what one call returns is separate:
// an append to one event's values or to one record does not run into the
// next.
func TestCanonicalizerReused(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	turn := func(n int) string {
		ids, lps := make([]int32, n), make([]float32, n)
		for i := range ids {
			ids[i], lps[i] = r.Int32N(151936), -r.Float32()*8
		}
		return turn2(append(turnV2Bare.del("finish").del("latency_ms").set("completion_tokens", strconv.Itoa(n)),
			kv{"token_ids", q(b64i(ids...))}, kv{"logprobs", q(b64f(lps...))}, kv{"finish", q("stop")}, kv{"latency_ms", "900"}))
	}
	var c events.Canonicalizer
	for _, sizes := range [][]int{{2048, 2048}, {1}, {4096, 16, 2048, 3}, {0}, {8192, 8192, 8192}} {
		var items []string
		for _, n := range sizes {
			items = append(items, turn(n))
		}
		body := []byte("[" + strings.Join(items, ",") + "]")
		want, wantRecs, err := events.CanonicalBatch(body)
		if err != nil {
			t.Fatal(err)
		}
		evs, recs, err := c.Batch(body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(evs, want) || !slices.EqualFunc(recs, wantRecs, bytes.Equal) {
			t.Fatalf("turns of %v tokens: a reused Canonicalizer differs from CanonicalBatch", sizes)
		}
		if len(evs) < 2 {
			continue
		}
		first, second := evs[0].Data.(*events.TurnGenerated), evs[1].Data.(*events.TurnGenerated)
		lps, next, nextRec := slices.Clone(first.Logprobs), slices.Clone(second.TokenIDs), slices.Clone(recs[1])
		_ = append(first.TokenIDs, 1, 2, 3, 4)
		_ = append(first.Logprobs, -1, -2, -3, -4)
		_ = append(recs[0], "garbage"...)
		if !slices.Equal(first.Logprobs, lps) || !slices.Equal(second.TokenIDs, next) || !bytes.Equal(recs[1], nextRec) {
			t.Fatalf("turns of %v tokens: appending to the first event's values or record changed other values or records", sizes)
		}
	}
}

// The strict base64 decoder (segmentio/asm, with an AVX2 kernel for long
// text) agrees with the standard library's strict decoder, which skips
// line breaks that ours refuses: on every string without them, the same
// verdict and the same bytes.
func FuzzBinaryDecode(f *testing.F) {
	for _, s := range []string{"", "AAAA", "AAAAAA==", "AAAAAB==", "AA==AAAA", "////Pw==", strings.Repeat("A", 64), strings.Repeat("QUJD", 40) + "QQ==",
		strings.Repeat("QUJD", 40) + "QR==", strings.Repeat("QUJD", 16) + "!" + strings.Repeat("QUJD", 16)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsAny(s, "\r\n\\\"") || len(s) == 0 {
			return
		}
		std, stdErr := base64.StdEncoding.Strict().DecodeString(s)
		rec := recordV(events.TypeTurnGenerated, 2, turnV2Bare.set("observation_token_ids", q(s))).String()
		ev, err := events.Decode([]byte(rec))
		if stdErr != nil {
			if err == nil {
				t.Fatalf("%q: accepted, the standard library refuses it (%v)", s, stdErr)
			}
			return
		}
		if len(std)%4 != 0 || !utf8Valid(s) {
			return
		}
		// Values the tags refuse (negative ids) are another matter.
		neg := false
		for i := 0; i < len(std); i += 4 {
			neg = neg || std[i+3]&0x80 != 0
		}
		if neg {
			return
		}
		if err != nil {
			t.Fatalf("%q: refused (%v), the standard library reads %d bytes", s, err, len(std))
		}
		got := ev.Data.(*events.TurnGenerated).ObservationTokenIDs
		if want := b64i(got...); want != s {
			t.Fatalf("%q decodes to values whose encoding is %q", s, want)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\ufffd") == s }

func TestVersionAt(t *testing.T) {
	tg := &events.TurnGenerated{VersionSegments: []events.VersionSegment{{Start: 0, PolicyVersion: 3}, {Start: 4, PolicyVersion: 5}, {Start: 9, PolicyVersion: 8}}}
	for i, want := range []int64{3, 3, 3, 3, 5, 5, 5, 5, 5, 8, 8, 8} {
		if got := tg.VersionAt(int64(i)); got != want {
			t.Errorf("VersionAt(%d) = %d, want %d", i, got, want)
		}
	}
	if got := tg.PolicyVersion(); got != 3 {
		t.Errorf("PolicyVersion() = %d, want 3", got)
	}
	if got := (&events.TurnGenerated{}).PolicyVersion(); got != 0 {
		t.Errorf("PolicyVersion() of no segments = %d, want 0", got)
	}
}

// Every float32 bit pattern that is not finite is refused wherever it
// stands; -0 and the smallest subnormals are log-probabilities.
func TestLogprobBitPatterns(t *testing.T) {
	for _, tc := range []struct {
		bits uint32
		ok   bool
	}{
		{0x80000000, true},  // -0
		{0x00000000, true},  // +0
		{0x80000001, true},  // the negative subnormal closest to 0
		{0x00000001, false}, // the positive one
		{0xff7fffff, true},  // -MaxFloat32
		{0xff800000, false}, // -Inf
		{0x7f800000, false}, // +Inf
		{0x7fc00000, false}, // a quiet NaN
		{0xffc00001, false}, // a negative NaN with a payload
		{0x7f800001, false}, // a signalling NaN
	} {
		f := math.Float32frombits(tc.bits)
		body := turn2(turnV2Data.set("logprobs", q(b64f(-1, f, -1))))
		_, err := events.Decode([]byte(body))
		if (err == nil) != tc.ok {
			t.Errorf("%#08x: got %v, want ok %v", tc.bits, err, tc.ok)
			continue
		}
		if fe, _ := events.AsFieldError(err); err != nil && fe.Field != "data.logprobs[1]" {
			t.Errorf("%#08x: got field %q, want data.logprobs[1]", tc.bits, fe.Field)
		}
	}
}
