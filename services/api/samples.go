package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

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
// samples, so the server gathers at most this many tokens' columns at a
// time (17 bytes a token) and list offsets stay within int32.
const MaxArrowBatchTokens = 1 << 26

// ArrowFlushTokens is how many tokens the server gathers before it writes
// a record batch. The stored chunks (about 1 MiB of whole samples each,
// some 60,000 tokens, docs/design.md §18.7) hold more, so each is written
// as a record batch as soon as it is read: the first bytes leave within a
// chunk's read, the client reads while the server gathers the rest, and a
// stream holds one chunk's columns at a time.
const ArrowFlushTokens = 1 << 15

// What a samples stream holds on its client's behalf, each charged to the
// service's [httpx.StreamLimiter] before it is held:
//   - the stored chunk being sent: chunkReserve covers one of up to twice
//     [projector.SampleChunkBytes] (a chunk grows to that size and ends
//     with a whole sample); a larger one, a single sample larger than
//     that, is charged once read, before anything is rendered from it;
//   - the renderer's buffers, grown to fit each chunk before it renders
//     it: Arrow's columns, or an NDJSON piece and the longest line;
//   - the writer's buffer, samplesWriteBuffer.
const (
	chunkReserve       = 2 * projector.SampleChunkBytes
	samplesWriteBuffer = 64 << 10
	// ndjsonPiece is how much NDJSON gathers before a write.
	ndjsonPiece = 64 << 10
	// arrowSlack covers the IPC writer's own allocations for one record
	// batch (its flatbuffer metadata).
	arrowSlack = 64 << 10
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
	if err := reserve(0, 0); err != nil {
		httpx.WriteStreamError(w, err)
		return
	}
	// The samples stream from the store a chunk at a time. The first
	// chunk is read before the status goes out, so that a batch not
	// sealed is a 404; a problem met later can only cut the body short.
	var out samplesOut
	started := false
	send := func(chunk []byte) error {
		if out == nil {
			var err error
			if out, err = s.newSamplesOut(st, run, seq, media, reserve); err != nil {
				return err
			}
		}
		if err := out.reserve(chunk); err != nil {
			return err
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", media)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		return out.write(chunk)
	}
	found, err := s.Projector.SampleChunks(run, seq, send)
	if err == nil && found {
		err = out.close()
	}
	if !found && err == nil {
		legacy, ok, lerr := s.Projector.LegacySamples(run, seq)
		switch {
		case lerr != nil:
			err = lerr
		case !ok:
			notSealed(w, run, seq)
			return
		case media == MediaNDJSON:
			// Stored whole by a projector of rule version 1: it is sent
			// as stored, charged as one chunk.
			if err = reserve(len(legacy), 0); err == nil {
				started = true
				w.Header().Set("Content-Type", MediaNDJSON)
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(http.StatusOK)
				_, err = st.Write(legacy)
			}
		default:
			// A batch of rule version 1 kept only its NDJSON: the same
			// samples, read back.
			var canonical []byte
			if err = reserve(2*len(legacy), 0); err == nil {
				canonical, err = canonicalOfNDJSON(legacy)
			}
			if err == nil {
				err = send(canonical)
			}
			if err == nil {
				err = out.close()
			}
		}
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

// streamClient names the client a samples stream counts against: its
// token, or its address when the server checks no tokens.
func streamClient(r *http.Request) (key, who string) {
	if p := auth.FromContext(r.Context()); p != nil {
		return "token\x00" + p.Name, fmt.Sprintf("token %q", p.Name)
	}
	host := httpx.RemoteHost(r)
	return "address\x00" + host, "address " + host
}

// samplesOut renders canonical samples, a chunk of whole samples at a
// time: reserve charges what rendering chunk will hold, write renders and
// sends it.
type samplesOut interface {
	reserve(chunk []byte) error
	write(chunk []byte) error
	close() error
}

// reserveFunc charges a stream for a stored chunk of the given length and
// render bytes of its renderer's buffers.
type reserveFunc func(chunk int, render int64) error

// newSamplesOut returns the renderer of a samples answer in media,
// writing to st. An Arrow stream's schema names the batch's digest and
// rule version, from its manifest.
func (s *Service) newSamplesOut(st *httpx.Stream, run string, seq uint64, media string, reserve reserveFunc) (samplesOut, error) {
	if media != MediaArrow {
		return &ndjsonOut{w: st, reserveFn: reserve}, nil
	}
	manifest, found, err := s.Projector.Manifest(run, seq)
	if err != nil || !found {
		return nil, fmt.Errorf("manifest of batch %d of %s: found %v: %v", seq, run, found, err)
	}
	var m struct {
		Digest      string `json:"digest"`
		RuleVersion int    `json:"rule_version"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest of batch %d of %s: %w", seq, run, err)
	}
	meta := arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"},
		[]string{run, strconv.FormatUint(seq, 10), m.Digest, strconv.Itoa(m.RuleVersion)})
	bw := bufio.NewWriterSize(st, samplesWriteBuffer)
	a := newArrowSamples(bw, meta, MaxArrowBatchTokens)
	a.flushTokens = ArrowFlushTokens
	return &arrowOut{a: a, bw: bw, reserveFn: reserve}, nil
}

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

func (o *ndjsonOut) close() error { return nil }

type arrowOut struct {
	a         *arrowSamples
	bw        *bufio.Writer
	reserveFn reserveFunc
}

func (o *arrowOut) reserve(chunk []byte) error {
	n, err := needOf(chunk)
	if err != nil {
		return err
	}
	if err := o.reserveFn(len(chunk), o.a.cols.bytesAfter(n)+arrowSlack); err != nil {
		return err
	}
	o.a.cols.grow(n)
	return nil
}

func (o *arrowOut) write(chunk []byte) error { return o.a.write(chunk) }

func (o *arrowOut) close() error {
	if err := o.a.close(); err != nil {
		return err
	}
	return o.bw.Flush()
}

// SamplesSchema is the Arrow schema of a batch's samples: one row per
// sample (attempt and training segment), in the canonical order. loss_mask
// is uint8, the canonical form's byte (0 or 1), which NumPy and torch view
// as bool without a copy; Arrow's own bool is bit-packed and would need
// one. policy_versions is int64, the canonical form's and the catalogue's
// range, so no batch needs a narrower type checked against its values.
// A batch of rule version 4 on has a last column, temperatures (float32,
// each token's sampling temperature), as its samples do.
func SamplesSchema(meta arrow.Metadata) *arrow.Schema {
	fields := []arrow.Field{
		{Name: "group", Type: arrow.BinaryTypes.String},
		{Name: "attempt", Type: arrow.BinaryTypes.String},
		{Name: "segment", Type: arrow.PrimitiveTypes.Int32},
		{Name: "advantage", Type: arrow.PrimitiveTypes.Float64},
		{Name: "token_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
		{Name: "loss_mask", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)},
		{Name: "rollout_logprobs", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
		{Name: "policy_versions", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64)},
	}
	if withTemperatures(meta) {
		fields = append(fields, arrow.Field{Name: "temperatures", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)})
	}
	return arrow.NewSchema(fields, &meta)
}

// withTemperatures says whether the samples of a batch with this metadata
// carry temperatures: rule version 4 on.
func withTemperatures(meta arrow.Metadata) bool {
	i := meta.FindKey("rule_version")
	if i < 0 {
		return false
	}
	v, err := strconv.Atoi(meta.Values()[i])
	return err == nil && v >= 4
}

// WriteArrowSamples writes canonical binary samples to w as an Arrow IPC
// stream of [SamplesSchema]: one record batch, or, past
// [MaxArrowBatchTokens], a few split between samples.
func WriteArrowSamples(w io.Writer, canonical []byte, meta arrow.Metadata) error {
	return writeArrowSamples(w, canonical, meta, MaxArrowBatchTokens)
}

func writeArrowSamples(w io.Writer, canonical []byte, meta arrow.Metadata, maxTokens int) error {
	a := newArrowSamples(w, meta, maxTokens)
	if err := a.write(canonical); err != nil {
		return err
	}
	return a.close()
}

// arrowSamples gathers the columns of samples as they come, chunk by
// chunk, and writes a record batch when the next sample would take it past
// maxTokens, after a chunk that brought it to flushTokens (when set), and
// at the end: each record batch's columns are gathered once and written,
// and their memory serves the next one.
type arrowSamples struct {
	iw          *ipc.Writer
	schema      *arrow.Schema
	maxTokens   int
	flushTokens int
	wrote       bool
	cols        arrowColumns
}

type arrowColumns struct {
	groups, attempts         []byte
	groupOff, attemptOff     []int32
	segments                 []int32
	advantages               []float64
	listOff                  []int32
	ids, mask, lps, versions []byte
	// temps are the temperatures, gathered when the schema has them.
	temps     []byte
	withTemps bool
}

// colNeed is what one chunk adds to the columns.
type colNeed struct{ samples, tokens, groups, attempts int }

// needOf reads what chunk's samples add to the columns, without copying
// them.
func needOf(chunk []byte) (colNeed, error) {
	var n colNeed
	r := projections.NewSampleReader(chunk)
	for r.Next() {
		v := r.Sample()
		n.samples++
		n.tokens += v.Len
		n.groups += len(v.Group)
		n.attempts += len(v.Attempt)
	}
	return n, r.Err()
}

// bytesAfter is what the columns hold once grown to take n more: their
// capacity, and the copies of the fixed-width columns flush makes.
func (c *arrowColumns) bytesAfter(n colNeed) int64 {
	capAfter := func(length, capacity, more int) int64 { return int64(max(capacity, length+more)) }
	perSample := 4*(capAfter(len(c.groupOff), cap(c.groupOff), n.samples)+capAfter(len(c.attemptOff), cap(c.attemptOff), n.samples)+
		capAfter(len(c.segments), cap(c.segments), n.samples)+capAfter(len(c.listOff), cap(c.listOff), n.samples)) +
		8*capAfter(len(c.advantages), cap(c.advantages), n.samples)
	return 2*perSample + capAfter(len(c.groups), cap(c.groups), n.groups) + capAfter(len(c.attempts), cap(c.attempts), n.attempts) +
		capAfter(len(c.ids), cap(c.ids), 4*n.tokens) + capAfter(len(c.mask), cap(c.mask), n.tokens) +
		capAfter(len(c.lps), cap(c.lps), 4*n.tokens) + capAfter(len(c.versions), cap(c.versions), 8*n.tokens) +
		c.tempsAfter(n)
}

func (c *arrowColumns) tempsAfter(n colNeed) int64 {
	if !c.withTemps {
		return 0
	}
	return int64(max(cap(c.temps), len(c.temps)+4*n.tokens))
}

// grow makes room in the columns for n more, exactly, so appending a
// chunk never reallocates them.
func (c *arrowColumns) grow(n colNeed) {
	c.groups, c.attempts = growBy(c.groups, n.groups), growBy(c.attempts, n.attempts)
	c.groupOff, c.attemptOff = growBy(c.groupOff, n.samples), growBy(c.attemptOff, n.samples)
	c.segments, c.listOff = growBy(c.segments, n.samples), growBy(c.listOff, n.samples)
	c.advantages = growBy(c.advantages, n.samples)
	c.ids, c.mask = growBy(c.ids, 4*n.tokens), growBy(c.mask, n.tokens)
	c.lps, c.versions = growBy(c.lps, 4*n.tokens), growBy(c.versions, 8*n.tokens)
	if c.withTemps {
		c.temps = growBy(c.temps, 4*n.tokens)
	}
}

func growBy[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([]T, len(s), len(s)+n)
	copy(ns, s)
	return ns
}

func newArrowSamples(w io.Writer, meta arrow.Metadata, maxTokens int) *arrowSamples {
	schema := SamplesSchema(meta)
	a := &arrowSamples{iw: ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator)),
		schema: schema, maxTokens: maxTokens}
	a.cols.withTemps = withTemperatures(meta)
	a.reset()
	return a
}

// reset empties the columns, keeping their memory: a written record
// batch no longer refers to it.
func (a *arrowSamples) reset() {
	c := &a.cols
	c.groups, c.attempts = c.groups[:0], c.attempts[:0]
	c.groupOff, c.attemptOff, c.listOff = append(c.groupOff[:0], 0), append(c.attemptOff[:0], 0), append(c.listOff[:0], 0)
	c.segments, c.advantages = c.segments[:0], c.advantages[:0]
	c.ids, c.mask, c.lps, c.versions, c.temps = c.ids[:0], c.mask[:0], c.lps[:0], c.versions[:0], c.temps[:0]
}

func (a *arrowSamples) write(chunk []byte) error {
	r := projections.NewSampleReader(chunk)
	for r.Next() {
		v := r.Sample()
		if v.Len > a.maxTokens {
			return fmt.Errorf("api: sample of %s segment %d has %d tokens, more than one Arrow record batch holds (%d)", v.Attempt, v.Segment, v.Len, a.maxTokens)
		}
		if v.Segment < math.MinInt32 || v.Segment > math.MaxInt32 {
			return fmt.Errorf("api: segment %d of %s is outside int32", v.Segment, v.Attempt)
		}
		c := &a.cols
		if len(c.segments) > 0 && len(c.mask)+v.Len > a.maxTokens {
			if err := a.flush(); err != nil {
				return err
			}
			c = &a.cols
		}
		c.groups = append(c.groups, v.Group...)
		c.attempts = append(c.attempts, v.Attempt...)
		c.groupOff, c.attemptOff = append(c.groupOff, int32(len(c.groups))), append(c.attemptOff, int32(len(c.attempts)))
		c.segments, c.advantages = append(c.segments, int32(v.Segment)), append(c.advantages, v.Advantage)
		c.ids = appendNative(c.ids, v.TokenIDs, 4)
		c.mask = append(c.mask, v.LossMask...)
		c.lps = appendNative(c.lps, v.Logprobs, 4)
		c.versions = appendNative(c.versions, v.PolicyVersions, 8)
		if c.withTemps {
			for i := range v.Len {
				c.temps = binary.NativeEndian.AppendUint32(c.temps, math.Float32bits(v.Temperature(i)))
			}
		}
		c.listOff = append(c.listOff, int32(len(c.mask)))
	}
	if err := r.Err(); err != nil {
		return err
	}
	if a.flushTokens > 0 && len(a.cols.mask) >= a.flushTokens {
		return a.flush()
	}
	return nil
}

func (a *arrowSamples) close() error {
	if len(a.cols.segments) > 0 || !a.wrote {
		if err := a.flush(); err != nil {
			return err
		}
	}
	return a.iw.Close()
}

// flush writes the gathered samples as one record batch.
func (a *arrowSamples) flush() error {
	c := &a.cols
	n, tokens := len(c.segments), len(c.mask)
	offsets := bytesOf(c.listOff)
	list := func(typ arrow.DataType, elem arrow.DataType, values []byte) arrow.Array {
		child := array.NewData(elem, tokens, []*memory.Buffer{nil, memory.NewBufferBytes(values)}, nil, 0, 0)
		defer child.Release()
		d := array.NewData(typ, n, []*memory.Buffer{nil, memory.NewBufferBytes(offsets)}, []arrow.ArrayData{child}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	str := func(off []int32, data []byte) arrow.Array {
		d := array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{nil, memory.NewBufferBytes(bytesOf(off)), memory.NewBufferBytes(data)}, nil, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	prim := func(typ arrow.DataType, values []byte) arrow.Array {
		d := array.NewData(typ, n, []*memory.Buffer{nil, memory.NewBufferBytes(values)}, nil, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	fields := a.schema.Fields()
	cols := []arrow.Array{
		str(c.groupOff, c.groups),
		str(c.attemptOff, c.attempts),
		prim(arrow.PrimitiveTypes.Int32, bytesOf(c.segments)),
		prim(arrow.PrimitiveTypes.Float64, bytesOf(c.advantages)),
		list(fields[4].Type, arrow.PrimitiveTypes.Int32, c.ids),
		list(fields[5].Type, arrow.PrimitiveTypes.Uint8, c.mask),
		list(fields[6].Type, arrow.PrimitiveTypes.Float32, c.lps),
		list(fields[7].Type, arrow.PrimitiveTypes.Int64, c.versions),
	}
	if c.withTemps {
		cols = append(cols, list(fields[8].Type, arrow.PrimitiveTypes.Float32, c.temps))
	}
	rec := array.NewRecordBatch(a.schema, cols, int64(n))
	for _, col := range cols {
		col.Release()
	}
	defer rec.Release()
	a.wrote = true
	a.reset()
	return a.iw.Write(rec)
}

// appendNative appends little-endian values of the given width in the
// host's byte order, which Arrow buffers are in.
func appendNative(dst, le []byte, width int) []byte {
	if !endian.IsBigEndian {
		return append(dst, le...)
	}
	start := len(dst)
	dst = append(dst, le...)
	for i := start; i < len(dst); i += width {
		for a, b := i, i+width-1; a < b; a, b = a+1, b-1 {
			dst[a], dst[b] = dst[b], dst[a]
		}
	}
	return dst
}

// bytesOf is the host-order bytes of fixed-width values.
func bytesOf[T int32 | float64](v []T) []byte {
	var b bytes.Buffer
	b.Grow(binary.Size(v))
	_ = binary.Write(&b, binary.NativeEndian, v)
	return b.Bytes()
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
