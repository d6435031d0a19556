package events

import (
	"bytes"
	"math"
	"reflect"
	"strconv"
	"unsafe"

	json "github.com/segmentio/encoding/json"
)

// The strict decoder reads records that json.Valid and utf8.Valid have
// already accepted, so splitting an object into its members, or an array
// into its elements, needs no validation of its own: these functions only
// find where each value starts and ends. That replaces an unmarshal into map[string]RawMessage per
// object (a second full parse, a map and a copy of every key) with one pass
// over the bytes and no allocation.

// member is one key and its raw value, trimmed of white space.
type member struct {
	key string
	val []byte
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at b[i].
// Base64 token arrays and long text make strings the bulk of a record: it
// looks for the closing quote and for backslashes with bytes.IndexByte
// (vectorized) rather than byte by byte, in time linear in the string.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		end := i + j
		// Escapes before the quote; one escaping it moves i past it.
		for i <= end {
			k := bytes.IndexByte(b[i:end], '\\')
			if k < 0 {
				return end + 1
			}
			i += k + 2
		}
	}
	return len(b)
}

// structural marks the bytes a container scan stops at.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			// Token arrays hold thousands of numbers: skip them in a tight
			// loop.
			for i < len(b) && !structural[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			default:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// scanObject appends the members of the valid JSON object raw to dst; ok is
// false when raw is not an object. A key given twice keeps its last value,
// as encoding/json does.
func scanObject(raw []byte, dst []member) (_ []member, ok bool) {
	dst, _, ok = scanMembers(raw, dst)
	return dst, ok
}

// scanMembers is scanObject that also names the first key, in document
// order, that repeats an earlier one (nil when none does).
func scanMembers(raw []byte, dst []member) (_ []member, dup *string, ok bool) {
	rms, dup, ok := scanRawMembers(raw, nil)
	for _, m := range rms {
		dst = append(dst, member{string(m.key), m.val})
	}
	return dst, dup, ok
}

// rawMember is a member of an object as decodeObject reads it: the key's
// text without allocating when it holds no escape (the usual key), so
// that looking it up in a spec costs nothing.
type rawMember struct {
	key []byte
	val []byte
}

// scanRawMembers is scanMembers keeping each key as bytes: the text of
// the key, unescaped (an escaped key alone is copied).
func scanRawMembers(raw []byte, dst []rawMember) (_ []rawMember, dup *string, ok bool) {
	n := len(dst)
	dst, ok = scanObjectMembers(raw, dst)
	dup, kept := firstDuplicate(dst[n:])
	return dst[:n+len(kept)], dup, ok
}

// scanObjectMembers appends every member of the valid JSON object raw to
// dst, a repeated key as often as it is given; ok is false when raw is not
// an object.
func scanObjectMembers(raw []byte, dst []rawMember) (_ []rawMember, ok bool) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return dst, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return dst, true
	}
	for i < len(raw) {
		end := skipString(raw, i)
		key := raw[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(unquoteKey(raw[i:end]))
		}
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // ':'
		end = skipValue(raw, i)
		val := raw[i:end]
		dst = append(dst, rawMember{key, val})
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == '}' {
			break
		}
		i = skipSpace(raw, i+1) // ','
	}
	return dst, true
}

// scanArray returns the elements of the valid JSON array raw; ok is false
// when raw is not an array.
func scanArray(raw []byte) (items [][]byte, ok bool) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '[' {
		return nil, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return [][]byte{}, true
	}
	for i < len(raw) {
		end := skipValue(raw, i)
		items = append(items, raw[i:end])
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ']' {
			break
		}
		i = skipSpace(raw, i+1)
	}
	return items, true
}

// unquoteKey returns the text of the JSON string q.
func unquoteKey(q []byte) string {
	if len(q) >= 2 && bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1])
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return string(q)
	}
	return s
}

// unescapedText is the text of the JSON string raw when it holds no
// escape: the bytes between its quotes, as they decode.
func unescapedText(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw[1:len(raw)-1], '\\') >= 0 {
		return nil, false
	}
	return raw[1 : len(raw)-1], true
}

// decodeScalar fills fv from raw without reflection for the plain kinds
// whose JSON form is unambiguous: unescaped strings, integers, booleans. It
// reports false when raw needs the general decoder, which then also
// produces the error for a value that does not fit.
func decodeScalar(raw []byte, fv reflect.Value) bool {
	switch fv.Kind() {
	case reflect.String:
		text, ok := unescapedText(raw)
		if ok {
			fv.SetString(string(text))
		}
		return ok
	case reflect.Int, reflect.Int32, reflect.Int64:
		if !plainInteger(raw) {
			return false
		}
		bits := 64
		if fv.Kind() == reflect.Int32 {
			bits = 32
		}
		n, ok := parseInt(raw, bits)
		if ok {
			fv.SetInt(n)
		}
		return ok
	case reflect.Slice:
		switch fv.Type() {
		case int32sType:
			if out, ok := decodeInt32s(raw); ok {
				fv.Set(reflect.ValueOf(out))
				return true
			}
		case float32sType:
			if out, ok := decodeFloat32s(raw); ok {
				fv.Set(reflect.ValueOf(out))
				return true
			}
		}
	case reflect.Bool:
		switch string(raw) {
		case "true":
			fv.SetBool(true)
			return true
		case "false":
			fv.SetBool(false)
			return true
		}
	}
	return false
}

