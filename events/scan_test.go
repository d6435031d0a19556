package events

import (
	"bytes"
	"reflect"
	"testing"
	"unicode/utf8"

	json "github.com/segmentio/encoding/json"
)

// The strict decoder splits objects and arrays with scanObject and
// scanArray, and reads plain scalars with decodeScalar, in place of
// encoding/json's map[string]RawMessage, []RawMessage and typed unmarshal.
// These fuzzers hold them to exactly what those did, on any valid JSON in
// valid UTF-8 (decodeOne refuses everything else first).

func scanSeeds(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, ` { "a" : 1 , "b":[1, {"c":"}"}], "d":"x\"y" } `, `{"a":1,"a":2}`, `{"\u0061":true}`,
		`[1,"a",{"b":[]},null, -2.5e3 ]`, `"str"`, `12`, `null`, `{"a":{"b":{"c":[[]]}}}`, `"a\\"`, `-0`, `9223372036854775808`,
		`{"id":"0190a0a0-0000-7000-8000-000000000000","data":{"attempt":"a/1","turn":3}}`,
		`[1, -2 ,2147483647,-2147483648]`, `[2147483648]`, `[1.5,-0.25e-3, 3E+2]`, `[1,null]`, `[ ]`, `[-0.0]`, `[1e40]`, `[0.1,"x"]`,
	} {
		f.Add([]byte(s))
	}
}

func FuzzScanObject(f *testing.F) {
	scanSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return
		}
		var want map[string]json.RawMessage
		wantOK := json.Unmarshal(b, &want) == nil && want != nil
		got, ok := scanObject(b, nil)
		if ok != wantOK {
			t.Fatalf("scanObject(%q) ok=%v, map unmarshal ok=%v", b, ok, wantOK)
		}
		if !ok {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("scanObject(%q) = %d members, want %d", b, len(got), len(want))
		}
		for _, m := range got {
			w, ok := want[m.key]
			if !ok || !bytes.Equal(bytes.TrimSpace(w), m.val) {
				t.Fatalf("scanObject(%q): %q = %q, want %q", b, m.key, m.val, w)
			}
		}
	})
}

func FuzzScanArray(f *testing.F) {
	scanSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return
		}
		var want []json.RawMessage
		wantOK := json.Unmarshal(b, &want) == nil && want != nil
		got, ok := scanArray(b)
		if ok != wantOK {
			t.Fatalf("scanArray(%q) ok=%v, unmarshal ok=%v", b, ok, wantOK)
		}
		if len(got) != len(want) {
			t.Fatalf("scanArray(%q) = %d items, want %d", b, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(bytes.TrimSpace(want[i]), got[i]) {
				t.Fatalf("scanArray(%q)[%d] = %q, want %q", b, i, got[i], want[i])
			}
		}
	})
}

func FuzzDecodeScalar(f *testing.F) {
	scanSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return
		}
		b = bytes.TrimSpace(b)
		for _, v := range []any{new(string), new(int), new(int32), new(int64), new(bool), new(Type), new([]int32), new([]float32)} {
			got := reflect.New(reflect.TypeOf(v).Elem())
			if !decodeScalar(b, got.Elem()) {
				continue
			}
			want := reflect.New(reflect.TypeOf(v).Elem())
			if err := json.Unmarshal(b, want.Interface()); err != nil {
				t.Fatalf("decodeScalar(%q) into %s succeeded, encoding/json refuses it: %v", b, got.Elem().Type(), err)
			}
			if !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Fatalf("decodeScalar(%q) into %s = %v, encoding/json %v", b, got.Elem().Type(), got.Elem(), want.Elem())
			}
		}
	})
}

// skipString finds a string's end whatever its length and wherever its
// escapes fall, an escaped quote or backslash included, as a reading byte
// by byte does.
func TestSkipString(t *testing.T) {
	naive := func(b []byte, i int) int {
		for i++; i < len(b); i++ {
			switch b[i] {
			case '"':
				return i + 1
			case '\\':
				i++
			}
		}
		return len(b)
	}
	for n := 0; n < 72; n++ {
		for _, esc := range []string{``, `\"`, `\\`, `\n`, `\u00e9`, `\\\"`} {
			for at := 0; at <= n; at++ {
				text := bytes.Repeat([]byte{'a'}, n)
				s := append(append(append([]byte{'"'}, text[:at]...), esc...), text[at:]...)
				s = append(s, `","x"`...)
				want := naive(s, 0)
				if got := skipString(s, 0); got != want {
					t.Fatalf("skipString(%s) = %d, want %d", s, got, want)
				}
				var v string
				if err := json.Unmarshal(s[:want], &v); err != nil {
					t.Fatalf("%s: the string skipped, %s, is not one: %v", s, s[:want], err)
				}
			}
		}
	}
}
