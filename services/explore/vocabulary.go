package explore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// add folds one chunk that counts (the first of its number, of the
// engine's first registration).
func (v *vocabulary) add(d *events.VocabularyRegistered) {
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

// vocabCache keeps the vocabularies decoded from the records, by run and
// engine, as of how many chunks they held: a vocabulary is read once, not
// per attempt view.
type vocabCache struct {
	mu sync.Mutex
	m  map[string]*vocabulary
}

// maxCachedVocabularies bounds the vocabularies a cache keeps.
const maxCachedVocabularies = 16

// vocabularyOf is the vocabulary to decode an engine's tokens with: the
// engine's own, else the run's only one; nil when there is none.
func (s *Snapshot) vocabularyOf(engine string) (*vocabulary, error) {
	if !slices.Contains(s.sum.Engines, engine) {
		if len(s.sum.Engines) != 1 {
			return nil, nil
		}
		engine = s.sum.Engines[0]
	}
	rec, err := getJSON[vocabRec](s.r, idKey(kVocab, engine))
	if err != nil || rec == nil {
		return nil, err
	}
	ck := s.run + "\x00" + engine + "\x00" + strconv.Itoa(len(rec.Got))
	c := s.vocabs
	c.mu.Lock()
	v := c.m[ck]
	c.mu.Unlock()
	if v != nil {
		return v, nil
	}
	v = &vocabulary{engine: engine, model: rec.Model, size: rec.Size, chunks: rec.Chunks, got: map[int]bool{}}
	for _, n := range rec.Got {
		raw, ok, err := s.r.Get(append(append(idKey(kVocabChunk, engine), 0), u64(uint64(int64(n)))...))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("explore: chunk %d of %s's vocabulary is not stored", n, engine)
		}
		_, ev, err := readRaw(raw)
		if err != nil {
			return nil, err
		}
		if d, ok := ev.Data.(*events.VocabularyRegistered); ok {
			v.add(d)
		}
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedVocabularies {
		c.m = map[string]*vocabulary{}
	}
	c.m[ck] = v
	c.mu.Unlock()
	return v, nil
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
