package events

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/asm/base64"
)

// Catalogue v2 carries token ids and log-probs as binary: standard base64
// (RFC 4648 §4, padded) of little-endian fixed-width values, inside a JSON
// string (docs/design.md §18.2). The formats a binary field may have:
const (
	// formatInt32LE is int32 values, 4 bytes each, little-endian.
	formatInt32LE = "int32le"
	// formatFloat32LE is IEEE 754 binary32 values, 4 bytes each,
	// little-endian.
	formatFloat32LE = "float32le"
	// formatBytes is bytes as they are (vocabulary.registered's pieces).
	formatBytes = "bytes"
)

var bytesType = reflect.TypeFor[[]byte]()

// base64Pattern is what a binary field's string looks like: whole quanta
// of the standard alphabet, the last one padded. Strict decoding also
// refuses a last quantum whose unused bits are not zero, which the pattern
// cannot say.
const base64Pattern = `^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`

// strictBase64 decodes standard padded base64 and refuses non-zero padding
// bits, so that every byte string has exactly one encoding: the string a
// producer sent is the canonical form of the values it decodes to. The
// package is the standard library's decoder with an AVX2 (amd64) and NEON
// (arm64) kernel for whole blocks, 10 to 15 times faster on token arrays.
var strictBase64 = base64.StdEncoding.Strict()

// littleEndian reports whether the host stores integers little-endian, in
// which case binary values decode straight into the slice's memory.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// decodeBase64 decodes the base64 text into a slice of 4-byte values,
// fresh or (with a) carved from a, returning the byte length decoded and,
// when the text is not strict standard base64, why.
func decodeBase64[T int32 | float32](text []byte, a *wordArena) (_ []T, size int, why string) {
	if len(text)%4 != 0 {
		return nil, 0, base64Problem(text)
	}
	// DecodedLen counts the padding characters as bytes: room for two more
	// than the data, which the slice's last element absorbs.
	room := strictBase64.DecodedLen(len(text))
	var out []T
	if a != nil {
		w := a.take((room + 3) / 4)
		out = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
	} else {
		out = make([]T, (room+3)/4)
	}
	var dst []byte
	if littleEndian {
		dst = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(out)*4)
	} else {
		dst = make([]byte, len(out)*4)
	}
	n, err := strictBase64.Decode(dst, text)
	if err != nil {
		return nil, 0, base64Problem(text)
	}
	if !littleEndian {
		for i := range n / 4 {
			u := binary.LittleEndian.Uint32(dst[4*i:])
			out[i] = *(*T)(unsafe.Pointer(&u))
		}
	}
	return out[:n/4], n, ""
}

// wordArena hands out slices of 4-byte words from chunks it keeps, for
// the decoded binary fields of a batch (see [Canonicalizer]). Chunks are
// not zeroed when reused: every slice handed out is written whole before
// it is read.
type wordArena struct {
	chunk []uint32 // the chunk being carved, len = words handed out
	hint  int      // words the batch may need, the least a new chunk holds
}

// take returns n words of the arena, capped: an append to them cannot run
// into the words taken next.
func (a *wordArena) take(n int) []uint32 {
	if cap(a.chunk)-len(a.chunk) < n {
		// Earlier slices keep the old chunk alive while they are.
		a.chunk = make([]uint32, 0, max(n, a.hint, 2*cap(a.chunk)))
	}
	lo := len(a.chunk)
	a.chunk = a.chunk[:lo+n]
	return a.chunk[lo : lo+n : lo+n]
}

// reset makes the arena's words free again, keeping its latest chunk; a
// chunk made for the next batch, whose JSON text is textBytes long, holds
// at least the words its binary fields can need: base64 holds 3 bytes in
// 4 characters, so 3/16 as many words as the text has bytes.
func (a *wordArena) reset(textBytes int) {
	a.chunk, a.hint = a.chunk[:0], textBytes*3/16+1
}

// base64Problem words why text is not strict standard base64. It runs
// only on refused text, so it may take its time.
func base64Problem(text []byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	body := strings.TrimRight(string(text), "=")
	if pad := len(text) - len(body); pad > 2 {
		return fmt.Sprintf("not base64: %d padding characters at the end, at most 2", pad)
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; strings.IndexByte(alphabet, c) < 0 {
			if c == '=' {
				return fmt.Sprintf("not base64: padding '=' at byte %d, before the end", i)
			}
			r, _ := utf8.DecodeRuneInString(body[i:])
			return fmt.Sprintf("not base64: %q at byte %d is not in the standard alphabet (A-Z a-z 0-9 + /)", r, i)
		}
	}
	if len(text)%4 != 0 {
		return fmt.Sprintf("not base64: %d characters, not a whole number of 4-character groups (padded with '=')", len(text))
	}
	if len(body)%4 == 1 {
		return "not base64: the last group holds a single character"
	}
	return "not base64: the unused bits of the last group are not zero (the encoding is not canonical)"
}

