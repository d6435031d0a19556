package projections

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/rolloutledger/rolloutledger/events"
)

// Samples (docs/design.md §6.9) and their canonical binary form (§7.4).
//
// Sealing a batch materializes one sample per included attempt and
// training segment (rule 8), attempts in manifest order, segments
// ascending. Each turn of the segment, by turn index, contributes its
// observation tokens (loss mask 0, log-prob 0, the policy version of the
// turn's first token) and then its completion tokens: completion token i
// carries the version of the version segment holding i, and loss mask 1
// exactly when that segment trains. A turn without inline tokens
// contributes nothing, and a segment without tokens is still a sample.
//
// The samples are kept, digested and stored in one canonical binary form,
// every number little-endian:
//
//	per sample, in order:
//	  u32 length, then that many bytes: the group id (UTF-8)
//	  u32 length, then that many bytes: the attempt id (UTF-8)
//	  i64 segment
//	  f64 advantage (IEEE 754 bits)
//	  u64 n, the number of tokens
//	  n × i32 token ids
//	  n × u8  loss mask (0 or 1)
//	  n × f32 rollout log-probs (IEEE 754 bits)
//	  n × i64 policy versions
//
// NDJSON and Arrow IPC are renderings of it for people and trainers; the
// digest does not depend on the transfer format.

// Sample is one sample, decoded.
type Sample struct {
	Group           string
	Attempt         string
	Segment         int64
	TokenIDs        []int32
	LossMask        []uint8
	RolloutLogprobs []float32
	PolicyVersions  []int64
	Advantage       float64
}

// sampleFixed is the size of a sample's fixed fields: the two lengths,
// segment, advantage and n.
const sampleFixed = 4 + 4 + 8 + 8 + 8

// bytesPerToken is the size of one token in the canonical form: id, mask,
// log-prob, version.
const bytesPerToken = 4 + 1 + 4 + 8

// ErrMalformedSamples is wrapped by every error about bytes that are not
// canonical binary samples.
var ErrMalformedSamples = errors.New("projections: malformed samples")

// AppendSample appends the canonical binary form of s to b. The four arrays
// must have equal lengths.
func AppendSample(b []byte, s *Sample) ([]byte, error) {
	n := len(s.TokenIDs)
	if len(s.LossMask) != n || len(s.RolloutLogprobs) != n || len(s.PolicyVersions) != n {
		return b, fmt.Errorf("%w: sample of %s segment %d has %d token ids, %d mask values, %d log-probs and %d versions",
			ErrMalformedSamples, s.Attempt, s.Segment, n, len(s.LossMask), len(s.RolloutLogprobs), len(s.PolicyVersions))
	}
	b = appendSampleHeader(b, s.Group, s.Attempt, s.Segment, s.Advantage, n)
	for _, v := range s.TokenIDs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = append(b, s.LossMask...)
	for _, v := range s.RolloutLogprobs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	for _, v := range s.PolicyVersions {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b, nil
}

func appendSampleHeader(b []byte, group, attempt string, segment int64, advantage float64, n int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(group)))
	b = append(b, group...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(attempt)))
	b = append(b, attempt...)
	b = binary.LittleEndian.AppendUint64(b, uint64(segment))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(advantage))
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

// SampleView is one sample of a canonical binary form, read in place: the
// byte slices alias the form and hold little-endian values.
type SampleView struct {
	Group, Attempt []byte
	Segment        int64
	Advantage      float64
	// Len is the number of tokens.
	Len int
	// TokenIDs holds Len int32, LossMask Len bytes, Logprobs Len float32,
	// PolicyVersions Len int64.
	TokenIDs, LossMask, Logprobs, PolicyVersions []byte
}

// TokenID is the i-th token id.
func (v *SampleView) TokenID(i int) int32 { return int32(binary.LittleEndian.Uint32(v.TokenIDs[4*i:])) }

// Logprob is the i-th rollout log-prob.
func (v *SampleView) Logprob(i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(v.Logprobs[4*i:]))
}

// PolicyVersion is the policy version of the i-th token.
func (v *SampleView) PolicyVersion(i int) int64 {
	return int64(binary.LittleEndian.Uint64(v.PolicyVersions[8*i:]))
}

