package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// The vocabulary's bounds: a chunk holds at most vocabChunkTokens tokens
// and vocabChunkBytes of pieces (its record stays far below
// events.MaxRecordBytes even in base64); the engine is asked for
// vocabBatch pieces per request; a vocabulary that could not be fetched is
// asked for again no sooner than vocabRetry later.
const (
	vocabChunkTokens = 8192
	vocabChunkBytes  = 256 << 10
	vocabBatch       = 4096
	vocabMaxTokens   = 1 << 22
	vocabRetry       = time.Minute
)

// vocabulary is an engine's vocabulary: each token's piece, its bytes as
// the engine decodes it.
type vocabulary struct {
	engine string
	model  string
	pieces [][]byte
}

// vocabID is the fact id of a chunk: a pure function of run, engine,
// model and chunk, so registering again (a retry, a restart, a second
// upstream serving the same model) is a duplicate the ledger drops.
func vocabID(run, engine, model string, chunk int) string {
	return uuid.NewSHA1(factNamespace, fmt.Appendf(nil, "%s\x00vocabulary.registered\x00%s\x00%s\x00%d", run, engine, model, chunk)).String()
}

// chunks cuts the vocabulary into facts, in order, each within the bounds;
// the cut depends on the pieces alone, so the same vocabulary always gives
// the same facts.
func (v *vocabulary) chunks() []*events.VocabularyRegistered {
	var out []*events.VocabularyRegistered
	for first := 0; first < len(v.pieces); {
		c := &events.VocabularyRegistered{Engine: v.engine, Model: v.model, Size: int64(len(v.pieces)), Chunk: len(out), First: int32(first)}
		n := 0
		for first+n < len(v.pieces) && n < vocabChunkTokens {
			p := v.pieces[first+n]
			if n > 0 && len(c.Pieces)+len(p) > vocabChunkBytes {
				break
			}
			c.Pieces = append(c.Pieces, p...)
			c.Offsets = append(c.Offsets, int32(len(c.Pieces)))
			n++
		}
		out = append(out, c)
		first += n
	}
	for _, c := range out {
		c.Chunks = len(out)
	}
	return out
}

