package dataset

import (
	"errors"
	"reflect"
	"testing"
	"unsafe"
)

// fill gives every field of the struct v points to, exported or not, a
// value of its own (numbers counting up from *n, strings naming them,
// lists of two), so that a field the row codec forgets, or two it swaps,
// reads back different.
func fill(t *testing.T, v reflect.Value, n *int64) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		*n++
		switch f.Kind() {
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(-*n * 1000003)
		case reflect.Uint64:
			f.SetUint(uint64(*n) << 40)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString("field " + v.Type().Field(i).Name)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 2, 2)
			for j := range 2 {
				switch e := s.Index(j); e.Kind() {
				case reflect.Int64:
					e.SetInt(*n*10 + int64(j))
				case reflect.Bool:
					e.SetBool(j == 1)
				default:
					t.Fatalf("fill: no values for a list of %s", e.Kind())
				}
			}
			f.Set(s)
		case reflect.Struct:
			fill(t, f, n)
		default:
			t.Fatalf("fill: no value for field %s of kind %s", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// TestRowCodecRoundTrip: every field of a turn, a tool call and a
// judgement reads back as written, a nil list nil and an empty one
// empty, so the tables written from the row store are those of the fold.
func TestRowCodecRoundTrip(t *testing.T) {
	var n int64
	turn, call, judged := &Turn{}, &ToolCall{}, &judgement{}
	fill(t, reflect.ValueOf(turn).Elem(), &n)
	fill(t, reflect.ValueOf(call).Elem(), &n)
	fill(t, reflect.ValueOf(judged).Elem(), &n)

	var e rowEncoder
	e.turn(turn)
	gotTurn, err := decodeTurnRecord(e.b)
	if err != nil || !reflect.DeepEqual(gotTurn, turn) {
		t.Errorf("turn: got %+v, %v; want %+v", gotTurn, err, turn)
	}
	e.b = e.b[:0]
	e.call(call)
	gotCall, err := decodeCall(e.b)
	if err != nil || !reflect.DeepEqual(gotCall, call) {
		t.Errorf("tool call: got %+v, %v; want %+v", gotCall, err, call)
	}
	e.b = e.b[:0]
	e.judgement(judged)
	gotJudged, err := decodeJudgement(e.b)
	if err != nil || !reflect.DeepEqual(&gotJudged, judged) {
		t.Errorf("judgement: got %+v, %v; want %+v", gotJudged, err, judged)
	}

	empty := &Turn{Attempt: "a", SegmentStarts: []int64{}, SegmentTrained: []bool{}}
	e.b = e.b[:0]
	e.turn(empty)
	got, err := decodeTurnRecord(e.b)
	switch {
	case err != nil:
		t.Fatal(err)
	case got.SegmentStarts == nil || got.SegmentTrained == nil:
		t.Errorf("empty lists read back nil: %+v", got)
	case got.SegmentVersions != nil || got.SegmentStaleness != nil:
		t.Errorf("nil lists read back empty: %+v", got)
	}
}

// TestRowCodecRefusesCorrupt: a row cut short or run long is an error,
// never a panic or a row made up.
func TestRowCodecRefusesCorrupt(t *testing.T) {
	var n int64
	turn, call := &Turn{}, &ToolCall{}
	fill(t, reflect.ValueOf(turn).Elem(), &n)
	fill(t, reflect.ValueOf(call).Elem(), &n)
	var e rowEncoder
	e.turn(turn)
	turnRow := e.b
	e = rowEncoder{}
	e.call(call)
	callRow := e.b
	e = rowEncoder{}
	e.judgement(&judgement{Batch: 3, SegmentStaleness: []int64{1, 2}, SegmentTrained: []bool{true, false}})
	judgementRow := e.b
	decoders := map[string]struct {
		row    []byte
		decode func([]byte) error
	}{
		"turn":      {turnRow, func(b []byte) error { _, err := decodeTurnRecord(b); return err }},
		"tool call": {callRow, func(b []byte) error { _, err := decodeCall(b); return err }},
		"judgement": {judgementRow, func(b []byte) error { _, err := decodeJudgement(b); return err }},
	}
	for name, c := range decoders {
		for cut := range len(c.row) {
			if err := c.decode(c.row[:cut]); !errors.Is(err, errRowCorrupt) {
				t.Errorf("%s cut to %d of %d bytes: got %v, want a corrupt row", name, cut, len(c.row), err)
			}
		}
		if err := c.decode(append(c.row[:len(c.row):len(c.row)], 0)); !errors.Is(err, errRowCorrupt) {
			t.Errorf("%s with a byte more: got %v, want a corrupt row", name, err)
		}
	}
	// A boolean is 0 or 1.
	bad := append([]byte(nil), judgementRow...)
	bad[2] = 2 // Batch 3 and Staleness 0 take a byte each; then Trained
	if _, err := decodeJudgement(bad); !errors.Is(err, errRowCorrupt) {
		t.Errorf("a boolean of 2: got %v, want a corrupt row", err)
	}
}
