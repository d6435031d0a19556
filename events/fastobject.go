package events

import (
	"bytes"
	"reflect"
	"strconv"
	"unsafe"
)

// A fact's data is decoded by decodeObjectOf: its members cut and
// validated into a list, matched to fields by name, each value set
// through reflection and checked. For a turn that was half of its
// decoding. A fastObject decodes the same object in one pass, straight
// into the struct's memory, for the shapes nearly every fact has: the
// members in field order, strings, integers, booleans, numbers behind
// pointers and arrays of plain strings set directly, arrays of objects
// and objects decoded the same way; any other member (a binary field, an
// escaped string, a map) goes through decodeField, decodeObjectOf's own
// path for one member.
//
// It decides nothing of its own: an object it cannot decode exactly as
// decodeObjectOf would (another order, an unknown or missing field, a
// value of the wrong type, a value a check refuses, more than it holds
// room for) makes it report false, and the caller decodes the object by
// the general path from the start, which gives the verdict and the
// error. FuzzCanonicalEnvelope holds the two paths to the same events and
// refusals.

// fastOp is how a fastObject reads a member.
type fastOp uint8

const (
	opField      fastOp = iota // decodeField
	opString                   // a string without escapes
	opInt                      // an integer into an int
	opInt64                    // ... an int64
	opInt32                    // ... an int32
	opBool                     // true or false
	opStructs                  // an array of objects
	opPtrStruct                // an object, into a new struct
	opPtrInt                   // an integer, into a new int
	opPtrInt64                 // ... a new int64
	opPtrFloat64               // a number, into a new float64
	opStrings                  // an array of strings without escapes
)

type fastObject struct {
	t       reflect.Type
	s       *spec
	members []fastMember // in field order
}

type fastMember struct {
	key string // the name, quoted
	i   int    // the field's index in s.fields
	fs  *fieldSpec
	off uintptr
	op  fastOp
	// elem decodes the objects of opStructs and opPtrStruct; typ is the
	// slice type or the struct type.
	elem *fastObject
	typ  reflect.Type
}

// maxStrings and maxItems bound the string members of one object and the
// elements of one array a fastObject decodes; past them, the general path.
const (
	maxStrings = 24
	maxItems   = 8
)

// newFastObject compiles the decoding of struct type t, whose spec is s
// and whose nested specs are built.
func newFastObject(t reflect.Type, s *spec) *fastObject {
	o := &fastObject{t: t, s: s, members: make([]fastMember, len(s.fields))}
	for i := range s.fields {
		fs := &s.fields[i]
		m := fastMember{key: `"` + fs.name + `"`, i: i, fs: fs, off: t.Field(fs.index).Offset}
		switch k := fs.typ.Kind(); {
		case fs.format != "":
		case k == reflect.String:
			m.op = opString
		case k == reflect.Int:
			m.op = opInt
		case k == reflect.Int64:
			m.op = opInt64
		case k == reflect.Int32:
			m.op = opInt32
		case k == reflect.Bool:
			m.op = opBool
		case k == reflect.Pointer && fs.typ.Elem().Kind() == reflect.Int:
			m.op = opPtrInt
		case k == reflect.Pointer && fs.typ.Elem().Kind() == reflect.Int64:
			m.op = opPtrInt64
		case k == reflect.Pointer && fs.typ.Elem().Kind() == reflect.Float64:
			m.op = opPtrFloat64
		case k == reflect.Slice && fs.typ.Elem().Kind() == reflect.String:
			m.op = opStrings
		case fs.shape == shapeSliceStruct && fs.elem != nil && fs.elem.object != nil:
			m.op, m.elem, m.typ = opStructs, fs.elem.object, fs.typ
		case fs.shape == shapePtrStruct && fs.elem != nil && fs.elem.object != nil:
			m.op, m.elem, m.typ = opPtrStruct, fs.elem.object, fs.typ.Elem()
		}
		o.members[i] = m
	}
	return o
}

