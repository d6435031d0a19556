package projections

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
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
// Whole sequences (rule version 4). A version 3 turn's observation tokens
// are its new prompt tokens: the whole prompt of a turn without a parent,
// so the sample of the segment it starts begins at the first prompt
// token. A segment that begins with a turn that has a parent (a branch,
// or a divergence: see startsSegment in batch.go) begins with the first
// prefix_tokens tokens of the parent's own sequence, rebuilt along the
// chain of parents from their stored tokens, each with its turn's
// log-prob, policy version and temperature and loss mask 0, then the
// turn's new tokens: every sample is a token sequence the engine saw.
// (A parent whose tokens the log lacks leaves its part out.) Each token
// carries the sampling temperature of the turn it belongs to, 1 where the
// turn does not say (turns before version 3, and those without sampling):
// the engines' default, which leaves logits as they are.
//
// The samples are kept, digested and stored in one canonical binary form,
// every number little-endian:
//
//	per sample, in order:
//	  u32 length, then that many bytes: the group id (UTF-8)
//	  u32 length, then that many bytes: the attempt id (UTF-8)
//	  i64 segment
//	  f64 advantage (IEEE 754 bits)
//	  u64 n, the number of tokens, with bit 63 set when the sample
//	      carries temperatures (rule version 4 on)
//	  n × i32 token ids
//	  n × u8  loss mask (0 or 1)
//	  n × f32 rollout log-probs (IEEE 754 bits)
//	  n × i64 policy versions
//	  n × f32 temperatures (IEEE 754 bits), when bit 63 of n is set
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
	// Temperatures is each token's sampling temperature; nil in a sample
	// of the form before rule version 4, which has none.
	Temperatures []float32
	Advantage    float64
}

// sampleFixed is the size of a sample's fixed fields: the two lengths,
// segment, advantage and n.
const sampleFixed = 4 + 4 + 8 + 8 + 8

// bytesPerToken is the size of one token in the canonical form: id, mask,
// log-prob, version; bytesPerTokenT with its temperature.
const (
	bytesPerToken  = 4 + 1 + 4 + 8
	bytesPerTokenT = bytesPerToken + 4
)

// withTemperatures is the bit of a sample's token count that says the
// sample carries temperatures.
const withTemperatures = uint64(1) << 63

// ErrMalformedSamples is wrapped by every error about bytes that are not
// canonical binary samples.
var ErrMalformedSamples = errors.New("projections: malformed samples")

// AppendSample appends the canonical binary form of s to b. The four arrays
// must have equal lengths, and so must Temperatures unless it is nil.
func AppendSample(b []byte, s *Sample) ([]byte, error) {
	n := len(s.TokenIDs)
	if len(s.LossMask) != n || len(s.RolloutLogprobs) != n || len(s.PolicyVersions) != n ||
		s.Temperatures != nil && len(s.Temperatures) != n {
		return b, fmt.Errorf("%w: sample of %s segment %d has %d token ids, %d mask values, %d log-probs, %d versions and %d temperatures",
			ErrMalformedSamples, s.Attempt, s.Segment, n, len(s.LossMask), len(s.RolloutLogprobs), len(s.PolicyVersions), len(s.Temperatures))
	}
	b = appendSampleHeader(b, s.Group, s.Attempt, s.Segment, s.Advantage, n, s.Temperatures != nil)
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
	for _, v := range s.Temperatures {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b, nil
}

func appendSampleHeader(b []byte, group, attempt string, segment int64, advantage float64, n int, temps bool) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(group)))
	b = append(b, group...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(attempt)))
	b = append(b, attempt...)
	b = binary.LittleEndian.AppendUint64(b, uint64(segment))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(advantage))
	w := uint64(n)
	if temps {
		w |= withTemperatures
	}
	return binary.LittleEndian.AppendUint64(b, w)
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
	// PolicyVersions Len int64, Temperatures Len float32 (nil in the form
	// before rule version 4).
	TokenIDs, LossMask, Logprobs, PolicyVersions, Temperatures []byte
}

