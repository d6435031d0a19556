package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The row store's turns, tool calls and judgements (millions of each at
// 50 M facts) are written once by the fold's collector and read once by a
// writer. As JSON their encoding and decoding was a third of a Parquet
// export's CPU, so they are kept in a compact binary form instead: every
// field in declaration order, integers as varints, strings and lists
// prefixed by their length. The form is private to one export: the store
// is a temporary directory, removed when the export ends, so it needs no
// version. A list's length is stored plus one, 0 meaning nil, so that a
// nil list (a column left null) reads back nil and an empty one empty.

// rowEncoder appends fields to b.
type rowEncoder struct{ b []byte }

func (e *rowEncoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *rowEncoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *rowEncoder) bool(v bool) {
	var b byte
	if v {
		b = 1
	}
	e.b = append(e.b, b)
}

func (e *rowEncoder) string(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *rowEncoder) spilled(s spilled) {
	e.int(s.At)
	e.int(int64(s.N))
}

func (e *rowEncoder) ints(v []int64) {
	if v == nil {
		e.uint(0)
		return
	}
	e.uint(uint64(len(v)) + 1)
	for _, x := range v {
		e.int(x)
	}
}

func (e *rowEncoder) bools(v []bool) {
	if v == nil {
		e.uint(0)
		return
	}
	e.uint(uint64(len(v)) + 1)
	for _, x := range v {
		e.bool(x)
	}
}

// errRowCorrupt is what decoding a value the encoder did not write gives.
var errRowCorrupt = errors.New("dataset: row store: corrupt row")

// rowDecoder reads fields from b; after the first malformed field every
// read gives a zero value and err is set.
type rowDecoder struct {
	b   []byte
	err error
}

func (d *rowDecoder) fail() { d.err, d.b = errRowCorrupt, nil }

func (d *rowDecoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *rowDecoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int32 reads an int that must fit 32 bits.
func (d *rowDecoder) int32() int32 {
	v := d.int()
	if int64(int32(v)) != v {
		d.fail()
		return 0
	}
	return int32(v)
}

func (d *rowDecoder) bool() bool {
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// length reads a length no larger than the bytes left (each element
// takes at least one).
func (d *rowDecoder) length() int {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *rowDecoder) string() string {
	n := d.length()
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *rowDecoder) spilled() spilled {
	return spilled{At: d.int(), N: d.int32()}
}

// listLength reads a list's stored length: -1 for nil.
func (d *rowDecoder) listLength() int {
	n := d.uint()
	if n == 0 || n-1 > uint64(len(d.b)) {
		if n != 0 {
			d.fail()
		}
		return -1
	}
	return int(n - 1)
}

func (d *rowDecoder) ints() []int64 {
	n := d.listLength()
	if n < 0 {
		return nil
	}
	v := make([]int64, n)
	for i := range v {
		v[i] = d.int()
	}
	return v
}

func (d *rowDecoder) bools() []bool {
	n := d.listLength()
	if n < 0 {
		return nil
	}
	v := make([]bool, n)
	for i := range v {
		v[i] = d.bool()
	}
	return v
}

// done is the decoding's error: a malformed field, or bytes left over.
func (d *rowDecoder) done() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = errRowCorrupt
	}
	return d.err
}

func (e *rowEncoder) turn(t *Turn) {
	e.uint(t.Seq)
	e.int(int64(t.Partition))
	e.int(t.Offset)
	e.string(t.Attempt)
	e.int(int64(t.Turn))
	e.int(t.PromptTokens)
	e.int(t.CompletionTokens)
	e.int(t.Cached)
	e.ints(t.SegmentStarts)
	e.ints(t.SegmentVersions)
	e.int(t.ObservationTokens)
	e.int(t.InlineTokens)
	e.int(t.tokensAt)
	e.int(int64(t.tokensLen))
	e.spilled(t.text)
	e.int(t.TextCut)
	e.string(t.Finish)
	e.int(t.LatencyMS)
	e.uint(t.Batch)
	e.int(t.Staleness)
	e.ints(t.SegmentStaleness)
	e.bools(t.SegmentTrained)
	e.bool(t.Trained)
}

func decodeTurnRecord(v []byte) (*Turn, error) {
	d := rowDecoder{b: v}
	t := &Turn{Seq: d.uint()}
	t.Partition = d.int32()
	t.Offset = d.int()
	t.Attempt = d.string()
	t.Turn = int(d.int())
	t.PromptTokens = d.int()
	t.CompletionTokens = d.int()
	t.Cached = d.int()
	t.SegmentStarts = d.ints()
	t.SegmentVersions = d.ints()
	t.ObservationTokens = d.int()
	t.InlineTokens = d.int()
	t.tokensAt = d.int()
	t.tokensLen = int(d.int())
	t.text = d.spilled()
	t.TextCut = d.int()
	t.Finish = d.string()
	t.LatencyMS = d.int()
	t.Batch = d.uint()
	t.Staleness = d.int()
	t.SegmentStaleness = d.ints()
	t.SegmentTrained = d.bools()
	t.Trained = d.bool()
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("%w (a turn)", err)
	}
	return t, nil
}

func (e *rowEncoder) call(c *ToolCall) {
	e.uint(c.Seq)
	e.string(c.Attempt)
	e.int(int64(c.Turn))
	e.int(int64(c.Call))
	e.string(c.Tool)
	e.int(int64(c.ExitCode))
	e.int(c.DurationMS)
	e.int(c.OutputBytes)
	e.bool(c.ToFile)
	e.bool(c.Background)
	e.bool(c.TimedOut)
	e.spilled(c.input)
	e.spilled(c.output)
	e.int(c.InputCut)
	e.int(c.OutputCut)
}

func decodeCall(v []byte) (*ToolCall, error) {
	d := rowDecoder{b: v}
	c := &ToolCall{Seq: d.uint()}
	c.Attempt = d.string()
	c.Turn = int(d.int())
	c.Call = int(d.int())
	c.Tool = d.string()
	c.ExitCode = int(d.int())
	c.DurationMS = d.int()
	c.OutputBytes = d.int()
	c.ToFile = d.bool()
	c.Background = d.bool()
	c.TimedOut = d.bool()
	c.input = d.spilled()
	c.output = d.spilled()
	c.InputCut = d.int()
	c.OutputCut = d.int()
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("%w (a tool call)", err)
	}
	return c, nil
}

func (e *rowEncoder) judgement(j *judgement) {
	e.uint(j.Batch)
	e.int(j.Staleness)
	e.bool(j.Trained)
	e.ints(j.SegmentStaleness)
	e.bools(j.SegmentTrained)
}

func decodeJudgement(v []byte) (judgement, error) {
	d := rowDecoder{b: v}
	j := judgement{Batch: d.uint(), Staleness: d.int(), Trained: d.bool(), SegmentStaleness: d.ints(), SegmentTrained: d.bools()}
	if err := d.done(); err != nil {
		return judgement{}, fmt.Errorf("%w (a judgement)", err)
	}
	return j, nil
}