// decodeInt32LE decodes a binary int32le field and checks its values by
// the field's tags. path names the field in errors; its elements are
// path[i].
func decodeInt32LE(text []byte, fs *fieldSpec, path string, a *wordArena) ([]int32, *FieldError) {
	out, size, why := decodeBase64[int32](text, a)
	if why != "" {
		return nil, fieldErr(path, ErrInvalidValue, "%s", why)
	}
	if size%4 != 0 {
		return nil, fieldErr(path, ErrInvalidValue, "%d bytes is not a whole number of int32 values", size)
	}
	if fs.signed && !fs.hasMax {
		return out, nil
	}
	if !fs.signed && !(fs.hasMax && fs.max < 0) {
		// Token ids: one unsigned bound covers the negative values too.
		hi := uint32(math.MaxInt32)
		if fs.hasMax && fs.max < float64(hi) {
			hi = uint32(math.Floor(fs.max))
		}
		if maxUnsigned(out) <= hi {
			return out, nil
		}
	}
	// Some value may be out of bounds: find the first, to name it.
	for i, x := range out {
		if x >= 0 || fs.signed {
			if !fs.hasMax || float64(x) <= fs.max {
				continue
			}
			return nil, fieldErr(fmt.Sprintf("%s[%d]", path, i), ErrInvalidValue, "must be at most %v, got %d", fs.max, x)
		}
		return nil, fieldErr(fmt.Sprintf("%s[%d]", path, i), ErrInvalidValue, "must not be negative, got %d", x)
	}
	return out, nil
}

// decodeFloat32LE decodes a binary float32le field: every value finite,
// and within the field's tags.
func decodeFloat32LE(text []byte, fs *fieldSpec, path string, a *wordArena) ([]float32, *FieldError) {
	out, size, why := decodeBase64[float32](text, a)
	if why != "" {
		return nil, fieldErr(path, ErrInvalidValue, "%s", why)
	}
	if size%4 != 0 {
		return nil, fieldErr(path, ErrInvalidValue, "%d bytes is not a whole number of float32 values", size)
	}
	// Finite values within the tags' bounds pass one test each; NaN fails
	// every comparison.
	lo, hi := -math.MaxFloat32, math.MaxFloat32
	if !fs.signed {
		lo = 0
	}
	if fs.hasMax {
		hi = min(hi, fs.max)
	}
	for i, x := range out {
		if f := float64(x); f >= lo && f <= hi {
			continue
		}
		p := fmt.Sprintf("%s[%d]", path, i)
		f := float64(x)
		switch {
		case math.IsNaN(f):
			return nil, fieldErr(p, ErrInvalidValue, "NaN is not a finite number")
		case math.IsInf(f, 1):
			return nil, fieldErr(p, ErrInvalidValue, "+Inf is not a finite number")
		case math.IsInf(f, -1):
			return nil, fieldErr(p, ErrInvalidValue, "-Inf is not a finite number")
		}
		return nil, checkNumber(f, fs, p)
	}
	return out, nil
}

// maxUnsigned returns the greatest of xs read as unsigned (a negative
// value is greater than every non-negative one), in four running maxima
// without a branch a value: thousands of token ids are checked at about
// the speed of memory.
func maxUnsigned(xs []int32) uint32 {
	var a, b, c, d uint32
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		a, b = max(a, uint32(xs[i])), max(b, uint32(xs[i+1]))
		c, d = max(c, uint32(xs[i+2])), max(d, uint32(xs[i+3]))
	}
	for ; i < len(xs); i++ {
		a = max(a, uint32(xs[i]))
	}
	return max(a, b, c, d)
}

// decodeBytes decodes a binary bytes field.
func decodeBytes(text []byte, path string) ([]byte, *FieldError) {
	if len(text)%4 != 0 {
		return nil, fieldErr(path, ErrInvalidValue, "%s", base64Problem(text))
	}
	out := make([]byte, strictBase64.DecodedLen(len(text)))
	n, err := strictBase64.Decode(out, text)
	if err != nil {
		return nil, fieldErr(path, ErrInvalidValue, "%s", base64Problem(text))
	}
	return out[:n], nil
}

// appendBase64Bytes appends the standard padded base64 of src to dst.
func appendBase64Bytes(dst, src []byte) []byte {
	n := strictBase64.EncodedLen(len(src))
	dst = growBytes(dst, n)
	strictBase64.Encode(dst[len(dst):len(dst)+n], src)
	return dst[:len(dst)+n]
}

// appendBase64 appends the standard padded base64 of values' little-endian
// bytes to dst.
func appendBase64[T int32 | float32](dst []byte, values []T) []byte {
	var src []byte
	if littleEndian {
		src = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(values))), len(values)*4)
	} else {
		src = make([]byte, len(values)*4)
		for i, v := range values {
			binary.LittleEndian.PutUint32(src[4*i:], *(*uint32)(unsafe.Pointer(&v)))
		}
	}
	n := strictBase64.EncodedLen(len(src))
	dst = growBytes(dst, n)
	strictBase64.Encode(dst[len(dst):len(dst)+n], src)
	return dst[:len(dst)+n]
}

// growBytes returns dst with room for n more bytes.
func growBytes(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]byte, len(dst), 2*cap(dst)+n)
	copy(out, dst)
	return out
}
