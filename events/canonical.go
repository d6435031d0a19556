package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
)

// CanonicalJSON is the one JSON encoding the ledger writes bytes with that
// must never change: events ([Encode]) and the projections' decisions
// alike. It is encoding/json's output with struct fields in declaration
// order, map keys sorted, no HTML escaping (text lands verbatim, so `<`,
// `>` and `&` are not rewritten as \u003c and the like) and no trailing
// newline. Floats take encoding/json's shortest form that reads back to
// the same value.
func CanonicalJSON(v any) ([]byte, error) { return AppendCanonicalJSON(nil, v) }

// AppendCanonicalJSON appends the canonical JSON of v to dst: a value of
// megabytes (a batch's manifest) lands behind what dst holds in one copy,
// not in a buffer of its own copied again.
func AppendCanonicalJSON(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// appendData appends the canonical JSON of a fact's data, the wire struct
// v, to out. A struct without binary fields is CanonicalJSON's output;
// one with binary fields is written field by field in the same form, each
// binary field as a base64 string: the text in received when it holds the
// field's (a record just decoded), else the encoding of its values.
func appendData(out []byte, v reflect.Value, received []binaryText) ([]byte, error) {
	s := specOf(v.Type())
	if len(s.binary) == 0 {
		b, err := CanonicalJSON(v.Addr().Interface())
		return append(out, b...), err
	}
	// Room for the binary fields, which are most of such a record.
	room := 256
	for _, i := range s.binary {
		room += strictBase64.EncodedLen(4*v.Field(s.fields[i].index).Len()) + len(s.fields[i].name) + 4 // bytes: room to spare
	}
	out = growBytes(out, room)
	var enc valueEncoder
	out = append(out, '{')
	first := true
	for i := range s.fields {
		fs := &s.fields[i]
		fv := v.Field(fs.index)
		// The omitempty rule of encoding/json; optional fields are exactly
		// those tagged omitempty.
		if fs.optional && isEmptyValue(fv) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendJSONString(out, fs.name)
		out = append(out, ':')
		if fs.format == "" {
			var err error
			if out, err = enc.append(out, fv); err != nil {
				return nil, fmt.Errorf("%s: %w", fs.name, err)
			}
			continue
		}
		out = append(out, '"')
		if j := slices.IndexFunc(received, func(b binaryText) bool { return b.field == i }); j >= 0 {
			out = append(out, received[j].text...)
		} else if fs.format == formatBytes {
			out = appendBase64Bytes(out, fv.Bytes())
		} else if fs.format == formatInt32LE {
			out = appendBase64(out, fv.Interface().([]int32))
		} else {
			out = appendBase64(out, fv.Interface().([]float32))
		}
		out = append(out, '"')
	}
	return append(out, '}'), nil
}

// isEmptyValue is encoding/json's test for omitempty.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// valueEncoder writes single values as CanonicalJSON does, reusing one
// buffer; integers and plain strings skip the reflection.
type valueEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

func (e *valueEncoder) append(out []byte, v reflect.Value) ([]byte, error) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(out, v.Int(), 10), nil
	case reflect.String:
		return appendJSONString(out, v.String()), nil
	case reflect.Bool:
		return strconv.AppendBool(out, v.Bool()), nil
	}
	if e.enc == nil {
		e.enc = json.NewEncoder(&e.buf)
		e.enc.SetEscapeHTML(false)
	}
	e.buf.Reset()
	if err := e.enc.Encode(v.Interface()); err != nil {
		return nil, err
	}
	return append(out, bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))...), nil
}

// appendJSONString appends s as a JSON string exactly as CanonicalJSON
// writes it. Ids, types and times are printable ASCII without quotes or
// backslashes, which it copies; anything else goes through encoding/json.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b, _ := CanonicalJSON(s)
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}