// Sample copies the view into a decoded Sample.
func (v *SampleView) Sample() Sample {
	s := Sample{Group: string(v.Group), Attempt: string(v.Attempt), Segment: v.Segment, Advantage: v.Advantage,
		TokenIDs: make([]int32, v.Len), LossMask: append([]uint8{}, v.LossMask...),
		RolloutLogprobs: make([]float32, v.Len), PolicyVersions: make([]int64, v.Len)}
	for i := range v.Len {
		s.TokenIDs[i], s.RolloutLogprobs[i], s.PolicyVersions[i] = v.TokenID(i), v.Logprob(i), v.PolicyVersion(i)
	}
	return s
}

// SampleReader reads canonical binary samples one at a time, in place:
//
//	r := NewSampleReader(b)
//	for r.Next() {
//		v := r.Sample()
//		...
//	}
//	if err := r.Err(); err != nil { ... }
type SampleReader struct {
	b   []byte
	off int
	n   int // samples read
	v   SampleView
	err error
}

// NewSampleReader reads the samples of b.
func NewSampleReader(b []byte) *SampleReader { return &SampleReader{b: b} }

// Next reads the next sample; false at the end or at the first malformed
// byte (then Err says what).
func (r *SampleReader) Next() bool {
	if r.err != nil || r.off == len(r.b) {
		return false
	}
	rest := r.b[r.off:]
	fail := func(format string, args ...any) bool {
		r.err = fmt.Errorf("%w: sample %d at byte %d: %s", ErrMalformedSamples, r.n, r.off, fmt.Sprintf(format, args...))
		return false
	}
	str := func(what string) ([]byte, bool) {
		if len(rest) < 4 {
			return nil, fail("%s length cut short", what)
		}
		n := binary.LittleEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, fail("%s of %d bytes overruns the %d left", what, n, len(rest)-4)
		}
		s := rest[4 : 4+n : 4+n]
		if !utf8.Valid(s) {
			return nil, fail("%s is not UTF-8", what)
		}
		rest = rest[4+n:]
		return s, true
	}
	var ok bool
	if r.v.Group, ok = str("group"); !ok {
		return false
	}
	if r.v.Attempt, ok = str("attempt"); !ok {
		return false
	}
	if len(rest) < 24 {
		return fail("fixed fields cut short")
	}
	r.v.Segment = int64(binary.LittleEndian.Uint64(rest))
	r.v.Advantage = math.Float64frombits(binary.LittleEndian.Uint64(rest[8:]))
	n := binary.LittleEndian.Uint64(rest[16:])
	rest = rest[24:]
	if n > uint64(len(rest))/bytesPerToken {
		return fail("%d tokens overrun the %d bytes left", n, len(rest))
	}
	r.v.Len = int(n)
	cut := func(size int) []byte {
		s := rest[: size*r.v.Len : size*r.v.Len]
		rest = rest[size*r.v.Len:]
		return s
	}
	r.v.TokenIDs, r.v.LossMask, r.v.Logprobs, r.v.PolicyVersions = cut(4), cut(1), cut(4), cut(8)
	r.off = len(r.b) - len(rest)
	r.n++
	return true
}

// Offset is the byte offset just past the sample Next read.
func (r *SampleReader) Offset() int { return r.off }

// Sample is the sample Next read; it is overwritten by the next call.
func (r *SampleReader) Sample() *SampleView { return &r.v }

// Err is the first problem met, nil at a clean end.
func (r *SampleReader) Err() error { return r.err }

// DecodeSamples decodes a canonical binary form.
func DecodeSamples(b []byte) ([]Sample, error) {
	var out []Sample
	r := NewSampleReader(b)
	for r.Next() {
		out = append(out, r.Sample().Sample())
	}
	return out, r.Err()
}

// CountSamples is the number of samples and of tokens in a canonical binary form.
func CountSamples(b []byte) (samples, tokens int, err error) {
	r := NewSampleReader(b)
	for r.Next() {
		samples++
		tokens += r.Sample().Len
	}
	return samples, tokens, r.Err()
}

