package events

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/segmentio/asm/ascii"
)

// longString is the length from which validString searches a string with
// vector instructions rather than eight bytes at a time.
const longString = 256

// validJSON reports whether b is one JSON value (RFC 8259) with optional
// white space around it, for b already known to be valid UTF-8, and
// whether that value, inside depth arrays and objects, nests them no
// deeper than [MaxDepth]: a value that would is reported false, so that
// a true answer also stands for checkDepth's. It is the fast path's
// validator (canonenv.go): one pass, strings read eight bytes at a time.
// The general validator first scans its whole input for bytes outside
// printable ASCII and for backslashes, then parses; on the short data of
// a fact that prepass was two thirds of its time.
func validJSON(b []byte, depth int) bool {
	i := skipSpace(b, 0)
	i, ok := validValue(b, i, depth)
	return ok && skipSpace(b, i) == len(b)
}

// validValue returns the index just past the valid value at b[i], which
// depth arrays and objects enclose.
func validValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return validString(b, i)
	case c == '{':
		if depth >= MaxDepth {
			return i, false
		}
		return validObject(b, i, depth+1)
	case c == '[':
		if depth >= MaxDepth {
			return i, false
		}
		return validArray(b, i, depth+1)
	case c == '-' || c >= '0' && c <= '9':
		return validNumber(b, i)
	case c == 't':
		return validLiteral(b, i, "true")
	case c == 'f':
		return validLiteral(b, i, "false")
	case c == 'n':
		return validLiteral(b, i, "null")
	}
	return i, false
}

func validLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func validObject(b []byte, i, depth int) (int, bool) {
	i, _, ok := validObjectMembers(b, i, depth, nil, false)
	return i, ok
}

// validObjectMembers is validObject, appending each member to dst as
// scanObjectMembers cuts them when collect is set.
func validObjectMembers(b []byte, i, depth int, dst []rawMember, collect bool) (int, []rawMember, bool) {
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, dst, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, dst, false
		}
		start := i
		var ok bool
		if i, ok = validString(b, i); !ok {
			return i, dst, false
		}
		end := i
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return i, dst, false
		}
		val := skipSpace(b, i+1)
		if i, ok = validValue(b, val, depth); !ok {
			return i, dst, false
		}
		if collect {
			key := b[start+1 : end-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				key = []byte(unquoteKey(b[start:end]))
			}
			dst = append(dst, rawMember{key, b[val:i]})
		}
		var more bool
		if i, more, ok = validNext(b, i, '}'); !more {
			return i, dst, ok
		}
	}
}

// validMembers is validJSON of b, inside depth arrays and objects, for an
// object, collecting its members as scanObjectMembers cuts them: the fast
// path's one pass over a fact's data, where validating it and then
// cutting its members were two.
func validMembers(b []byte, depth int, dst []rawMember) ([]rawMember, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' || depth >= MaxDepth {
		return dst, false
	}
	i, dst, ok := validObjectMembers(b, i, depth+1, dst, true)
	return dst, ok && skipSpace(b, i) == len(b)
}

func validArray(b []byte, i, depth int) (int, bool) {
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = validValue(b, i, depth); !ok {
			return i, false
		}
		var more bool
		if i, more, ok = validNext(b, i, ']'); !more {
			return i, ok
		}
	}
}

// validNext reads what follows a member or an element ending at b[i]: a
// comma, past which the next one begins (more), or the closing byte.
func validNext(b []byte, i int, closer byte) (next int, more, ok bool) {
	if i = skipSpace(b, i); i < len(b) {
		switch b[i] {
		case ',':
			return skipSpace(b, i+1), true, true
		case closer:
			return i + 1, false, true
		}
	}
	return i, false, false
}

// Words of eight bytes, for finding the bytes a string stops at.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// escapeBytes marks, by its high bit, each byte of the word w (eight
// bytes, little-endian) that a JSON string cannot hold as it stands: a
// backslash or a control character. Bytes of 0x80 and above are never
// marked; a byte above a marked one may be, so the word is read only as
// holding one or not, or up to its lowest mark.
func escapeBytes(w uint64) uint64 {
	slash := w ^ ('\\' * lsb)
	return (((slash - lsb) &^ slash) | (w - 0x20*lsb)) &^ w & msb
}

// validString returns the index just past the valid string at b[i]. Bytes
// of 0x80 and above are the valid UTF-8 the caller checked.
func validString(b []byte, i int) (int, bool) {
	i++
	// A long string (base64 of token arrays) is read by the vectorized
	// searches of the standard library and segmentio/asm instead: its end,
	// then whether anything before it needs the careful loop below.
	if len(b)-i >= longString {
		if j := bytes.IndexByte(b[i:], '"'); j >= longString {
			if s := b[i : i+j]; bytes.IndexByte(s, '\\') < 0 && ascii.ValidPrint(s) {
				return i + j + 1, true
			}
		}
	}
	for {
		// Eight bytes at a time while none is a quote, a backslash or a
		// control character.
		for len(b)-i >= 8 {
			w := binary.LittleEndian.Uint64(b[i:])
			quote := w ^ ('"' * lsb)
			// A zero byte of quote sets its high bit here, as escapeBytes
			// marks the others.
			stop := ((quote-lsb)&^quote)&^w&msb | escapeBytes(w)
			if stop != 0 {
				i += bits.TrailingZeros64(stop) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || hex4(b[i+2:i+6]) < 0 {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
}

func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return i, false
		}
	}
	return i, true
}