// decode decodes the object at b[i] into the struct at p, inside depth
// arrays and objects, as decodeObjectOf would with path and st: it
// returns the index past the object, or false when it leaves the object
// to decodeObjectOf (whose result the struct then does not hold).
func (o *fastObject) decode(b []byte, i int, p unsafe.Pointer, depth int, path string, st *decodeState) (int, bool) {
	if i >= len(b) || b[i] != '{' || depth >= MaxDepth {
		return i, false
	}
	depth++
	// The string members' texts in b, and where their fields are.
	var spans [maxStrings][2]int
	var offs [maxStrings]uintptr
	nstr := 0
	next := 0
	var rv reflect.Value // the struct, made for decodeField when needed
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			// The next member is a field after the last one's: those
			// between are absent, which only optional fields may be.
			j := next
			for j < len(o.members) && !hasPrefixAt(b, i, o.members[j].key) {
				if !o.members[j].fs.optional {
					return i, false
				}
				j++
			}
			if j == len(o.members) {
				return i, false
			}
			m := &o.members[j]
			next = j + 1
			if i = skipSpace(b, i+len(m.key)); i >= len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
			if i >= len(b) {
				return i, false
			}
			q := unsafe.Add(p, m.off)
			op := m.op
			if op == opString {
				if b[i] != '"' {
					return i, false
				}
				end, ok := validString(b, i)
				if !ok {
					return i, false
				}
				if text := b[i+1 : end-1]; bytes.IndexByte(text, '\\') < 0 {
					// decodeObjectOf's plain string: checked, then cut from
					// one allocation for the object's strings.
					view := unsafe.String(unsafe.SliceData(text), len(text))
					if checkText(view, m.fs, "", false) != nil || st != nil && st.ingest && m.fs.id && hasDotSegment(view) || nstr == maxStrings {
						return i, false
					}
					spans[nstr], offs[nstr] = [2]int{i + 1, end - 1}, m.off
					nstr++
					i = end
				} else {
					op = opField
				}
			}
			switch op {
			case opInt, opInt64, opInt32, opPtrInt, opPtrInt64:
				end, ok := validNumber(b, i)
				if !ok {
					return i, false
				}
				bits := 64
				if op == opInt32 {
					bits = 32
				}
				n, ok := parseInt(b[i:end], bits)
				if !ok || !plainInteger(b[i:end]) || checkNumber(float64(n), m.fs, "") != nil {
					return i, false
				}
				switch op {
				case opInt:
					*(*int)(q) = int(n)
				case opInt64:
					*(*int64)(q) = n
				case opInt32:
					*(*int32)(q) = int32(n)
				case opPtrInt:
					v := int(n)
					*(**int)(q) = &v
				default:
					// A copy: had n's address been taken, every integer
					// read here would be allocated on the heap.
					v := n
					*(**int64)(q) = &v
				}
				i = end
			case opPtrFloat64:
				// The general path reads the number with encoding/json's
				// Unmarshal, which parses it with strconv.ParseFloat; a
				// number it cannot hold (out of range) is an error there.
				end, ok := validNumber(b, i)
				if !ok {
					return i, false
				}
				f, err := strconv.ParseFloat(string(b[i:end]), 64)
				if err != nil || checkNumber(f, m.fs, "") != nil {
					return i, false
				}
				*(**float64)(q) = &f
				i = end
			case opStrings:
				end, ok := decodeStrings(b, i, q, m.fs)
				if !ok {
					return i, false
				}
				i = end
			case opBool:
				switch {
				case hasPrefixAt(b, i, "true"):
					*(*bool)(q) = true
					i += 4
				case hasPrefixAt(b, i, "false"):
					*(*bool)(q) = false
					i += 5
				default:
					return i, false
				}
			case opStructs:
				end, ok := decodeStructs(b, i, q, m, depth, st)
				if !ok {
					return i, false
				}
				i = end
			case opPtrStruct:
				elem := reflect.New(m.typ).UnsafePointer()
				end, ok := m.elem.decode(b, i, elem, depth, "", st.nested())
				if !ok {
					return i, false
				}
				*(*unsafe.Pointer)(q) = elem
				i = end
			case opField:
				end, ok := validValue(b, i, depth)
				if !ok {
					return i, false
				}
				if !rv.IsValid() {
					rv = reflect.NewAt(o.t, p).Elem()
				}
				if decodeField(b[i:end], rv, o.s, m.i, path, st) != nil {
					return i, false
				}
				i = end
			}
			var more, ok bool
			if i, more, ok = validNext(b, i, '}'); !ok {
				return i, false
			}
			if !more {
				break
			}
		}
	}
	for ; next < len(o.members); next++ {
		if !o.members[next].fs.optional {
			return i, false
		}
	}
	text := joinText(b, spans[:nstr])
	for k, sp := range spans[:nstr] {
		n := sp[1] - sp[0]
		*(*string)(unsafe.Add(p, offs[k])), text = text[:n], text[n:]
	}
	return i, true
}