// materialize builds the canonical binary samples of a batch from the
// tokens in the Store. Segments of an attempt run from 0 to the segment of
// its last turn, so a compaction after a missing turn still numbers the
// segments after it; an attempt without turns is one empty segment. The
// tokens go from the stored payloads to the form as bytes: both are
// little-endian words.
func (c *applyCtx) materialize(entries []openGroup) ([]byte, error) {
	// Sized exactly, from the stored payloads' token counts (the reads
	// are served again from the fold's window when the samples are
	// written), so that a batch of millions of tokens is never copied
	// into a larger buffer as it grows: the completion tokens the entry
	// records leave out each turn's observation tokens.
	size := 0
	for _, e := range entries {
		for ai, a := range e.Group.Attempts {
			segs, pay := e.Segments[ai], e.Payload[ai]
			last := int64(0)
			if len(segs) > 0 {
				last = segs[len(segs)-1]
			}
			size += int(last+1) * (sampleFixed + len(e.Group.Group) + len(a.Attempt))
			for t := range a.Turns {
				if t >= len(pay) || !pay[t] {
					continue
				}
				n, err := c.payloadTokens(a.Attempt, a.Turns[t].Turn)
				if err != nil {
					return nil, err
				}
				size += bytesPerToken * n
			}
		}
	}
	out := make([]byte, 0, size)
	var col sampleColumns
	for _, e := range entries {
		for ai, a := range e.Group.Attempts {
			segs, pay := e.Segments[ai], e.Payload[ai]
			last := int64(0)
			if len(segs) > 0 {
				last = segs[len(segs)-1]
			}
			t := 0
			for seg := int64(0); seg <= last; seg++ {
				col.reset()
				for ; t < len(a.Turns) && segs[t] == seg; t++ {
					if !pay[t] {
						continue
					}
					if err := c.appendTurn(&col, a.Attempt, &a.Turns[t]); err != nil {
						return nil, err
					}
				}
				n := len(col.mask)
				out = appendSampleHeader(out, e.Group.Group, a.Attempt, seg, a.Advantage, n)
				out = append(out, col.ids...)
				out = append(out, col.mask...)
				out = append(out, col.logprobs...)
				out = append(out, col.versions...)
			}
		}
	}
	return out, nil
}

// sampleColumns gathers one sample's arrays in their canonical bytes.
type sampleColumns struct {
	ids, mask, logprobs, versions []byte
}

func (s *sampleColumns) reset() {
	s.ids, s.mask, s.logprobs, s.versions = s.ids[:0], s.mask[:0], s.logprobs[:0], s.versions[:0]
}

// fillVersion appends n copies of v to the versions, by doubling.
func (s *sampleColumns) fillVersion(v int64, n int) {
	if n <= 0 {
		return
	}
	start := len(s.versions)
	s.versions = binary.LittleEndian.AppendUint64(s.versions, uint64(v))
	for written := 1; written < n; {
		k := min(written, n-written)
		s.versions = append(s.versions, s.versions[start:start+8*k]...)
		written += k
	}
}

func (s *sampleColumns) fillMask(m uint8, n int) {
	start := len(s.mask)
	s.mask = append(s.mask, make([]byte, n)...)
	if m != 0 {
		for i := start; i < len(s.mask); i++ {
			s.mask[i] = m
		}
	}
}

// turnPayload is a turn's stored payload as little-endian words: its
// observation token ids, completion token ids and log-probs.
func (c *applyCtx) turnPayload(attempt string, turn int64) (obs, toks, lps []byte, err error) {
	b, ok, err := c.s.Get(turnKey(attempt, turn))
	if err != nil {
		return nil, nil, nil, err
	}
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: tokens of turn %d of attempt %s missing", ErrCorruptState, turn, attempt)
	}
	return payloadWords(b)
}

// payloadTokens is the number of tokens, observation and completion, a
// turn's stored payload gives its sample.
func (c *applyCtx) payloadTokens(attempt string, turn int64) (int, error) {
	obs, toks, _, err := c.turnPayload(attempt, turn)
	return (len(obs) + len(toks)) / 4, err
}

