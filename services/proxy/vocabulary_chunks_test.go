package proxy

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// TestVocabularyChunks: a vocabulary is cut into chunks within the token
// and byte bounds, numbered from 0, that together hold every piece once,
// in order, and that encode as facts the ledger takes; the same
// vocabulary always gives the same facts.
func TestVocabularyChunks(t *testing.T) {
	many := func(n int, piece string) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte(piece)
		}
		return out
	}
	tests := []struct {
		name   string
		pieces [][]byte
		want   int // chunks
	}{
		{name: "one token", pieces: many(1, "a"), want: 1},
		{name: "exactly one chunk of tokens", pieces: many(vocabChunkTokens, "ab"), want: 1},
		{name: "one token over", pieces: many(vocabChunkTokens+1, "ab"), want: 2},
		{name: "cut by bytes", pieces: many(1000, strings.Repeat("x", 1000)), want: 4},
		{name: "empty and byte pieces", pieces: append(many(3, ""), []byte{0xb5}, []byte{0}, []byte("<|im_end|>")), want: 1},
		{name: "a large vocabulary", pieces: many(152064, "token"), want: 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &vocabulary{engine: EngineLlamaCPP, model: "m.gguf", pieces: tt.pieces}
			cs := v.chunks()
			if len(cs) != tt.want {
				t.Fatalf("got %d chunks, want %d", len(cs), tt.want)
			}
			next := 0
			for i, c := range cs {
				if c.Chunk != i || c.Chunks != len(cs) || c.Size != int64(len(tt.pieces)) || int(c.First) != next {
					t.Fatalf("chunk %d: chunk %d of %d, size %d, first %d; want chunk %d of %d, size %d, first %d", i, c.Chunk, c.Chunks, c.Size, c.First, i, len(cs), len(tt.pieces), next)
				}
				if len(c.Offsets) > vocabChunkTokens || len(c.Pieces) > vocabChunkBytes {
					t.Errorf("chunk %d: %d tokens, %d bytes of pieces, over the bounds", i, len(c.Offsets), len(c.Pieces))
				}
				start := int32(0)
				for j, end := range c.Offsets {
					if got, want := c.Pieces[start:end], tt.pieces[next+j]; !bytes.Equal(got, want) {
						t.Fatalf("token %d: piece %q, want %q", next+j, got, want)
					}
					start = end
				}
				next += len(c.Offsets)
				ev := events.Event{ID: vocabID("run-1", v.engine, v.model, c.Chunk), Run: "run-1", Type: events.TypeVocabularyRegistered,
					V: events.CurrentVersion(events.TypeVocabularyRegistered), At: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC), Source: DefaultSource, Data: c}
				if _, err := encodeChecked(ev); err != nil {
					t.Fatalf("chunk %d does not encode as the ledger takes it: %v", i, err)
				}
			}
			if next != len(tt.pieces) {
				t.Fatalf("the chunks hold %d tokens, want %d", next, len(tt.pieces))
			}
			again := v.chunks()
			for i := range cs {
				if !bytes.Equal(cs[i].Pieces, again[i].Pieces) || cs[i].First != again[i].First {
					t.Fatalf("chunk %d differs the second time", i)
				}
			}
		})
	}
	if vocabID("r", "llamacpp", "m", 0) == vocabID("r", "llamacpp", "m", 1) || vocabID("r", "llamacpp", "m", 0) == vocabID("r2", "llamacpp", "m", 0) {
		t.Error("chunk ids collide across chunks or runs")
	}
}