// decodeStructs decodes the array of objects at b[i], member m of an
// object inside depth arrays and objects, into the slice at q.
func decodeStructs(b []byte, i int, q unsafe.Pointer, m *fastMember, depth int, st *decodeState) (int, bool) {
	if b[i] != '[' || depth >= MaxDepth {
		return i, false
	}
	// The elements are validated and counted first, so that the slice is
	// made at its length, as decodeValue makes it.
	var starts [maxItems]int
	n := 0
	j := skipSpace(b, i+1)
	end := j + 1
	if j >= len(b) {
		return i, false
	}
	if b[j] != ']' {
		for {
			e, ok := validValue(b, j, depth+1)
			if !ok || n == maxItems {
				return i, false
			}
			starts[n] = j
			n++
			var more bool
			if j, more, ok = validNext(b, e, ']'); !ok {
				return i, false
			}
			if !more {
				end = j
				break
			}
		}
	}
	out := reflect.MakeSlice(m.typ, n, n)
	base, size := out.UnsafePointer(), m.typ.Elem().Size()
	for k, start := range starts[:n] {
		if _, ok := m.elem.decode(b, start, unsafe.Add(base, uintptr(k)*size), depth+1, "", st.nested()); !ok {
			return i, false
		}
	}
	reflect.NewAt(m.typ, q).Elem().Set(out)
	return end, true
}

// decodeStrings decodes the array of strings at b[i], each without
// escapes and passing checkString for fs, into the []string at q.
func decodeStrings(b []byte, i int, q unsafe.Pointer, fs *fieldSpec) (int, bool) {
	if b[i] != '[' {
		return i, false
	}
	var spans [maxItems][2]int
	n := 0
	j := skipSpace(b, i+1)
	if j >= len(b) {
		return i, false
	}
	end := j + 1
	if b[j] != ']' {
		for {
			if b[j] != '"' || n == maxItems {
				return i, false
			}
			e, ok := validString(b, j)
			if !ok {
				return i, false
			}
			text := b[j+1 : e-1]
			if bytes.IndexByte(text, '\\') >= 0 || checkString(unsafe.String(unsafe.SliceData(text), len(text)), fs, "") != nil {
				return i, false
			}
			spans[n] = [2]int{j + 1, e - 1}
			n++
			var more bool
			if j, more, ok = validNext(b, e, ']'); !ok || j >= len(b) && more {
				return i, false
			}
			if !more {
				end = j
				break
			}
		}
	}
	out := make([]string, n)
	text := joinText(b, spans[:n])
	for k, sp := range spans[:n] {
		out[k], text = text[:sp[1]-sp[0]], text[sp[1]-sp[0]:]
	}
	*(*[]string)(q) = out
	return end, true
}

// joinText is the texts b[spans[k][0]:spans[k][1]] one after another, in
// one allocation that the strings cut from it share, as the general path's
// plainStrings shares one among an object's strings.
func joinText(b []byte, spans [][2]int) string {
	total := 0
	for _, sp := range spans {
		total += sp[1] - sp[0]
	}
	if total == 0 {
		return ""
	}
	buf := make([]byte, 0, total)
	for _, sp := range spans {
		buf = append(buf, b[sp[0]:sp[1]]...)
	}
	return unsafe.String(unsafe.SliceData(buf), total)
}
