package projector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/pierrec/lz4/v4"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A sealed batch's samples as trainers read them: one Apache Arrow IPC
// stream (docs/design.md §15.3) of one record batch (several only past
// [MaxArrowBatchTokens]), so that each column is one buffer a reader maps
// without a copy. [ArrowBody] lays the stream out from the samples'
// headers and writes it column after column, a pass over the canonical
// samples per column: it holds one chunk of them and the per-sample
// columns of one record batch, never the token columns, so the API can
// render a batch of any size with bounded memory and announce its length
// first. The projector writes the same bytes once at seal (bodyfile.go);
// the API serves that file, or renders them here for a batch without one.
//
// A body may also be asked for compressed ([LZ4]): the same stream with
// Arrow's buffer compression, which packs the columns a run repeats
// (loss masks, policy versions, temperatures: runs as long as a turn or a
// weight version) and leaves the rest as they are, so that a trainer
// moves about 8 bytes a token instead of 21 and still maps token ids and
// log-probs without a copy.

// Compression is the buffer compression of a body (docs/design.md §15.3).
type Compression uint8

const (
	// Uncompressed leaves every buffer as it is: what any Arrow reader
	// maps without a copy, and the default.
	Uncompressed Compression = iota
	// LZ4 is the IPC format's buffer compression with the LZ4 frame codec
	// (BodyCompression LZ4_FRAME, method BUFFER). Only the value buffers
	// of loss_mask, policy_versions and temperatures are compressed, each
	// when that saves at least an eighth of it; every other buffer is
	// stored as it is (an uncompressed length of -1, which the format
	// allows), so token ids and log-probs stay views of the body.
	LZ4
)

// ParseCompression reads a compression's name: "none" (or empty) or "lz4".
func ParseCompression(name string) (Compression, error) {
	switch name {
	case "", "none":
		return Uncompressed, nil
	case "lz4":
		return LZ4, nil
	}
	return 0, fmt.Errorf("compression %q is not one of none, lz4", name)
}

// String is the compression's name, as ParseCompression reads it.
func (c Compression) String() string {
	if c == LZ4 {
		return "lz4"
	}
	return "none"
}

// Suffix names the compression in a body's file name and ETag: empty for
// an uncompressed body, ".lz4" for a compressed one.
func (c Compression) Suffix() string {
	if c == LZ4 {
		return ".lz4"
	}
	return ""
}

// MaxArrowBatchTokens bounds the tokens of one Arrow record batch: a batch
// of samples with more is written as several record batches, split
// between samples, so list offsets stay within int32.
const MaxArrowBatchTokens = 1 << 26

// ArrowSchema is the Arrow schema of a batch's samples: one row per
// sample (attempt and training segment), in the canonical order. loss_mask
// is uint8, the canonical form's byte (0 or 1), which NumPy and torch view
// as bool without a copy; Arrow's own bool is bit-packed and would need
// one. policy_versions is int64, the canonical form's and the catalogue's
// range, so no batch needs a narrower type checked against its values.
// A batch of rule version 4 on has a last column, temperatures (float32,
// each token's sampling temperature), as its samples do.
func ArrowSchema(meta arrow.Metadata) *arrow.Schema {
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
	if ArrowWithTemperatures(meta) {
		fields = append(fields, arrow.Field{Name: "temperatures", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)})
	}
	return arrow.NewSchema(fields, &meta)
}

// ArrowWithTemperatures says whether the samples of a batch with this
// metadata carry temperatures: rule version 4 on.
func ArrowWithTemperatures(meta arrow.Metadata) bool {
	i := meta.FindKey("rule_version")
	if i < 0 {
		return false
	}
	v, err := strconv.Atoi(meta.Values()[i])
	return err == nil && v >= 4
}

