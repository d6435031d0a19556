package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// Media types of a batch's samples (docs/design.md §15.3). NDJSON, for
// people, is the default; Arrow IPC, for trainers, is asked for by Accept.
const (
	MediaNDJSON = "application/x-ndjson"
	MediaArrow  = "application/vnd.apache.arrow.stream"
)

// sampleMedia are the offers in the server's order of preference.
var sampleMedia = []string{MediaNDJSON, MediaArrow}

// MaxArrowBatchTokens bounds the tokens of one Arrow record batch: a batch
// of samples with more goes out as several record batches, split between
// samples, so list offsets stay within int32.
const MaxArrowBatchTokens = projector.MaxArrowBatchTokens

// What a samples stream holds on its client's behalf, each charged to the
// service's [httpx.StreamLimiter] before it is held:
//   - the stored chunk being sent: chunkReserve covers one of up to twice
//     [projector.SampleChunkBytes] (a chunk grows to that size and ends
//     with a whole sample); a larger one, a single sample larger than
//     that, is charged once read, before anything is rendered from it;
//   - the renderer's buffers, grown to fit each chunk before it renders
//     it: an NDJSON piece and the longest line, or the per-sample columns
//     of an Arrow record batch ([projector.ArrowBody.Held]; its token
//     columns go out a sample at a time, never gathered);
//   - the writer's buffer, samplesWriteBuffer.
//
// A stored Arrow body is sent from its file by the kernel (sendfile),
// through no buffer of the server's: it is charged one piece.
const (
	chunkReserve       = 2 * projector.SampleChunkBytes
	samplesWriteBuffer = 64 << 10
	// ndjsonPiece is how much NDJSON gathers before a write.
	ndjsonPiece = 64 << 10
)

func (s *Service) samples(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	run, seq, ok := batchParams(w, r)
	if !ok {
		return
	}
	// A client that accepts application/json (SDK 0.1 sends it on every
	// GET) gets the NDJSON: JSON values, one a line.
	media, ok := httpx.Negotiate(r, append(sampleMedia, "application/json")...)
	if !ok {
		httpx.WriteNotAcceptable(w, sampleMedia...)
		return
	}
	if media == "application/json" {
		media = MediaNDJSON
	}
	// ?compression=lz4 asks for the Arrow body with its repeated columns
	// compressed (docs/design.md §15.3); NDJSON has no such form.
	comp, err := projector.ParseCompression(r.URL.Query().Get("compression"))
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if comp != projector.Uncompressed && media != MediaArrow {
		httpx.WriteError(w, http.StatusBadRequest, "bad_request",
			fmt.Sprintf("compression=%s is for Arrow samples; this request's Accept header chose %s", comp, media))
		return
	}
	key, who := streamClient(r)
	st, err := s.streams.Open(w, key, who)
	if err != nil {
		httpx.WriteStreamError(w, err)
		return
	}
	closed := false
	defer func() {
		if !closed {
			st.Abandon()
		}
	}()
	ctx := r.Context()
	reserve := func(chunk int, render int64) error {
		return st.Reserve(ctx, max(chunkReserve, int64(chunk))+samplesWriteBuffer+render)
	}
	var started bool
	if media == MediaArrow {
		started, err = s.sendArrow(w, r, st, run, seq, comp, reserve)
	} else {
		started, err = s.sendNDJSON(w, st, run, seq, reserve)
	}
	if !started && errors.Is(err, errNotSealed) {
		notSealed(w, run, seq)
		return
	}
	if err == nil {
		closed = true
		_ = st.Close() // a failed flush is a client gone: nothing to tell it
		return
	}
	var se *httpx.StreamError
	switch {
	case !started && errors.As(err, &se):
		httpx.WriteStreamError(w, err)
		return
	case !started:
		s.fail(w, fmt.Errorf("samples of batch %d of %s: %w", seq, run, err))
		return
	}
	if s.Logger != nil {
		s.Logger.Warn("samples response cut short", "run", run, "batch", seq, "media", media, "err", err)
	}
	// The status is out: abort the response so the client sees a broken
	// body, never a short one that looks whole.
	panic(http.ErrAbortHandler)
}

// errNotSealed is a samples request's batch without samples: not sealed.
var errNotSealed = errors.New("api: batch not sealed")

// sendNDJSON streams the samples as NDJSON from the store a chunk at a
// time. The first chunk is read before the status goes out, so that a
// batch not sealed is errNotSealed; a problem met later can only cut the
// body short (started).
func (s *Service) sendNDJSON(w http.ResponseWriter, st *httpx.Stream, run string, seq uint64, reserve reserveFunc) (started bool, err error) {
	if err := reserve(0, 0); err != nil {
		return false, err
	}
	out := &ndjsonOut{w: st, reserveFn: reserve}
	start := func() {
		started = true
		w.Header().Set("Content-Type", MediaNDJSON)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
	}
	found, err := s.Projector.SampleChunks(run, seq, func(chunk []byte) error {
		if err := out.reserve(chunk); err != nil {
			return err
		}
		if !started {
			start()
		}
		return out.write(chunk)
	})
	if found || err != nil {
		return started, err
	}
	legacy, ok, err := s.Projector.LegacySamples(run, seq)
	if err != nil || !ok {
		return false, cmp.Or(err, errNotSealed)
	}
	// Stored whole by a projector of rule version 1: it is sent as
	// stored, charged as one chunk.
	if err := reserve(len(legacy), 0); err != nil {
		return false, err
	}
	start()
	_, err = st.Write(legacy)
	return true, err
}

