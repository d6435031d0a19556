package explore

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rolloutledger/rolloutledger/events"
)

// vocabulary is an engine's vocabulary as its vocabulary.registered facts
// (docs/design.md §18.10) brought it, chunk by chunk: the first of each
// chunk number counts.
type vocabulary struct {
	engine, model string
	size          int64
	chunks        int
	got           map[int]bool
	pieces        []string // by token id; "" where no chunk brought it
	known         []bool
}

// maxVocabulary bounds the token ids a vocabulary may name (the largest
// engines' have about 260 thousand).
const maxVocabulary = 1 << 22

// vocabularyFact folds one chunk of an engine's vocabulary.
func (m *Model) vocabularyFact(d *events.VocabularyRegistered) {
	v := m.vocabs[d.Engine]
	if v == nil {
		v = &vocabulary{engine: d.Engine, model: d.Model, size: d.Size, chunks: d.Chunks, got: map[int]bool{}}
		m.vocabs[d.Engine] = v
		m.vocabOrder = append(m.vocabOrder, d.Engine)
	}
	if v.got[d.Chunk] || d.Size != v.size || d.Chunks != v.chunks {
		// A chunk again, or one of another registration of the engine:
		// the first registration stands.
		return
	}
	v.got[d.Chunk] = true
	end := int64(d.First) + int64(len(d.Offsets))
	if end > v.size || end > maxVocabulary {
		return // the catalogue refuses the first; the second is not a vocabulary
	}
	if int64(len(v.pieces)) < end {
		v.pieces = slices.Grow(v.pieces, int(end)-len(v.pieces))[:end]
		v.known = slices.Grow(v.known, int(end)-len(v.known))[:end]
	}
	prev := int32(0)
	for i, off := range d.Offsets {
		if off < prev || int(off) > len(d.Pieces) {
			return // offsets that do not fit the pieces: the rest is unknown
		}
		id := int(d.First) + i
		v.pieces[id], v.known[id] = string(d.Pieces[prev:off]), true
		prev = off
	}
}

// vocabularyOf is the vocabulary to decode an engine's tokens with: the
// engine's own, else the run's only one; nil when there is none.
func (m *Model) vocabularyOf(engine string) *vocabulary {
	if v := m.vocabs[engine]; v != nil {
		return v
	}
	if len(m.vocabOrder) == 1 {
		return m.vocabs[m.vocabOrder[0]]
	}
	return nil
}

// Vocabulary is the part of a vocabulary an attempt view needs: the pieces
// of the token ids its turns hold.
type Vocabulary struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	Size   int64  `json:"size"`
	// Complete says every chunk has arrived; ids of missing chunks have no
	// piece.
	Complete bool `json:"complete"`
	// Pieces maps each token id of the attempt to its piece, made
	// readable: bytes that are not UTF-8 are written <0xNN>.
	Pieces map[int32]string `json:"pieces"`
}

// decode is the vocabulary's pieces of ids.
func (v *vocabulary) decode(turns []TurnView) *Vocabulary {
	out := &Vocabulary{Engine: v.engine, Model: v.model, Size: v.size, Complete: len(v.got) == v.chunks, Pieces: map[int32]string{}}
	for _, t := range turns {
		for _, id := range t.TokenIDs {
			if _, done := out.Pieces[id]; done || id < 0 || int(id) >= len(v.known) || !v.known[id] {
				continue
			}
			out.Pieces[id] = readable(v.pieces[id])
		}
	}
	return out
}

// readable is a piece as text: invalid UTF-8 bytes (a piece may hold part
// of a character) written <0xNN>.
func readable(p string) string {
	if utf8.ValidString(p) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		if r == utf8.RuneError && n <= 1 {
			fmt.Fprintf(&b, "<0x%02X>", p[i])
			i++
			continue
		}
		b.WriteString(p[i : i+n])
		i += n
	}
	return b.String()
}
