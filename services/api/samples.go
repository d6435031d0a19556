package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
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

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/projections"
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
// a record batch: the stored chunks (about 1 MiB of whole samples each,
// docs/design.md §18.7) are turned into record batches of about 4 MiB as
// they are read, so the first bytes leave within a few chunks' reads and
// the client reads while the server gathers the rest.
const ArrowFlushTokens = 1 << 18

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
	// The samples stream from the store a chunk at a time. The first
	// chunk is read before the status goes out, so that a batch not
	// sealed is a 404; a problem met later can only cut the body short.
	var out samplesOut
	started := false
	start := func() error {
		if started {
			return nil
		}
		started = true
		var err error
		out, err = s.startSamples(w, run, seq, media)
		return err
	}
	found, err := s.Projector.SampleChunks(run, seq, func(chunk []byte) error {
		if err := start(); err != nil {
			return err
		}
		return out.write(chunk)
	})
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
			writeRaw(w, MediaNDJSON, legacy)
			return
		default:
			// A batch of rule version 1 kept only its NDJSON: the same
			// samples, read back.
			canonical, cerr := canonicalOfNDJSON(legacy)
			if cerr == nil {
				cerr = start()
			}
			if cerr == nil {
				cerr = out.write(canonical)
			}
			if cerr == nil {
				cerr = out.close()
			}
			err = cerr
		}
	}
	if err == nil {
		return
	}
	if !started || out == nil {
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

// samplesOut renders canonical samples, a chunk of whole samples at a
// time.
type samplesOut interface {
	write(chunk []byte) error
	close() error
}

// startSamples sends the status and headers of a samples answer in media
// and returns its renderer. An Arrow stream's schema names the batch's
// digest and rule version, from its manifest.
func (s *Service) startSamples(w http.ResponseWriter, run string, seq uint64, media string) (samplesOut, error) {
	var meta arrow.Metadata
	if media == MediaArrow {
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
		meta = arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"},
			[]string{run, strconv.FormatUint(seq, 10), m.Digest, strconv.Itoa(m.RuleVersion)})
	}
	w.Header().Set("Content-Type", media)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if media == MediaArrow {
		bw := bufio.NewWriterSize(w, 256<<10)
		a := newArrowSamples(bw, meta, MaxArrowBatchTokens)
		a.flushTokens = ArrowFlushTokens
		return &arrowOut{a: a, bw: bw}, nil
	}
	return ndjsonOut{w}, nil
}

type ndjsonOut struct{ w io.Writer }

func (o ndjsonOut) write(chunk []byte) error {
	_, err := projections.WriteNDJSON(o.w, chunk)
	return err
}

func (o ndjsonOut) close() error { return nil }

type arrowOut struct {
	a  *arrowSamples
	bw *bufio.Writer
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