func (c *applyCtx) appendTurn(s *sampleColumns, attempt string, t *BatchTurn) error {
	obs, toks, lps, err := c.turnPayload(attempt, t.Turn)
	if err != nil {
		return err
	}
	nObs, nTok := len(obs)/4, len(toks)/4
	s.ids = append(s.ids, obs...)
	s.mask = append(s.mask, make([]byte, nObs)...)
	s.logprobs = append(s.logprobs, make([]byte, 4*nObs)...)
	s.fillVersion(t.PolicyVersion, nObs)

	s.ids = append(s.ids, toks...)
	// Log-probs come with the token ids (the catalogue checks both have
	// completion_tokens values); a turn without them reads as zeros.
	lps = lps[:min(len(lps), len(toks))]
	s.logprobs = append(s.logprobs, lps...)
	s.logprobs = append(s.logprobs, make([]byte, len(toks)-len(lps))...)
	segs := t.judgedSegments()
	for i, vs := range segs {
		from, to := int(min(vs.Start, int64(nTok))), nTok
		if i+1 < len(segs) {
			to = int(min(segs[i+1].Start, int64(nTok)))
		}
		mask := uint8(0)
		if vs.Trained {
			mask = 1
		}
		s.fillMask(mask, to-from)
		s.fillVersion(vs.PolicyVersion, to-from)
	}
	return nil
}

// AppendNDJSON appends the sample as one line of NDJSON, ending in "\n":
// the members group, attempt, segment, token_ids, loss_mask,
// rollout_logprobs, policy_versions and advantage, numbers written as
// encoding/json writes them (log-probs as float32).
func (v *SampleView) AppendNDJSON(b []byte) ([]byte, error) {
	group, err := events.CanonicalJSON(string(v.Group))
	if err != nil {
		return nil, err
	}
	attempt, err := events.CanonicalJSON(string(v.Attempt))
	if err != nil {
		return nil, err
	}
	b = append(b, `{"group":`...)
	b = append(b, group...)
	b = append(b, `,"attempt":`...)
	b = append(b, attempt...)
	b = append(b, `,"segment":`...)
	b = strconv.AppendInt(b, v.Segment, 10)
	b = append(b, `,"token_ids":[`...)
	for i := range v.Len {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v.TokenID(i)), 10)
	}
	b = append(b, `],"loss_mask":[`...)
	for i, m := range v.LossMask {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(m), 10)
	}
	b = append(b, `],"rollout_logprobs":[`...)
	for i := range v.Len {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendJSONFloat(b, float64(v.Logprob(i)), 32); err != nil {
			return nil, err
		}
	}
	b = append(b, `],"policy_versions":[`...)
	for i := range v.Len {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v.PolicyVersion(i), 10)
	}
	b = append(b, `],"advantage":`...)
	if b, err = appendJSONFloat(b, v.Advantage, 64); err != nil {
		return nil, err
	}
	return append(b, "}\n"...), nil
}

// ndjsonChunk is how much NDJSON WriteNDJSON gathers before a write.
const ndjsonChunk = 256 << 10

// WriteNDJSON renders canonical binary samples as NDJSON to w, one line
// per sample, holding at most one line and a chunk in memory. It returns
// the bytes written.
func WriteNDJSON(w io.Writer, samples []byte) (int64, error) {
	var buf []byte
	var written int64
	flush := func() error {
		n, err := w.Write(buf)
		written += int64(n)
		buf = buf[:0]
		return err
	}
	r := NewSampleReader(samples)
	for r.Next() {
		var err error
		if buf, err = r.Sample().AppendNDJSON(buf); err != nil {
			return written, err
		}
		if len(buf) >= ndjsonChunk {
			if err := flush(); err != nil {
				return written, err
			}
		}
	}
	if err := r.Err(); err != nil {
		return written, err
	}
	if len(buf) > 0 {
		return written, flush()
	}
	return written, nil
}

// SamplesNDJSON renders canonical binary samples as one NDJSON body.
func SamplesNDJSON(samples []byte) ([]byte, error) {
	var out []byte
	r := NewSampleReader(samples)
	for r.Next() {
		var err error
		if out, err = r.Sample().AppendNDJSON(out); err != nil {
			return nil, err
		}
	}
	return out, r.Err()
}

// appendJSONFloat writes f as encoding/json does: the shortest decimal
// that reads back as the same float of the given size, in plain notation
// unless its magnitude is below 1e-6 or at least 1e21, with exponents
// written without a leading zero (1e-7, not 1e-07).
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("projections: %v has no JSON form", f)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 {
		if bits == 64 && (a < 1e-6 || a >= 1e21) || bits == 32 && (float32(a) < 1e-6 || float32(a) >= 1e21) {
			format = 'e'
		}
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b, nil
}
