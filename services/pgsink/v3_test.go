package pgsink_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// What catalogue v3 added (docs/design.md §18.9, §18.10) lands in the read
// model: a proxy's turn with its parent, shared prefix, divergence,
// sampling, engine, tags and how each version was known; a tool call's id
// and its unknown or missing answer; an engine's vocabulary chunk. A
// version 2 turn and tool call land with none of it, and nothing is
// skipped.
func TestV3FactsLand(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	url := testenv.Postgres(t)
	schema := testenv.Schema(t, url)
	const run = "v3-run"
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	v2 := events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "a", Turn: 0, PromptTokens: 4, CompletionTokens: 2,
		VersionSegments: events.SingleVersion(3), TokenIDs: []int32{1, 2}, Logprobs: []float32{-1, -2}, Finish: events.FinishToolCall})
	v2.V = 2
	parent, temp, topK, seed := 0, 0.7, int64(40), int64(-3)
	v3 := events.New(run, "proxy-1", at, &events.TurnGenerated{Attempt: "a", Turn: 2, PromptTokens: 10, CompletionTokens: 3,
		VersionSegments:     []events.VersionSegment{{Start: 0, PolicyVersion: 3}, {Start: 1, PolicyVersion: 4, Known: "engine"}},
		ObservationTokenIDs: []int32{7, 8, 9, 10}, TokenIDs: []int32{1, 2, 3}, Logprobs: []float32{-1, -1, -1},
		Finish: events.FinishStop, Parent: &parent, PrefixTokens: 6, Diverged: &events.Divergence{Turn: 1, At: 5},
		PromptIDsFrom: "tokenize", IDsFrom: "engine",
		Sampling: &events.Sampling{Temperature: &temp, TopK: &topK, Seed: &seed, LogprobsMode: "processed"},
		Engine:   &events.EngineInfo{Name: "llamacpp", Version: "b4000"}, Tags: []string{events.TagContinued, events.TagRefused}})
	tool2 := events.New(run, "engine-1", at, &events.ToolCalled{Attempt: "a", Turn: 0, Tool: "bash", OutputBytes: 2})
	tool2.V = 2
	tool3 := events.New(run, "proxy-1", at, &events.ToolCalled{Attempt: "a", Turn: 2, Call: 1, Tool: "bash",
		CallID: "call_9", Unanswered: true, ExitUnknown: true})
	vocab := events.New(run, "proxy-1", at, &events.VocabularyRegistered{Engine: "llamacpp", Model: "tiny", Size: 5,
		Chunk: 1, Chunks: 2, First: 3, Pieces: []byte("abcd"), Offsets: []int32{1, 4}})
	// A token-bearing turn after the chunk: the sink decodes its tokens
	// into the memory the chunk's offsets were decoded into.
	next := events.New(run, "engine-1", at, &events.TurnGenerated{Attempt: "b", Turn: 0, PromptTokens: 4, CompletionTokens: 3,
		VersionSegments: events.SingleVersion(3), TokenIDs: []int32{9, 9, 9}, Logprobs: []float32{-1, -2, -3}, Finish: events.FinishStop})
	next.V = 2
	var recs []kafkalog.Record
	for _, ev := range []events.Event{v2, v3, tool2, tool3, vocab, next} {
		recs = append(recs, factRecord(t, ev))
	}
	appendRecords(t, kc, kc.FactsTopic(), recs)
	runSink(t, kc, url, schema)
	waitStored(t, url, schema, kc)

	conn := connect(t, url)
	ctx := context.Background()
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	type turnRow struct {
		Parent, Prefix, DivTurn, DivAt, TopK, Seed *int64
		From, IDsFrom, Mode, Engine, Version       *string
		Temp, TopP                                 *float64
		Tags                                       []string
		Refused                                    bool
		Known                                      []*string
	}
	turn := func(id string) turnRow {
		var r turnRow
		err := conn.QueryRow(ctx, `SELECT parent, prefix_tokens, diverged_turn, diverged_at, top_k, seed, prompt_ids_from, ids_from,
			logprobs_mode, engine_name, engine_version, temperature, top_p, tags, refused, segment_known FROM `+q("turns")+
			` WHERE event_id = $1`, id).Scan(&r.Parent, &r.Prefix, &r.DivTurn, &r.DivAt, &r.TopK, &r.Seed, &r.From, &r.IDsFrom,
			&r.Mode, &r.Engine, &r.Version, &r.Temp, &r.TopP, &r.Tags, &r.Refused, &r.Known)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	got := turn(v3.ID)
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	i64 := func(p *int64) int64 {
		if p == nil {
			return -99
		}
		return *p
	}
	if i64(got.Parent) != 0 || i64(got.Prefix) != 6 || i64(got.DivTurn) != 1 || i64(got.DivAt) != 5 || i64(got.TopK) != 40 || i64(got.Seed) != -3 {
		t.Errorf("v3 turn: got parent %d prefix %d diverged %d at %d top_k %d seed %d, want 0 6 1 5 40 -3",
			i64(got.Parent), i64(got.Prefix), i64(got.DivTurn), i64(got.DivAt), i64(got.TopK), i64(got.Seed))
	}
	if str(got.From) != "tokenize" || str(got.IDsFrom) != "engine" || str(got.Mode) != "processed" || str(got.Engine) != "llamacpp" || str(got.Version) != "b4000" {
		t.Errorf("v3 turn: got %s %s %s %s %s, want tokenize engine processed llamacpp b4000",
			str(got.From), str(got.IDsFrom), str(got.Mode), str(got.Engine), str(got.Version))
	}
	if got.Temp == nil || *got.Temp != 0.7 || got.TopP != nil {
		t.Errorf("v3 turn: got temperature %v top_p %v, want 0.7 and NULL", got.Temp, got.TopP)
	}
	if !slices.Equal(got.Tags, []string{"continued", "refused"}) || !got.Refused {
		t.Errorf("v3 turn: got tags %q refused %v, want [continued refused] true", got.Tags, got.Refused)
	}
	if len(got.Known) != 2 || got.Known[0] != nil || str(got.Known[1]) != "engine" {
		t.Errorf("v3 turn: got segment_known %v, want [NULL engine]", got.Known)
	}
	old := turn(v2.ID)
	if old.Parent != nil || old.Prefix != nil || old.Temp != nil || old.Engine != nil || len(old.Tags) != 0 || old.Refused || old.Known != nil {
		t.Errorf("v2 turn: got %+v, want no v3 values", old)
	}

	for _, tc := range []struct {
		id                  string
		callID              *string
		unanswered, unknown bool
	}{
		{tool2.ID, nil, false, false},
		{tool3.ID, ptr("call_9"), true, true},
	} {
		var callID *string
		var unanswered, unknown bool
		if err := conn.QueryRow(ctx, "SELECT call_id, unanswered, exit_unknown FROM "+q("tool_calls")+" WHERE event_id = $1", tc.id).
			Scan(&callID, &unanswered, &unknown); err != nil {
			t.Fatal(err)
		}
		if str(callID) != str(tc.callID) || unanswered != tc.unanswered || unknown != tc.unknown {
			t.Errorf("tool call %s: got %s %v %v, want %s %v %v", tc.id, str(callID), unanswered, unknown, str(tc.callID), tc.unanswered, tc.unknown)
		}
	}

	var engine, model string
	var size int64
	var chunk, chunks, first, tokens int32
	var pieces []byte
	var offsets []int32
	if err := conn.QueryRow(ctx, "SELECT engine, model, size, chunk, chunks, first_token, tokens, pieces, offsets FROM "+q("vocabulary_chunks")+
		" WHERE event_id = $1", vocab.ID).Scan(&engine, &model, &size, &chunk, &chunks, &first, &tokens, &pieces, &offsets); err != nil {
		t.Fatal(err)
	}
	if engine != "llamacpp" || model != "tiny" || size != 5 || chunk != 1 || chunks != 2 || first != 3 || tokens != 2 ||
		string(pieces) != "abcd" || !slices.Equal(offsets, []int32{1, 4}) {
		t.Errorf("vocabulary chunk: got %s %s %d %d/%d first %d tokens %d %q %v", engine, model, size, chunk, chunks, first, tokens, pieces, offsets)
	}
	if n := count(t, conn, schema, "skipped_records"); n != 0 {
		t.Errorf("%d records skipped", n)
	}
}