// ArrowMetadata is the schema metadata of a batch's Arrow samples (run,
// seq, digest, rule_version), read from its manifest as served, and the
// digest.
func ArrowMetadata(run string, seq uint64, manifest []byte) (arrow.Metadata, string, error) {
	var m struct {
		Digest      string `json:"digest"`
		RuleVersion int    `json:"rule_version"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return arrow.Metadata{}, "", fmt.Errorf("projector: manifest of batch %d of %s: %w", seq, run, err)
	}
	return arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"},
		[]string{run, strconv.FormatUint(seq, 10), m.Digest, strconv.Itoa(m.RuleVersion)}), m.Digest, nil
}

// SampleSource calls fn with each chunk of a batch's canonical samples
// (whole samples, projections/samples.go), in order, and returns fn's
// first error. [ArrowBody] calls it once per pass; every pass must see
// the same samples.
type SampleSource func(fn func(chunk []byte) error) error

// ArrowBody is the layout of a batch's samples as an Arrow IPC stream:
// [PlanArrowBody] reads the samples' headers once, [ArrowBody.Size] is
// the stream's length and [ArrowBody.Render] writes it.
type ArrowBody struct {
	head    []byte // the schema message
	batches []arrowBatch
	temps   bool
	comp    Compression
	size    int64
	held    int64
}

// arrowBatch is one record batch of the stream: samples [first,
// first+samples) of the batch.
type arrowBatch struct {
	first, samples, tokens, groupBytes, attemptBytes int
	msg                                              []byte // the record batch message, framed and padded
	// packed is, for each token column of a compressed body, the length
	// of its values compressed, or -1 where they are stored as they are.
	packed [5]int64
}

// The IPC stream's framing (the Arrow columnar format's "encapsulated
// message"): a continuation marker, the metadata's padded length, the
// metadata flatbuffer padded to 8 bytes, the body; 0 length ends the
// stream.
const ipcContinuation = 0xFFFFFFFF

// Flatbuffer constants of Arrow's Message.fbs: metadata version V5, the
// RecordBatch header.
const (
	fbMetadataV5    = 4
	fbRecordBatch   = 3
	fbFieldsMessage = 5
	fbFieldsBatch   = 5
)

var errStopPass = errors.New("projector: pass over the samples done")

// PlanArrowBody lays out the Arrow IPC stream of the samples src yields,
// with meta as the schema's metadata. A sample of more than
// [MaxArrowBatchTokens] tokens, or whose segment is outside int32, is an
// error, as are malformed samples.
func PlanArrowBody(meta arrow.Metadata, src SampleSource) (*ArrowBody, error) {
	return planArrowBody(meta, src, MaxArrowBatchTokens, Uncompressed)
}

// PlanCompressedArrowBody is PlanArrowBody with the buffers compressed as
// c says. With [LZ4] it compresses the repeated columns once to learn
// their length (Render compresses them again, to the same bytes): a pass
// over the samples per column, holding a compressor's block and nothing
// of the columns.
func PlanCompressedArrowBody(meta arrow.Metadata, src SampleSource, c Compression) (*ArrowBody, error) {
	return planArrowBody(meta, src, MaxArrowBatchTokens, c)
}

func planArrowBody(meta arrow.Metadata, src SampleSource, maxTokens int, comp Compression) (*ArrowBody, error) {
	b := &ArrowBody{temps: ArrowWithTemperatures(meta), comp: comp}
	var head bytes.Buffer
	iw := ipc.NewWriter(&head, ipc.WithSchema(ArrowSchema(meta)))
	if err := iw.Close(); err != nil {
		return nil, err
	}
	// An empty stream is the schema message and the end marker.
	b.head = head.Bytes()[:head.Len()-8]
	cur := arrowBatch{}
	idx := 0
	err := src(func(chunk []byte) error {
		r := projections.NewSampleReader(chunk)
		for r.Next() {
			v := r.Sample()
			if v.Len > maxTokens {
				return fmt.Errorf("projector: sample of %s segment %d has %d tokens, more than one Arrow record batch holds (%d)", v.Attempt, v.Segment, v.Len, maxTokens)
			}
			if v.Segment < math.MinInt32 || v.Segment > math.MaxInt32 {
				return fmt.Errorf("projector: segment %d of %s is outside int32", v.Segment, v.Attempt)
			}
			if cur.samples > 0 && cur.tokens+v.Len > maxTokens {
				b.batches = append(b.batches, cur)
				cur = arrowBatch{first: idx}
			}
			cur.samples++
			cur.tokens += v.Len
			cur.groupBytes += len(v.Group)
			cur.attemptBytes += len(v.Attempt)
			if cur.groupBytes > math.MaxInt32 || cur.attemptBytes > math.MaxInt32 {
				return fmt.Errorf("projector: the ids of a record batch's samples exceed int32 offsets")
			}
			idx++
		}
		return r.Err()
	})
	if err != nil {
		return nil, err
	}
	// Even no samples are one record batch, of no rows.
	b.batches = append(b.batches, cur)
	b.size = int64(len(b.head)) + 8
	for i := range b.batches {
		rb := &b.batches[i]
		if err := b.pack(src, rb); err != nil {
			return nil, err
		}
		lens := b.bufferLengths(rb)
		var body int64
		for _, l := range lens {
			body += pad8(l)
		}
		rb.msg = recordBatchMessage(rb.samples, rb.tokens, rb.nodes(b.temps), lens, body, b.comp != Uncompressed)
		b.size += int64(len(rb.msg)) + body
		b.held = max(b.held, rb.heldBytes())
	}
	if b.comp != Uncompressed {
		b.held += lz4Held
	}
	return b, nil
}

// The LZ4 frames' block size, and what a compressor holds: its block and
// the block compressed.
const (
	lz4Block = lz4.Block256Kb
	lz4Held  = 2*256<<10 + 64<<10
)

// compressible says whether token column col is compressed in a
// compressed body: the mask, the versions and the temperatures.
func compressible(col int) bool { return col == 1 || col == 3 || col == 4 }

// pack sets rb.packed: for a compressed body, the compressed length of
// each compressible token column that an eighth or more is saved on, -1
// for every other column.
func (b *ArrowBody) pack(src SampleSource, rb *arrowBatch) error {
	for col, width := range tokenWidths(b.temps) {
		rb.packed[col] = -1
		raw := int64(width) * int64(rb.tokens)
		if b.comp == Uncompressed || !compressible(col) || raw == 0 {
			continue
		}
		n := &countedWriter{w: io.Discard}
		if err := b.compressColumn(n, src, rb, col); err != nil {
			return err
		}
		if 8+n.n <= raw-raw/8 {
			rb.packed[col] = n.n
		}
	}
	return nil
}

// compressColumn writes token column col of the record batch to w as one
// LZ4 frame. The same samples give the same bytes: the frame's options
// are fixed, and its blocks are cut by size, not by the writes.
func (b *ArrowBody) compressColumn(w io.Writer, src SampleSource, rb *arrowBatch, col int) error {
	zw := lz4.NewWriter(w)
	if err := zw.Apply(lz4.BlockSizeOption(lz4Block), lz4.BlockChecksumOption(false), lz4.ChecksumOption(false),
		lz4.CompressionLevelOption(lz4.Fast), lz4.ConcurrencyOption(1)); err != nil {
		return err
	}
	if err := b.column(zw, src, rb, col); err != nil {
		return err
	}
	return zw.Close()
}

// Size is the length of the stream in bytes.
func (b *ArrowBody) Size() int64 { return b.size }

// Held is the most memory Render holds besides the chunk src lends it:
// the per-sample columns of the largest record batch.
func (b *ArrowBody) Held() int64 { return b.held }

// Samples is the number of samples the stream holds.
func (b *ArrowBody) Samples() int {
	last := b.batches[len(b.batches)-1]
	return last.first + last.samples
}

// bufferLengths are the lengths of the record batch's buffers in the
// order of the IPC format, as the body holds them: in a compressed body
// every buffer that is not empty starts with its length uncompressed (8
// bytes, -1 when it is stored as it is).
func (b *ArrowBody) bufferLengths(rb *arrowBatch) []int64 {
	lens := rb.rawLengths(b.temps)
	if b.comp == Uncompressed {
		return lens
	}
	for i, l := range lens {
		if l > 0 {
			lens[i] = 8 + l
		}
	}
	for col := range tokenWidths(b.temps) {
		if i := tokenValues(col); lens[i] > 0 && rb.packed[col] >= 0 {
			lens[i] = 8 + rb.packed[col]
		}
	}
	return lens
}

// tokenValues is the index among a record batch's buffers of token column
// col's values: after the per-sample columns' ten buffers, each token
// column has four (its validity, its offsets, its child's validity, its
// values).
func tokenValues(col int) int { return 10 + 4*col + 3 }

// rawLengths are the lengths of the record batch's buffers uncompressed,
// in the order of the IPC format (each column's validity bitmap, absent,
// then its offsets and values; a list's child after its offsets).
func (rb *arrowBatch) rawLengths(temps bool) []int64 {
	n, t := int64(rb.samples), int64(rb.tokens)
	lens := []int64{
		0, 4 * (n + 1), int64(rb.groupBytes),
		0, 4 * (n + 1), int64(rb.attemptBytes),
		0, 4 * n,
		0, 8 * n,
	}
	for _, w := range tokenWidths(temps) {
		lens = append(lens, 0, 4*(n+1), 0, int64(w)*t)
	}
	return lens
}

// nodes are the field nodes' lengths: each column's, a list's child after
// it.
func (rb *arrowBatch) nodes(temps bool) []int64 {
	n, t := int64(rb.samples), int64(rb.tokens)
	out := []int64{n, n, n, n}
	for range tokenWidths(temps) {
		out = append(out, n, t)
	}
	return out
}

func (rb *arrowBatch) heldBytes() int64 {
	n := int64(rb.samples)
	return 3*4*(n+1) + int64(rb.groupBytes+rb.attemptBytes) + 12*n
}

// tokenWidths are the byte widths of the token columns: ids, mask,
// log-probs, versions, and temperatures when the schema has them.
func tokenWidths(temps bool) []int {
	if temps {
		return []int{4, 1, 4, 8, 4}
	}
	return []int{4, 1, 4, 8}
}

func pad8(n int64) int64 { return (n + 7) &^ 7 }

// recordBatchMessage is the framed Message flatbuffer of a record batch,
// built in the order arrow-go's IPC writer builds it, so an uncompressed
// stream is byte for byte what that writer writes for the same record
// batch. compressed adds the BodyCompression table: LZ4_FRAME and BUFFER,
// both the schema's defaults (so the table is empty).
func recordBatchMessage(rows, tokens int, nodes, lens []int64, body int64, compressed bool) []byte {
	b := flatbuffers.NewBuilder(0)
	var compression flatbuffers.UOffsetT
	if compressed {
		b.StartObject(2)
		compression = b.EndObject()
	}
	b.StartVector(16, len(nodes), 8)
	for i := len(nodes) - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(0) // null count
		b.PrependInt64(nodes[i])
	}
	nodesFB := b.EndVector(len(nodes))
	b.StartVector(16, len(lens), 8)
	offsets := make([]int64, len(lens))
	var off int64
	for i, l := range lens {
		offsets[i] = off
		off += pad8(l)
	}
	for i := len(lens) - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(lens[i])
		b.PrependInt64(offsets[i])
	}
	buffersFB := b.EndVector(len(lens))
	b.StartObject(fbFieldsBatch)
	b.PrependInt64Slot(0, int64(rows), 0)
	b.PrependUOffsetTSlot(1, nodesFB, 0)
	b.PrependUOffsetTSlot(2, buffersFB, 0)
	if compressed {
		b.PrependUOffsetTSlot(3, compression, 0)
	}
	batch := b.EndObject()
	b.StartObject(fbFieldsMessage)
	b.PrependInt16Slot(0, fbMetadataV5, 0)
	b.PrependByteSlot(1, fbRecordBatch, 0)
	b.PrependUOffsetTSlot(2, batch, 0)
	b.PrependInt64Slot(3, body, 0)
	b.Finish(b.EndObject())
	fb := b.FinishedBytes()
	padded := pad8(int64(len(fb)) + 8)
	msg := make([]byte, 8, padded)
	binary.LittleEndian.PutUint32(msg, ipcContinuation)
	binary.LittleEndian.PutUint32(msg[4:], uint32(padded-8))
	msg = append(msg, fb...)
	return msg[:padded]
}

var zeros [8]byte

// asIs is the uncompressed length that marks a buffer of a compressed
// body stored as it is.
var asIs = binary.LittleEndian.AppendUint64(nil, math.MaxUint64)

// Render writes the stream to w (buffer it: the columns go out a sample
// at a time), reading the samples from src once for the per-sample
// columns of each record batch and once per token column. src must yield
// the samples PlanArrowBody read.
func (b *ArrowBody) Render(w io.Writer, src SampleSource) error {
	if _, err := w.Write(b.head); err != nil {
		return err
	}
	for i := range b.batches {
		if err := b.renderBatch(w, src, &b.batches[i]); err != nil {
			return err
		}
	}
	var end [8]byte
	binary.LittleEndian.PutUint32(end[:], ipcContinuation)
	_, err := w.Write(end[:])
	return err
}

func (b *ArrowBody) renderBatch(w io.Writer, src SampleSource, rb *arrowBatch) error {
	if _, err := w.Write(rb.msg); err != nil {
		return err
	}
	compressed := b.comp != Uncompressed
	put := func(p []byte) error {
		if compressed && len(p) > 0 {
			if _, err := w.Write(asIs); err != nil {
				return err
			}
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		_, err := w.Write(zeros[:pad8(int64(len(p)))-int64(len(p))])
		return err
	}
	n := rb.samples
	groupOff, attemptOff, listOff := make([]byte, 0, 4*(n+1)), make([]byte, 0, 4*(n+1)), make([]byte, 0, 4*(n+1))
	groups, attempts := make([]byte, 0, rb.groupBytes), make([]byte, 0, rb.attemptBytes)
	segments, advantages := make([]byte, 0, 4*n), make([]byte, 0, 8*n)
	ne := binary.NativeEndian
	groupOff, attemptOff, listOff = ne.AppendUint32(groupOff, 0), ne.AppendUint32(attemptOff, 0), ne.AppendUint32(listOff, 0)
	tokens := 0
	err := b.pass(src, rb, func(v *projections.SampleView) error {
		groups, attempts = append(groups, v.Group...), append(attempts, v.Attempt...)
		groupOff, attemptOff = ne.AppendUint32(groupOff, uint32(len(groups))), ne.AppendUint32(attemptOff, uint32(len(attempts)))
		segments = ne.AppendUint32(segments, uint32(int32(v.Segment)))
		advantages = ne.AppendUint64(advantages, math.Float64bits(v.Advantage))
		tokens += v.Len
		listOff = ne.AppendUint32(listOff, uint32(tokens))
		return nil
	})
	if err != nil {
		return err
	}
	if len(groups) != rb.groupBytes || len(attempts) != rb.attemptBytes || tokens != rb.tokens {
		return fmt.Errorf("projector: the samples changed between passes: %d tokens, %d and %d bytes of ids, planned %d, %d and %d",
			tokens, len(groups), len(attempts), rb.tokens, rb.groupBytes, rb.attemptBytes)
	}
	for _, p := range [][]byte{groupOff, groups, attemptOff, attempts, segments, advantages} {
		if err := put(p); err != nil {
			return err
		}
	}
	for col, width := range tokenWidths(b.temps) {
		if err := put(listOff); err != nil {
			return err
		}
		size := int64(width) * int64(rb.tokens)
		if size == 0 {
			continue
		}
		if !compressed {
			if err := b.column(w, src, rb, col); err != nil {
				return err
			}
		} else if rb.packed[col] < 0 {
			if _, err := w.Write(asIs); err != nil {
				return err
			}
			if err := b.column(w, src, rb, col); err != nil {
				return err
			}
		} else {
			if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(size))); err != nil {
				return err
			}
			cw := &countedWriter{w: w}
			if err := b.compressColumn(cw, src, rb, col); err != nil {
				return err
			}
			if cw.n != rb.packed[col] {
				return fmt.Errorf("projector: column %d compressed to %d bytes, planned %d: the samples changed between passes", col, cw.n, rb.packed[col])
			}
			size = rb.packed[col]
		}
		if _, err := w.Write(zeros[:pad8(size)-size]); err != nil {
			return err
		}
	}
	return nil
}

// countedWriter is a writer that counts what it passes on.
type countedWriter struct {
	w io.Writer
	n int64
}

func (c *countedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// column writes token column col of the record batch's samples to w, in
// little-endian order, a sample at a time.
func (b *ArrowBody) column(w io.Writer, src SampleSource, rb *arrowBatch, col int) error {
	width := tokenWidths(b.temps)[col]
	var scratch, unit []byte
	return b.pass(src, rb, func(v *projections.SampleView) error {
		var le []byte
		switch col {
		case 0:
			le = v.TokenIDs
		case 1:
			le = v.LossMask
		case 2:
			le = v.Logprobs
		case 3:
			le = v.PolicyVersions
		default:
			if le = v.Temperatures; le == nil {
				unit = ones(unit[:0], v.Len)
				le = unit
			}
		}
		if width > 1 && endian.IsBigEndian {
			scratch = swapped(scratch[:0], le, width)
			le = scratch
		}
		_, err := w.Write(le)
		return err
	})
}

// pass calls fn with each sample of the record batch, in order.
func (b *ArrowBody) pass(src SampleSource, rb *arrowBatch, fn func(v *projections.SampleView) error) error {
	idx, seen := 0, 0
	err := src(func(chunk []byte) error {
		r := projections.NewSampleReader(chunk)
		for r.Next() {
			if idx >= rb.first+rb.samples {
				return errStopPass
			}
			if idx >= rb.first {
				if err := fn(r.Sample()); err != nil {
					return err
				}
				seen++
			}
			idx++
		}
		return r.Err()
	})
	if errors.Is(err, errStopPass) {
		err = nil
	}
	if err == nil && seen != rb.samples {
		err = fmt.Errorf("projector: the samples changed between passes: %d of record batch's %d read", seen, rb.samples)
	}
	return err
}

// ones is n float32 1s in little-endian order: the temperature of a
// sample that carries none.
func ones(dst []byte, n int) []byte {
	for range n {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(1))
	}
	return dst
}

// swapped is le's values of the given width in big-endian order, for a
// big-endian host, whose order Arrow buffers are in.
func swapped(dst, le []byte, width int) []byte {
	dst = append(dst, le...)
	for i := 0; i < len(dst); i += width {
		for a, c := i, i+width-1; a < c; a, c = a+1, c-1 {
			dst[a], dst[c] = dst[c], dst[a]
		}
	}
	return dst
}