// fetchLlamaVocabulary asks llama-server for its vocabulary: the model
// and its token count from GET /v1/models (meta.n_vocab), then every
// token's piece from POST /tokenize with the ids themselves as content
// and with_pieces, vocabBatch ids at a time. A piece that is not valid
// UTF-8 (a byte token) comes as its bytes, so every piece is exact.
func fetchLlamaVocabulary(ctx context.Context, c *http.Client, base string) (*vocabulary, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	var models struct {
		Data []struct {
			ID   string `json:"id"`
			Meta struct {
				NVocab int64 `json:"n_vocab"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := getJSON(c, req, &models); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(models.Data) == 0 || models.Data[0].ID == "" {
		return nil, errors.New("GET /v1/models lists no model")
	}
	m := models.Data[0]
	if m.Meta.NVocab <= 0 || m.Meta.NVocab > vocabMaxTokens {
		return nil, fmt.Errorf("GET /v1/models gives n_vocab %d for %q, want 1 to %d", m.Meta.NVocab, m.ID, vocabMaxTokens)
	}
	v := &vocabulary{engine: EngineLlamaCPP, model: m.ID, pieces: make([][]byte, 0, m.Meta.NVocab)}
	for first := int64(0); first < m.Meta.NVocab; first += vocabBatch {
		n := min(vocabBatch, m.Meta.NVocab-first)
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = first + int64(i)
		}
		var ans struct {
			Tokens []struct {
				ID    int64           `json:"id"`
				Piece json.RawMessage `json:"piece"`
			} `json:"tokens"`
		}
		if err := upstreamJSON(ctx, c, base, "/tokenize", map[string]any{"content": ids, "with_pieces": true}, &ans); err != nil {
			return nil, err
		}
		if int64(len(ans.Tokens)) != n {
			return nil, fmt.Errorf("/tokenize gave %d pieces for %d ids from %d", len(ans.Tokens), n, first)
		}
		for i, t := range ans.Tokens {
			if t.ID != ids[i] {
				return nil, fmt.Errorf("/tokenize gave the piece of token %d where %d was asked", t.ID, ids[i])
			}
			p, err := pieceBytes(t.Piece)
			if err != nil {
				return nil, fmt.Errorf("/tokenize: token %d: %w", t.ID, err)
			}
			v.pieces = append(v.pieces, p)
		}
	}
	return v, nil
}

// pieceBytes reads a llama.cpp piece: a string, or (not valid UTF-8) an
// array of its bytes.
func pieceBytes(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	var xs []int
	if err := json.Unmarshal(raw, &xs); err != nil {
		return nil, fmt.Errorf("the piece is neither text nor bytes: %s", clip(string(raw)))
	}
	out := make([]byte, len(xs))
	for i, x := range xs {
		if x < 0 || x > 255 {
			return nil, fmt.Errorf("byte %d of the piece is %d", i, x)
		}
		out[i] = byte(x)
	}
	return out, nil
}

func getJSON(c *http.Client, req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// registrar registers each run's vocabulary once, off the hot path: a
// recorded turn asks for its run (want), and one goroutine fetches the
// engine's vocabulary (once per upstream, then kept) and spools the chunks
// with a mark, so a restart does not spool them again.
type registrar struct {
	s     *Server
	jobs  chan vocabJob
	mu    sync.Mutex
	asked map[string]bool        // run NUL upstream: registered or queued
	vocab map[string]*vocabulary // upstream -> its vocabulary
	retry map[string]time.Time   // upstream -> no fetch before
	fetch func(ctx context.Context, base string) (*vocabulary, error)
}

type vocabJob struct{ run, upstream string }

// newRegistrar is nil for an engine whose routes give no token's bytes
// (vLLM, SGLang: the SDK registers their vocabulary) or when registering
// is turned off.
func newRegistrar(s *Server) *registrar {
	if s.o.NoVocabulary || s.o.Engine != EngineLlamaCPP {
		return nil
	}
	return &registrar{
		s: s, jobs: make(chan vocabJob, 1024),
		asked: map[string]bool{}, vocab: map[string]*vocabulary{}, retry: map[string]time.Time{},
		fetch: func(ctx context.Context, base string) (*vocabulary, error) {
			return fetchLlamaVocabulary(ctx, s.o.Client, base)
		},
	}
}

// want asks for run's vocabulary from upstream; it never blocks.
func (r *registrar) want(run, upstream string) {
	if r == nil {
		return
	}
	k := run + "\x00" + upstream
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asked[k] || r.s.now().Before(r.retry[upstream]) {
		return
	}
	select {
	case r.jobs <- vocabJob{run, upstream}:
		r.asked[k] = true
	default: // a full queue: a later turn of the run asks again
	}
}

// run serves the jobs until ctx ends.
func (r *registrar) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.jobs:
			outcome, err := r.register(ctx, j)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.mu.Lock()
				delete(r.asked, j.run+"\x00"+j.upstream)
				r.mu.Unlock()
				r.s.o.Logger.Warn("proxy: vocabulary not registered; a later turn of the run tries again", "run", j.run, "err", err)
			}
			r.s.m.vocabulary.WithLabelValues(outcome).Inc()
		}
	}
}

// register spools run's vocabulary unless the spool's mark says it was.
func (r *registrar) register(ctx context.Context, j vocabJob) (string, error) {
	r.mu.Lock()
	v := r.vocab[j.upstream]
	r.mu.Unlock()
	if v == nil {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		var err error
		v, err = r.fetch(fctx, j.upstream)
		cancel()
		if err != nil {
			r.mu.Lock()
			r.retry[j.upstream] = r.s.now().Add(vocabRetry)
			r.mu.Unlock()
			return "failed", fmt.Errorf("fetching the engine's vocabulary: %w", err)
		}
		r.mu.Lock()
		r.vocab[j.upstream] = v
		r.mu.Unlock()
	}
	mark := vocabMark(j.run, v.engine, v.model)
	done, err := r.s.sp.marked(mark)
	if err != nil {
		return "failed", err
	}
	if done {
		return "known", nil
	}
	at := r.s.now().UTC()
	var recs []pending
	for _, c := range v.chunks() {
		ev := events.Event{ID: vocabID(j.run, v.engine, v.model, c.Chunk), Run: j.run, Type: events.TypeVocabularyRegistered,
			V: events.CurrentVersion(events.TypeVocabularyRegistered), At: at, Source: r.s.o.Source, Data: c}
		rec, err := encodeChecked(ev)
		if err != nil {
			return "failed", fmt.Errorf("chunk %d: %w", c.Chunk, err)
		}
		recs = append(recs, pending{run: j.run, record: rec})
	}
	if err := r.s.sp.commitMarked(mark, recs); err != nil {
		return "failed", err
	}
	r.s.o.Logger.Info("proxy: vocabulary registered", "run", j.run, "model", v.model, "tokens", len(v.pieces), "chunks", len(recs))
	return "registered", nil
}

// vocabMark is the spool key saying a run's vocabulary of a model is
// spooled.
func vocabMark(run, engine, model string) []byte {
	return append([]byte{prefixVocab}, run+"\x00"+engine+"\x00"+model...)
}