// Temperature is the sampling temperature of the i-th token: 1 in a
// sample of the form that has none.
func (v *SampleView) Temperature(i int) float32 {
	if v.Temperatures == nil {
		return 1
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(v.Temperatures[4*i:]))
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
	if v.Temperatures != nil {
		s.Temperatures = make([]float32, v.Len)
		for i := range v.Len {
			s.Temperatures[i] = v.Temperature(i)
		}
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
	per, temps := uint64(bytesPerToken), n&withTemperatures != 0
	if temps {
		n &^= withTemperatures
		per = bytesPerTokenT
	}
	if n > uint64(len(rest))/per {
		return fail("%d tokens overrun the %d bytes left", n, len(rest))
	}
	r.v.Len = int(n)
	cut := func(size int) []byte {
		s := rest[: size*r.v.Len : size*r.v.Len]
		rest = rest[size*r.v.Len:]
		return s
	}
	r.v.TokenIDs, r.v.LossMask, r.v.Logprobs, r.v.PolicyVersions = cut(4), cut(1), cut(4), cut(8)
	r.v.Temperatures = nil
	if temps {
		r.v.Temperatures = cut(4)
	}
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
// tokens in the Store (see writeSamples). It sizes the buffer from the
// stored payloads' token counts first (the reads are served again from the
// fold's window when the samples are written), so that a batch of
// millions of tokens is rarely copied into a larger buffer as it grows:
// the completion tokens the entry records leave out each turn's
// observation tokens. A copied prefix is counted at its recorded length.
func (c *applyCtx) materialize(entries []openGroup) ([]byte, error) {
	per := bytesPerToken
	if c.rules >= 4 {
		per = bytesPerTokenT
	}
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
				size += per * n
				if sh := e.shape(ai, t); sh != nil && sh.Parent >= 0 && (t == 0 || segs[t] != segs[t-1]) {
					size += per * int(sh.Prefix)
				}
			}
		}
	}
	out := bytes.NewBuffer(make([]byte, 0, size))
	if err := c.writeSamples(entries, out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writeSamples writes the canonical binary samples of a batch, built from
// the tokens in the Store, to w piece by piece: each sample's header, then
// its columns. Segments of an attempt run from 0 to the segment of its
// last turn, so a compaction after a missing turn still numbers the
// segments after it; an attempt without turns is one empty segment. The
// tokens go from the stored payloads to the form as bytes: both are
// little-endian words. Written straight into the batch's digest, a batch
// is never held whole (FoldOptions.NoSamples, SamplesTo). Its writes'
// errors are not checked: w is a hash or a bytes.Buffer, whose writes do
// not fail, or a SamplesTo writer, whose caller sees them.
func (c *applyCtx) writeSamples(entries []openGroup, w io.Writer) error {
	temps := c.rules >= 4
	var col sampleColumns
	var head []byte
	for _, e := range entries {
		for ai, a := range e.Group.Attempts {
			segs, pay := e.Segments[ai], e.Payload[ai]
			last := int64(0)
			if len(segs) > 0 {
				last = segs[len(segs)-1]
			}
			at := attemptTurns{c: c, e: &e, ai: ai, a: &a, temps: temps}
			t := 0
			for seg := int64(0); seg <= last; seg++ {
				col.reset()
				first := true
				for ; t < len(a.Turns) && segs[t] == seg; t++ {
					if !pay[t] {
						continue
					}
					if first {
						// A segment begins with its first turn's prefix.
						if sh := e.shape(ai, t); sh != nil && sh.Parent >= 0 {
							if err := at.appendParentPrefix(&col, t, sh.Prefix); err != nil {
								return err
							}
						}
						first = false
					}
					if err := at.appendTurn(&col, t, 0, -1, false); err != nil {
						return err
					}
				}
				head = appendSampleHeader(head[:0], e.Group.Group, a.Attempt, seg, a.Advantage, len(col.mask), temps)
				w.Write(head)
				w.Write(col.ids)
				w.Write(col.mask)
				w.Write(col.logprobs)
				w.Write(col.versions)
				if temps {
					w.Write(col.temps)
				}
			}
		}
	}
	return nil
}

// shape is the shape of turn t of attempt ai, nil when the entry has none.
func (e *openGroup) shape(ai, t int) *turnShape {
	if ai >= len(e.Shapes) || t >= len(e.Shapes[ai]) {
		return nil
	}
	return e.Shapes[ai][t]
}

// attemptTurns reads the turns of one attempt of an open group for its
// samples.
type attemptTurns struct {
	c     *applyCtx
	e     *openGroup
	ai    int
	a     *BatchAttempt
	temps bool
}

// appendParentPrefix appends the first n tokens of the sequence of turn
// t's parent: the parent's own parent prefix, then its observation and
// completion tokens, all loss-masked. A parent the attempt lacks, or one
// without stored tokens, contributes nothing.
func (at *attemptTurns) appendParentPrefix(s *sampleColumns, t int, n int64) error {
	sh := at.e.shape(at.ai, t)
	if sh == nil || sh.Parent < 0 || n <= 0 {
		return nil
	}
	p, ok := slices.BinarySearchFunc(at.a.Turns[:t], sh.Parent, func(bt BatchTurn, turn int64) int { return cmp.Compare(bt.Turn, turn) })
	if !ok || p >= len(at.e.Payload[at.ai]) || !at.e.Payload[at.ai][p] {
		return nil
	}
	return at.appendSequence(s, p, n)
}

// appendSequence appends the first n tokens of turn p's whole sequence,
// loss-masked: its parent's prefix_tokens, then its own tokens.
func (at *attemptTurns) appendSequence(s *sampleColumns, p int, n int64) error {
	var inherited int64
	if sh := at.e.shape(at.ai, p); sh != nil && sh.Parent >= 0 {
		inherited = min(n, sh.Prefix)
		if err := at.appendParentPrefix(s, p, inherited); err != nil {
			return err
		}
	}
	if n -= inherited; n <= 0 {
		return nil
	}
	return at.appendTurn(s, p, 0, int(n), true)
}

// appendTurn appends tokens [from, to) of turn t's own tokens, its
// observation tokens and then its completion tokens (to < 0: all of
// them); masked forces loss mask 0.
func (at *attemptTurns) appendTurn(s *sampleColumns, t int, from, to int, masked bool) error {
	bt := &at.a.Turns[t]
	obs, toks, lps, err := at.c.turnPayload(at.a.Attempt, bt.Turn)
	if err != nil {
		return err
	}
	temp := float32(1)
	if sh := at.e.shape(at.ai, t); sh != nil {
		temp = sh.Temperature
	}
	nObs, nTok := len(obs)/4, len(toks)/4
	if to < 0 || to > nObs+nTok {
		to = nObs + nTok
	}
	if from >= to {
		return nil
	}
	// Observation tokens [from, min(to, nObs)).
	if oTo := min(to, nObs); from < oTo {
		k := oTo - from
		s.ids = append(s.ids, obs[4*from:4*oTo]...)
		s.mask = append(s.mask, make([]byte, k)...)
		s.logprobs = append(s.logprobs, make([]byte, 4*k)...)
		s.fillVersion(bt.PolicyVersion, k)
		if at.temps {
			s.fillTemperature(temp, k)
		}
	}
	// Completion tokens [cFrom, cTo).
	cFrom, cTo := max(from-nObs, 0), to-nObs
	if cFrom >= cTo {
		return nil
	}
	s.ids = append(s.ids, toks[4*cFrom:4*cTo]...)
	// Log-probs come with the token ids (the catalogue checks both have
	// completion_tokens values); a turn without them reads as zeros.
	lps = lps[:min(len(lps), len(toks))]
	have := min(max(len(lps)/4-cFrom, 0), cTo-cFrom)
	if have > 0 {
		s.logprobs = append(s.logprobs, lps[4*cFrom:4*(cFrom+have)]...)
	}
	s.logprobs = append(s.logprobs, make([]byte, 4*(cTo-cFrom-have))...)
	segs := bt.judgedSegments()
	for i, vs := range segs {
		lo, hi := int(min(vs.Start, int64(nTok))), nTok
		if i+1 < len(segs) {
			hi = int(min(segs[i+1].Start, int64(nTok)))
		}
		lo, hi = max(lo, cFrom), min(hi, cTo)
		if lo >= hi {
			continue
		}
		mask := uint8(0)
		if vs.Trained && !masked {
			mask = 1
		}
		s.fillMask(mask, hi-lo)
		s.fillVersion(vs.PolicyVersion, hi-lo)
	}
	if at.temps {
		s.fillTemperature(temp, cTo-cFrom)
	}
	return nil
}

// sampleColumns gathers one sample's arrays in their canonical bytes.
type sampleColumns struct {
	ids, mask, logprobs, versions, temps []byte
}

func (s *sampleColumns) reset() {
	s.ids, s.mask, s.logprobs, s.versions, s.temps = s.ids[:0], s.mask[:0], s.logprobs[:0], s.versions[:0], s.temps[:0]
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

// fillTemperature appends n copies of t to the temperatures, by doubling.
func (s *sampleColumns) fillTemperature(t float32, n int) {
	if n <= 0 {
		return
	}
	start := len(s.temps)
	s.temps = binary.LittleEndian.AppendUint32(s.temps, math.Float32bits(t))
	for written := 1; written < n; {
		k := min(written, n-written)
		s.temps = append(s.temps, s.temps[start:start+4*k]...)
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

// AppendNDJSON appends the sample as one line of NDJSON, ending in "\n":
// the members group, attempt, segment, token_ids, loss_mask,
// rollout_logprobs, policy_versions, temperatures (only for a sample of
// the form that carries them, rule version 4 on) and advantage, numbers
// written as encoding/json writes them (log-probs and temperatures as
// float32).
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
	if v.Temperatures != nil {
		b = append(b, `],"temperatures":[`...)
		for i := range v.Len {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendJSONFloat(b, float64(v.Temperature(i)), 32); err != nil {
				return nil, err
			}
		}
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
