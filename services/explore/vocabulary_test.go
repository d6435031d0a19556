package explore

import (
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// vocabChunks is a vocabulary of pieces in chunks of per, as a producer
// registers it.
func vocabChunks(engine string, pieces []string, per int) []events.Fact {
	var out []events.Fact
	chunks := (len(pieces) + per - 1) / per
	for c := range chunks {
		v := &events.VocabularyRegistered{Engine: engine, Model: "m", Size: int64(len(pieces)), Chunk: c, Chunks: chunks, First: int32(c * per)}
		for _, p := range pieces[c*per : min(len(pieces), c*per+per)] {
			v.Pieces = append(v.Pieces, p...)
			v.Offsets = append(v.Offsets, int32(len(v.Pieces)))
		}
		out = append(out, v)
	}
	return out
}

// An attempt's view decodes its token ids with its engine's vocabulary,
// whichever order the chunks and the turns arrive in; ids of a chunk not
// yet registered stay ids.
func TestVocabularyDecodes(t *testing.T) {
	pieces := []string{"<s>", "Hello", ",", " world", "\n", "\xe2\x96", "!"}
	chunks := vocabChunks("e", pieces, 3)
	if _, err := events.Encode(events.New("r", "test", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), chunks[0])); err != nil {
		t.Fatalf("a chunk does not encode: %v", err)
	}
	setup := []events.Fact{&events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, CompletionTokens: 6, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop,
			TokenIDs: []int32{1, 2, 3, 6, 5, 4}, Logprobs: []float32{-1, -1, -1, -1, -1, -1}}}
	m := NewModel("r")
	feed(m, append([]events.Fact{chunks[2], chunks[0]}, setup...)...)
	a, _ := m.AttemptView("g/a")
	if a.Vocabulary == nil {
		t.Fatal("no vocabulary on the attempt view")
	}
	want := map[int32]string{1: "Hello", 2: ",", 6: "!"}
	if a.Vocabulary.Complete || len(a.Vocabulary.Pieces) != len(want) {
		t.Errorf("two of three chunks: complete %v, pieces %q; want incomplete, %q", a.Vocabulary.Complete, a.Vocabulary.Pieces, want)
	}
	feed(m, chunks[1])
	a, _ = m.AttemptView("g/a")
	want = map[int32]string{1: "Hello", 2: ",", 3: " world", 4: "\n", 5: "<0xE2><0x96>", 6: "!"}
	for id, p := range want {
		if a.Vocabulary.Pieces[id] != p {
			t.Errorf("token %d: piece %q, want %q", id, a.Vocabulary.Pieces[id], p)
		}
	}
	if !a.Vocabulary.Complete || a.Vocabulary.Engine != "e" || a.Vocabulary.Size != 7 {
		t.Errorf("vocabulary %+v, want engine e's, complete, of 7", a.Vocabulary)
	}
}

// A run without a vocabulary shows ids; a chunk again, or pieces and
// offsets that do not fit, change nothing already decoded.
func TestVocabularyBadChunks(t *testing.T) {
	m := NewModel("r")
	feed(m, &events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, CompletionTokens: 2, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop,
			TokenIDs: []int32{0, 1}, Logprobs: []float32{-1, -1}})
	if a, _ := m.AttemptView("g/a"); a.Vocabulary != nil {
		t.Fatalf("a run without a vocabulary: %+v", a.Vocabulary)
	}
	good := vocabChunks("e", []string{"a", "b"}, 2)[0].(*events.VocabularyRegistered)
	again := *good
	again.Pieces = []byte("xy")
	bad := &events.VocabularyRegistered{Engine: "e", Model: "m", Size: 2, Chunk: 0, Chunks: 1, First: 0, Pieces: []byte("z"), Offsets: []int32{5, 1}}
	feed(m, good, &again, bad)
	a, _ := m.AttemptView("g/a")
	if a.Vocabulary.Pieces[0] != "a" || a.Vocabulary.Pieces[1] != "b" {
		t.Errorf("pieces %q, want the first registration's a, b", a.Vocabulary.Pieces)
	}
}