// plainInteger reports whether raw, a JSON number, is an integer written
// with digits alone (and a leading minus), the form decodeScalar reads.
func plainInteger(raw []byte) bool {
	for j, c := range raw {
		if !(c >= '0' && c <= '9' || c == '-' && j == 0) {
			return false
		}
	}
	return true
}

// parseInt is strconv.ParseInt(string(raw), 10, bits) of a JSON integer
// (an optional minus and decimal digits), ok when it fits: the integers
// of facts are counts and indexes, short enough to read without
// strconv's generality, which was a thirtieth of decoding one.
func parseInt(raw []byte, bits int) (int64, bool) {
	digits := raw
	neg := len(raw) > 0 && raw[0] == '-'
	if neg {
		digits = raw[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		n, err := strconv.ParseInt(string(raw), 10, bits)
		return n, err == nil
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0') // 18 digits stay below 1<<63
	}
	if neg {
		n = -n
	}
	if bits == 32 && (n < math.MinInt32 || n > math.MaxInt32) {
		return 0, false
	}
	return n, true
}

var (
	int32sType   = reflect.TypeFor[[]int32]()
	float32sType = reflect.TypeFor[[]float32]()
)

// decodeInt32s reads a token array: a JSON array of integers that fit an
// int32. Anything else (a fraction, an exponent, null, a string, a value
// out of range) reports false and is left to the general decoder.
func decodeInt32s(raw []byte) ([]int32, bool) {
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false
	}
	out := make([]int32, 0, bytes.Count(raw, []byte{','})+1)
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return out, true
	}
	for i < len(raw) {
		neg := raw[i] == '-'
		if neg {
			i++
		}
		start := i
		var v int64
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			if v = v*10 + int64(raw[i]-'0'); v > 1<<31 {
				return nil, false
			}
			i++
		}
		if i == start {
			return nil, false
		}
		if neg {
			v = -v
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, false
		}
		out = append(out, int32(v))
		i = skipSpace(raw, i)
		if i < len(raw) && raw[i] == ']' {
			return out, true
		}
		if i >= len(raw) || raw[i] != ',' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
	}
	return nil, false
}

// decodeFloat32s reads a logprob array: a JSON array of numbers, each
// parsed as encoding/json parses a float32 (strconv.ParseFloat with
// bitSize 32). Anything but numbers reports false.
func decodeFloat32s(raw []byte) ([]float32, bool) {
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false
	}
	out := make([]float32, 0, bytes.Count(raw, []byte{','})+1)
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return out, true
	}
	for i < len(raw) {
		if c := raw[i]; c != '-' && (c < '0' || c > '9') {
			return nil, false
		}
		end := skipValue(raw, i)
		f, err := strconv.ParseFloat(unsafe.String(&raw[i], end-i), 32)
		if err != nil {
			return nil, false
		}
		out = append(out, float32(f))
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ']' {
			return out, true
		}
		if i >= len(raw) || raw[i] != ',' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
	}
	return nil, false
}

// loneSurrogate finds the first \u escape in the valid JSON value raw
// that spells half of a UTF-16 surrogate pair without its other half: a
// high surrogate (\uD800-\uDBFF) not followed at once by an escaped low
// one (\uDC00-\uDFFF), or a low one on its own. JSON parsers turn such an
// escape into U+FFFD, or into a string that is not Unicode; either way not
// the text that was sent. esc is the escape as written.
func loneSurrogate(raw []byte) (esc string, ok bool) {
	for i := 0; ; {
		k := bytes.IndexByte(raw[i:], '\\')
		if k < 0 {
			return "", false
		}
		i += k
		if i+1 < len(raw) && raw[i+1] != 'u' {
			i += 2 // \" \\ \/ \b \f \n \r \t
			continue
		}
		if i+6 > len(raw) {
			return "", false // not valid JSON: the parser says so
		}
		switch r := hex4(raw[i+2 : i+6]); {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo := hex4(raw[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
					i += 12
					continue
				}
			}
			return string(raw[i : i+6]), true
		case r >= 0xDC00 && r < 0xE000:
			return string(raw[i : i+6]), true
		}
		i += 6
	}
}

// hex4 is the value of four hex digits, or -1.
func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// firstDuplicate is the first key, in document order, that repeats an
// earlier one of members (nil when none does), and the members with each
// repeat's last value kept in its first place, in members' own array.
func firstDuplicate(members []rawMember) (dup *string, kept []rawMember) {
	kept = members[:0]
	for _, m := range members {
		seen := false
		for j := range kept {
			if bytes.Equal(kept[j].key, m.key) {
				kept[j].val, seen = m.val, true
				if dup == nil {
					k := string(m.key)
					dup = &k
				}
				break
			}
		}
		if !seen {
			kept = append(kept, m)
		}
	}
	return dup, kept
}
