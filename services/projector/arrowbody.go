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
	size    int64
	held    int64
}

// arrowBatch is one record batch of the stream: samples [first,
// first+samples) of the batch.
type arrowBatch struct {
	first, samples, tokens, groupBytes, attemptBytes int
	msg                                              []byte // the record batch message, framed and padded
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
	return planArrowBody(meta, src, MaxArrowBatchTokens)
}

func planArrowBody(meta arrow.Metadata, src SampleSource, maxTokens int) (*ArrowBody, error) {
	b := &ArrowBody{temps: ArrowWithTemperatures(meta)}
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
		lens := rb.bufferLengths(b.temps)
		var body int64
		for _, l := range lens {
			body += pad8(l)
		}
		rb.msg = recordBatchMessage(rb.samples, rb.tokens, rb.nodes(b.temps), lens, body)
		b.size += int64(len(rb.msg)) + body
		b.held = max(b.held, rb.heldBytes())
	}
	return b, nil
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
// order of the IPC format (each column's validity bitmap, absent, then
// its offsets and values; a list's child after its offsets).
func (rb *arrowBatch) bufferLengths(temps bool) []int64 {
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
// built in the order arrow-go's IPC writer builds it, so the stream is
// byte for byte what that writer writes for the same record batch.
func recordBatchMessage(rows, tokens int, nodes, lens []int64, body int64) []byte {
	b := flatbuffers.NewBuilder(0)
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
	put := func(p []byte) error {
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
	var scratch, unit []byte
	for col, width := range tokenWidths(b.temps) {
		if err := put(listOff); err != nil {
			return err
		}
		err := b.pass(src, rb, func(v *projections.SampleView) error {
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
		if err != nil {
			return err
		}
		size := int64(width) * int64(rb.tokens)
		if _, err := w.Write(zeros[:pad8(size)-size]); err != nil {
			return err
		}
	}
	return nil
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