// streamClient names the client a samples stream counts against: its
// token, or its address when the server checks no tokens.
func streamClient(r *http.Request) (key, who string) {
	if p := auth.FromContext(r.Context()); p != nil {
		return "token\x00" + p.Name, fmt.Sprintf("token %q", p.Name)
	}
	host := httpx.RemoteHost(r)
	return "address\x00" + host, "address " + host
}

// reserveFunc charges a stream for a stored chunk of the given length and
// render bytes of its renderer's buffers.
type reserveFunc func(chunk int, render int64) error

// ndjsonOut renders samples as NDJSON into one buffer, sized before each
// chunk for a piece and the chunk's longest line, and sends it a piece
// at a time.
type ndjsonOut struct {
	w         io.Writer
	buf       []byte
	reserveFn reserveFunc
}

// ndjsonLineBound is the most bytes a sample's NDJSON line can take: 88
// a token (an int32 id, a mask byte, a float32 log-prob, an int64 version
// and a float32 temperature, each with its comma, at their longest), six
// per byte of its ids (escaped), and the members' names and scalars.
func ndjsonLineBound(v *projections.SampleView) int {
	return 88*v.Len + 6*(len(v.Group)+len(v.Attempt)) + 256
}

func (o *ndjsonOut) reserve(chunk []byte) error {
	longest := 0
	r := projections.NewSampleReader(chunk)
	for r.Next() {
		longest = max(longest, ndjsonLineBound(r.Sample()))
	}
	if err := r.Err(); err != nil {
		return err
	}
	need := ndjsonPiece + longest
	if need <= cap(o.buf) {
		return o.reserveFn(len(chunk), int64(cap(o.buf)))
	}
	if err := o.reserveFn(len(chunk), int64(need)); err != nil {
		return err
	}
	o.buf = make([]byte, 0, need)
	return nil
}

// write renders chunk; the buffer is below a piece before each line,
// so it never outgrows what reserve sized it for.
func (o *ndjsonOut) write(chunk []byte) error {
	r := projections.NewSampleReader(chunk)
	buf := o.buf[:0]
	for r.Next() {
		var err error
		if buf, err = r.Sample().AppendNDJSON(buf); err != nil {
			return err
		}
		if len(buf) >= ndjsonPiece {
			if _, err := o.w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	if len(buf) > 0 {
		if _, err := o.w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// SamplesSchema is the Arrow schema of a batch's samples
// ([projector.ArrowSchema]).
func SamplesSchema(meta arrow.Metadata) *arrow.Schema { return projector.ArrowSchema(meta) }

// WriteArrowSamples writes canonical binary samples to w as an Arrow IPC
// stream of [SamplesSchema]: one record batch, or, past
// [MaxArrowBatchTokens], a few split between samples; the bytes the
// samples route serves for them ([projector.ArrowBody]).
func WriteArrowSamples(w io.Writer, canonical []byte, meta arrow.Metadata) error {
	src := func(fn func([]byte) error) error { return fn(canonical) }
	body, err := projector.PlanArrowBody(meta, src)
	if err != nil {
		return err
	}
	return body.Render(w, src)
}

// canonicalOfNDJSON reads the NDJSON samples a rule version 1 projector
// stored back into the canonical binary form.
func canonicalOfNDJSON(ndjson []byte) ([]byte, error) {
	var out []byte
	dec := json.NewDecoder(bytes.NewReader(ndjson))
	for line := 1; ; line++ {
		var l struct {
			Group           string    `json:"group"`
			Attempt         string    `json:"attempt"`
			Segment         int64     `json:"segment"`
			TokenIDs        []int32   `json:"token_ids"`
			LossMask        []int8    `json:"loss_mask"`
			RolloutLogprobs []float32 `json:"rollout_logprobs"`
			PolicyVersions  []int64   `json:"policy_versions"`
			Advantage       float64   `json:"advantage"`
		}
		if err := dec.Decode(&l); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("stored NDJSON sample %d: %w", line, err)
		}
		s := projections.Sample{Group: l.Group, Attempt: l.Attempt, Segment: l.Segment, TokenIDs: l.TokenIDs,
			LossMask: make([]uint8, len(l.LossMask)), RolloutLogprobs: l.RolloutLogprobs, PolicyVersions: l.PolicyVersions,
			Advantage: l.Advantage}
		for i, m := range l.LossMask {
			s.LossMask[i] = uint8(m)
		}
		var err error
		if out, err = projections.AppendSample(out, &s); err != nil {
			return nil, fmt.Errorf("stored NDJSON sample %d: %w", line, err)
		}
	}
	return out, nil
}
