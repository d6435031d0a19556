package events

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	json "github.com/segmentio/encoding/json"
)

// MaxTextBytes bounds every string field of a fact.
const MaxTextBytes = 64 << 10

// spec is what the strict decoder knows of one struct type: its fields in
// declaration order and the rules their tags declare. Specs are built once
// per type and shared.
type spec struct {
	fields []fieldSpec
	byName map[string]int
	// nested lists the fields holding objects (structs, arrays of structs),
	// whose rules run before the type's own; ruled, those of them whose
	// objects have rules, or hold objects that do.
	nested []int
	ruled  []int
	rules  *compiledRules
	// fast is rules compiled to plain reads (rulesfast.go), nil when a
	// rule has a form not compiled or the type holds objects with rules.
	fast fastRules
	// object decodes the type's objects in one pass (fastobject.go).
	object *fastObject
	// binary lists the fields carried as base64 binary (catalogue v2).
	binary []int
	// emptyable lists the fields dropEmptyOptional visits.
	emptyable []int
}

type fieldSpec struct {
	name string
	// dataPath is "data." + name: the field's path in errors when it is a
	// member of a fact's data, the common case, made once.
	dataPath   string
	index      int
	typ        reflect.Type
	optional   bool
	id         bool
	signed     bool
	allowEmpty bool
	hasMax     bool
	max        float64
	enum       []string
	// maxBytes bounds a string below MaxTextBytes (0: no tighter bound).
	maxBytes int
	// holdsObjects marks a field whose value is decoded as objects of
	// their own (a struct, an array of structs, the envelope's raw data),
	// each of whose fields is checked where it is decoded.
	holdsObjects bool
	// format, for a binary field, is formatInt32LE or formatFloat32LE:
	// the field travels as base64 of those values, and the other tags
	// bound each value.
	format string
	// shape is how decodeValue reads the field; elem, for a field holding
	// objects, is their struct's spec. Both are worked out once here, not
	// from the field's reflect.Type for every value.
	shape fieldShape
	elem  *spec
}

// fieldShape is what decodeValue does with a field's value.
type fieldShape uint8

const (
	shapeScalar      fieldShape = iota // decodeScalar, else the general decoder
	shapeRaw                           // json.RawMessage: the value's text
	shapeStruct                        // an object, into the struct
	shapePtrStruct                     // an object, into a new struct
	shapeSliceStruct                   // an array of objects
	shapeMap                           // an object of scalars
)

// specs holds every spec built, in a map that is replaced, never written
// to, when a type is added: decoding looks up a spec a few times a fact,
// and a plain map read is several times cheaper than a sync.Map's. Types
// are few and are all added at their first decode.
var (
	specs    atomic.Pointer[map[reflect.Type]*spec]
	specsAdd sync.Mutex
)

func specOf(t reflect.Type) *spec {
	if m := specs.Load(); m != nil {
		if s, ok := (*m)[t]; ok {
			return s
		}
	}
	return buildSpec(t)
}

func buildSpec(t reflect.Type) *spec {
	s := &spec{byName: map[string]int{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fs := fieldSpec{name: name, dataPath: "data." + name, index: i, typ: f.Type, optional: f.Type.Kind() == reflect.Pointer}
		for opt := range strings.SplitSeq(f.Tag.Get("rl"), ",") {
			key, val, _ := strings.Cut(opt, "=")
			switch key {
			case "optional":
				fs.optional = true
			case "id":
				fs.id = true
			case "signed":
				fs.signed = true
			case "empty":
				fs.allowEmpty = true
			case "max":
				m, err := strconv.ParseFloat(val, 64)
				if err != nil {
					panic(fmt.Sprintf("events: bad max tag on %s.%s", t.Name(), f.Name))
				}
				fs.hasMax, fs.max = true, m
			case "enum":
				fs.enum = strings.Split(val, "|")
			case "maxbytes":
				n, err := strconv.Atoi(val)
				if err != nil || n < 1 || n > MaxTextBytes {
					panic(fmt.Sprintf("events: bad maxbytes tag on %s.%s", t.Name(), f.Name))
				}
				fs.maxBytes = n
			case formatInt32LE, formatFloat32LE, formatBytes:
				fs.format = key
			case "":
			default:
				panic(fmt.Sprintf("events: unknown rl tag %q on %s.%s", key, t.Name(), f.Name))
			}
		}
		if fs.format != "" {
			want := map[string]reflect.Type{formatInt32LE: int32sType, formatFloat32LE: float32sType, formatBytes: bytesType}[fs.format]
			if f.Type != want || !fs.optional {
				panic(fmt.Sprintf("events: %s.%s: a %s field is an optional %s", t.Name(), f.Name, fs.format, want))
			}
			s.binary = append(s.binary, len(s.fields))
		}
		if et := f.Type; et.Kind() == reflect.Struct && et != rawMessageType ||
			(et.Kind() == reflect.Slice || et.Kind() == reflect.Pointer) && et.Elem().Kind() == reflect.Struct {
			s.nested = append(s.nested, len(s.fields))
			fs.holdsObjects = true
		}
		if f.Type == rawMessageType {
			fs.holdsObjects = true
		}
		switch et := f.Type; {
		case et == rawMessageType:
			fs.shape = shapeRaw
		case et.Kind() == reflect.Struct:
			fs.shape = shapeStruct
		case et.Kind() == reflect.Pointer && et.Elem().Kind() == reflect.Struct:
			fs.shape = shapePtrStruct
		case et.Kind() == reflect.Slice && et.Elem().Kind() == reflect.Struct:
			fs.shape = shapeSliceStruct
		case et.Kind() == reflect.Map:
			fs.shape = shapeMap
		}
		s.byName[name] = len(s.fields)
		s.fields = append(s.fields, fs)
	}
	s.emptyable = emptyable(s)
	s.rules = compileRules(t, s)
	for _, i := range s.nested {
		et := s.fields[i].typ
		if et.Kind() != reflect.Struct {
			et = et.Elem()
		}
		inner := specOf(et)
		s.fields[i].elem = inner
		if inner.rules != nil || len(inner.ruled) > 0 {
			s.ruled = append(s.ruled, i)
		}
	}
	if len(s.ruled) == 0 {
		s.fast = compileFastRules(t, s.rules)
	}
	s.object = newFastObject(t, s)
	specsAdd.Lock()
	defer specsAdd.Unlock()
	var next map[reflect.Type]*spec
	if m := specs.Load(); m != nil {
		if actual, ok := (*m)[t]; ok {
			return actual // built meanwhile by another goroutine
		}
		next = maps.Clone(*m)
	} else {
		next = map[reflect.Type]*spec{}
	}
	next[t] = s
	specs.Store(&next)
	return s
}

// emptyable lists the fields of s that dropEmptyOptional visits: optional
// arrays and maps, and structs (or pointers to them) that may hold some.
func emptyable(s *spec) []int {
	var out []int
	for i, fs := range s.fields {
		switch t := fs.typ; t.Kind() {
		case reflect.Slice, reflect.Map:
			if fs.optional && t != rawMessageType {
				out = append(out, i)
			}
		case reflect.Struct:
			out = append(out, i)
		case reflect.Pointer:
			if t.Elem().Kind() == reflect.Struct {
				out = append(out, i)
			}
		}
	}
	return out
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// decodeState collects what decoding a fact's data learned beyond its
// values: the text of each binary field, which strict decoding proved to
// be the one canonical encoding of the field's values, so that the
// canonical record copies it rather than encode the values again.
//
// ingest marks a new fact on its way into the log (DecodeBatch,
// CanonicalBatch), held to what a producer may send today: no escape of a
// lone UTF-16 surrogate in any string, no "." or ".." path segment in an
// entity id. A record already in the log is read as it was written, so a
// replay of an old log decides what it decided then.
type decodeState struct {
	binary []binaryText
	ingest bool
	// inner marks the shared state of the objects inside a fact, which
	// collects nothing.
	inner bool
	// arena, when set, is where the data's own binary fields decode to
	// (see Canonicalizer).
	arena *wordArena
	// general keeps the data off its one-pass decoding (fastobject.go),
	// for the tests that hold that to the general path.
	general bool
	// enclosing counts the arrays around the record: 1 for an event of a
	// batch, read without checkDepth's pass over the whole body (see
	// decodeBatchFast).
	enclosing int
}

// dataDepth is how many arrays and objects enclose a fact's data: its
// record's object, and the arrays around the record. The fast path's
// validation bounds the data's nesting from there.
func (st *decodeState) dataDepth() int {
	if st == nil {
		return 1
	}
	return 1 + st.enclosing
}

// words is the arena the data's own binary fields decode into, or nil
// for fresh slices.
func (st *decodeState) words() *wordArena {
	if st == nil || st.inner {
		return nil
	}
	return st.arena
}

// ingestInner is the state of every object inside a fact on its way in:
// shared, read-only, so that a nested object costs no allocation.
var ingestInner = &decodeState{ingest: true, inner: true}

// nested is the state of an object inside the one st decodes: it holds
// to the same rules, and collects no binary text (only the data's own
// binary fields are copied into the record).
func (st *decodeState) nested() *decodeState {
	if st == nil || !st.ingest {
		return nil
	}
	return ingestInner
}

// binaryText is the base64 text of the binary field at index field of the
// data's spec, as received (unescaped).
type binaryText struct {
	field int
	text  []byte
}

// decodeObject fills the struct rv, whose spec is s, from the JSON object
// raw, refusing unknown, missing, null and mistyped fields, and checking
// the tag rules. path prefixes field names in errors. st, when not nil,
// collects the text of the object's own binary fields.
func decodeObject(raw []byte, rv reflect.Value, s *spec, path string, st *decodeState) *FieldError {
	return decodeObjectOf(raw, rv, s, path, st, false)
}

// decodeObjectOf is decodeObject; with validate, raw is not known to be
// valid JSON, and its members are cut by validMembers, which refuses it
// (as not an object) unless it is.
func decodeObjectOf(raw []byte, rv reflect.Value, s *spec, path string, st *decodeState, validate bool) *FieldError {
	var buf [24]rawMember
	var obj []rawMember
	var ok bool
	if validate {
		obj, ok = validMembers(raw, st.dataDepth(), buf[:0])
	} else {
		obj, ok = scanObjectMembers(raw, buf[:0])
	}
	if !ok {
		return fieldErr(path, ErrWrongType, "want an object, got %s", jsonKind(raw))
	}
	// Each field's value, by its index in s.fields.
	var valsBuf [24][]byte
	var vals [][]byte
	if n := len(s.fields); n <= len(valsBuf) {
		vals = valsBuf[:n]
	} else {
		vals = make([][]byte, n)
	}
	// Canonical records, nearly every one read, give the fields in struct
	// order: each key is then found by looking ahead of the last, with no
	// hashing, and keys met in strictly increasing field order can hold no
	// repeat and no unknown key. Any other order takes the general path.
	next, ordered := 0, true
	for _, m := range obj {
		j := next
		for j < len(s.fields) && s.fields[j].name != string(m.key) {
			j++
		}
		if j == len(s.fields) {
			ordered = false
			break
		}
		vals[j], next = m.val, j+1
	}
	var unknown []string
	if !ordered {
		// A key given twice is refused before anything else: which of its
		// values counts differs between JSON parsers, and a proxy or
		// authorizer reading the body with another one must not see
		// another event than the ledger records.
		dup, kept := firstDuplicate(obj)
		if dup != nil {
			return fieldErr(join(path, *dup), ErrDuplicateField, "%q is given more than once", clip(*dup))
		}
		clear(vals)
		// Unknown fields first, in sorted order so the error is
		// deterministic.
		for _, m := range kept {
			if i, ok := s.byName[string(m.key)]; ok {
				vals[i] = m.val
			} else {
				unknown = append(unknown, string(m.key))
			}
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fieldErr(join(path, unknown[0]), ErrUnknownField, "%q is not a field of %s", unknown[0], describe(path))
	}
	// The object's plain strings (string fields given without escapes,
	// nearly all of them) share one allocation, cut into the fields.
	texts, plain := plainStrings(s, vals)
	for i := range s.fields {
		fs := &s.fields[i]
		val := vals[i]
		if val == nil {
			if fs.optional {
				continue
			}
			return fieldErr(join(path, fs.name), ErrMissingField, "required")
		}
		if i < 64 && plain&(1<<i) != 0 {
			// decodeValue's reading of a string, on the shared text: it has
			// no escape, so no lone surrogate either.
			text := texts[:len(val)-2]
			texts = texts[len(text):]
			rv.Field(fs.index).SetString(text)
			if fe := checkText(text, fs, "", false); fe != nil {
				fe.Field = fs.path(path)
				return fe
			}
			if st != nil && st.ingest && fs.id {
				if fe := checkIDSegments(text, fs, path); fe != nil {
					return fe
				}
			}
			continue
		}
		if fe := decodeField(val, rv, s, i, path, st); fe != nil {
			return fe
		}
	}
	return nil
}

// decodeField is the general path of one member of an object: val, the
// value of field i of s, decoded into the struct rv and checked. path is
// the object's.
func decodeField(val []byte, rv reflect.Value, s *spec, i int, path string, st *decodeState) *FieldError {
	fs := &s.fields[i]
	// A field's path is made for errors and for the objects it holds;
	// below the data's own fields it costs an allocation, so a scalar
	// there is decoded under the empty path and its error's field is
	// completed if it fails.
	relative := path != "" && path != "data" && !fs.holdsObjects && fs.format == ""
	var fpath string
	if !relative {
		fpath = fs.path(path)
	}
	if isNull(val) {
		return fieldErr(fs.path(path), ErrWrongType, "null is not allowed")
	}
	ingest := st != nil && st.ingest
	if ingest && !fs.holdsObjects {
		// The general decoder would turn the escape into U+FFFD: text
		// other than what the producer sent.
		if esc, ok := loneSurrogate(val); ok {
			return fieldErr(fs.path(path), ErrInvalidValue, "%s is half of a UTF-16 surrogate pair, alone: not a Unicode character", esc)
		}
	}
	if fs.format != "" {
		text, fe := decodeBinary(val, rv.Field(fs.index), fs, fpath, st.words())
		if fe != nil {
			return fe
		}
		if st != nil && !st.inner && text != nil {
			st.binary = append(st.binary, binaryText{field: i, text: text})
		}
		return nil
	}
	if fe := decodeValue(val, rv.Field(fs.index), fs, fpath, st.nested()); fe != nil {
		if relative {
			// decodeValue names the field "" and its parts "[i]" or ".key".
			fe.Field = fs.path(path) + fe.Field
		}
		return fe
	}
	if ingest && fs.id {
		if fe := checkIDSegments(rv.Field(fs.index).String(), fs, path); fe != nil {
			return fe
		}
	}
	return nil
}

// checkIDSegments refuses, for a new fact, an id field of the object at
// path with a "." or ".." segment.
func checkIDSegments(id string, fs *fieldSpec, path string) *FieldError {
	if hasDotSegment(id) {
		return fieldErr(fs.path(path), ErrInvalidValue, "%q has a . or .. path segment, which would read as a path wherever the id names a file or a URL", clip(id))
	}
	return nil
}

// plainStrings is the text of the string fields of vals given as strings
// without escapes, one after another in field order, and the mask of those
// fields (of the first 64).
func plainStrings(s *spec, vals [][]byte) (string, uint64) {
	var mask uint64
	n := 0
	for i := range min(len(vals), 64) {
		if fs := &s.fields[i]; fs.typ.Kind() != reflect.String || fs.format != "" {
			continue
		}
		text, ok := unescapedText(vals[i])
		if !ok {
			continue
		}
		mask |= 1 << i
		n += len(text)
	}
	if mask == 0 {
		return "", 0
	}
	var b strings.Builder
	b.Grow(n)
	for i := range min(len(vals), 64) {
		if mask&(1<<i) != 0 {
			b.Write(vals[i][1 : len(vals[i])-1])
		}
	}
	return b.String(), mask
}

// decodeBinary fills the []int32 or []float32 fv from raw, a JSON string
// of base64 (see binary.go), and returns the string's text. The empty
// string means absent: fv stays nil and the text is nil.
func decodeBinary(raw []byte, fv reflect.Value, fs *fieldSpec, path string, a *wordArena) ([]byte, *FieldError) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, fieldErr(path, ErrWrongType, "want a base64 string of %s values, got %s", fs.format, jsonKind(raw))
	}
	text := raw[1 : len(raw)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		// Escapes spell the same characters (\/ is /); a control character
		// (\n, which base64 decoders skip) is no base64 character.
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fieldErr(path, ErrWrongType, "want a base64 string of %s values, got %s", fs.format, jsonKind(raw))
		}
		text = []byte(s)
		if i := bytes.IndexAny(text, "\r\n"); i >= 0 {
			return nil, fieldErr(path, ErrInvalidValue, "not base64: %q at byte %d is not in the standard alphabet (A-Z a-z 0-9 + /)", rune(text[i]), i)
		}
	}
	if len(text) == 0 {
		return nil, nil
	}
	switch fs.format {
	case formatBytes:
		out, fe := decodeBytes(text, path)
		if fe != nil {
			return nil, fe
		}
		fv.SetBytes(out)
	case formatInt32LE:
		out, fe := decodeInt32LE(text, fs, path, a)
		if fe != nil {
			return nil, fe
		}
		fv.Set(reflect.ValueOf(out))
	default:
		out, fe := decodeFloat32LE(text, fs, path, a)
		if fe != nil {
			return nil, fe
		}
		fv.Set(reflect.ValueOf(out))
	}
	return text, nil
}

func decodeValue(raw []byte, fv reflect.Value, fs *fieldSpec, path string, st *decodeState) *FieldError {
	switch fs.shape {
	case shapeRaw:
		fv.SetBytes(bytes.TrimSpace(raw))
		return nil
	case shapeStruct:
		return decodeObject(raw, fv, fs.elem, path, st)
	case shapePtrStruct:
		obj := reflect.New(fs.typ.Elem())
		if fe := decodeObject(raw, obj.Elem(), fs.elem, path, st); fe != nil {
			return fe
		}
		fv.Set(obj)
		return nil
	case shapeSliceStruct:
		items, ok := scanArray(raw)
		if !ok {
			return fieldErr(path, ErrWrongType, "want an array of objects, got %s", jsonKind(raw))
		}
		out := reflect.MakeSlice(fs.typ, len(items), len(items))
		for i, item := range items {
			if fe := decodeObject(item, out.Index(i), fs.elem, indexPath(path, i), st); fe != nil {
				return fe
			}
		}
		fv.Set(out)
		return nil
	}
	t := fs.typ
	if fs.shape == shapeMap {
		if k, ok := duplicateKey(raw); ok {
			return fieldErr(path+"."+k, ErrDuplicateField, "key %q is given more than once", clip(k))
		}
	} else if decodeScalar(raw, fv) {
		if fv.Kind() == reflect.String {
			// A string without escapes is a slice of the record, whose
			// UTF-8 was checked whole.
			return checkText(fv.String(), fs, path, false)
		}
		return checkValue(fv, fs, path)
	}
	if fe := refuseInnerNull(raw, t, path); fe != nil {
		return fe
	}
	if err := json.Unmarshal(raw, fv.Addr().Interface()); err != nil {
		if what, ok := outOfRange(raw, t); ok {
			return fieldErr(path, ErrWrongType, "want %s, got %s", want(t), what)
		}
		got := jsonKind(raw)
		// An array or object of the right shape holds a value that does not
		// fit (2147483648 for an int32, say): name that value.
		ute, ok := err.(*json.UnmarshalTypeError)
		if ok && (t.Kind() == reflect.Slice && got == "an array" || t.Kind() == reflect.Map && got == "an object") {
			got += " holding " + elementKind(ute.Value)
		}
		return fieldErr(path, ErrWrongType, "want %s, got %s", want(t), got)
	}
	return checkValue(fv, fs, path)
}

// outOfRange names the number of raw that is too large for the float type
// t, or for the float elements of the array or object t: the JSON is
// valid, the value does not fit, and "a string" or "the number" alone would
// hide that. ok is false when no number of raw is out of range.
func outOfRange(raw []byte, t reflect.Type) (string, bool) {
	bits := func(t reflect.Type) int {
		if k := t.Kind(); k == reflect.Float32 || k == reflect.Float64 {
			return t.Bits()
		}
		return 0
	}
	tooLarge := func(num []byte, bits int) bool {
		if len(num) == 0 || num[0] != '-' && (num[0] < '0' || num[0] > '9') {
			return false
		}
		_, err := strconv.ParseFloat(string(num), bits)
		ne, ok := err.(*strconv.NumError)
		return ok && ne.Err == strconv.ErrRange
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		if num := bytes.TrimSpace(raw); tooLarge(num, t.Bits()) {
			return fmt.Sprintf("the number %s, out of range of a %d-bit float", clip(string(num)), t.Bits()), true
		}
	case reflect.Slice:
		b := bits(t.Elem())
		if b == 0 {
			return "", false
		}
		items, _ := scanArray(raw)
		for i, item := range items {
			if tooLarge(item, b) {
				return fmt.Sprintf("an array whose element %d, %s, is out of range of a %d-bit float", i, clip(string(item)), b), true
			}
		}
	case reflect.Map:
		b := bits(t.Elem())
		if b == 0 {
			return "", false
		}
		members, _ := scanObject(raw, nil)
		for _, m := range members {
			if num := bytes.TrimSpace(m.val); tooLarge(num, b) {
				return fmt.Sprintf("an object whose member %q, %s, is out of range of a %d-bit float", clip(m.key), clip(string(num)), b), true
			}
		}
	}
	return "", false
}

// refuseInnerNull refuses a null inside an array or object of scalars, which
// encoding/json would read as a zero.
func refuseInnerNull(raw []byte, t reflect.Type, path string) *FieldError {
	if !bytes.Contains(raw, []byte("null")) {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil // not an array: the typed decode reports it
		}
		for i, item := range items {
			if isNull(item) {
				return fieldErr(fmt.Sprintf("%s[%d]", path, i), ErrWrongType, "null is not allowed")
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if isNull(m[k]) {
				return fieldErr(path+"."+k, ErrWrongType, "null is not allowed")
			}
		}
	}
	return nil
}

// elementKind names the offending element of an UnmarshalTypeError, whose
// Value is either a kind ("string", "number 2147483648") or, depending on
// the decoder, the raw text from that element on.
func elementKind(v string) string {
	if v == "" {
		return "a value that does not fit"
	}
	switch c := v[0]; {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		end := strings.IndexAny(v, ",]} \t\r\n")
		if end < 0 {
			end = len(v)
		}
		return "a number " + clip(v[:end])
	}
	return "a " + clip(v)
}

// duplicateKey returns the first key of the JSON object raw that repeats
// an earlier one, in document order, unescaped. raw is valid JSON (the
// decoder checked the whole record); anything but an object has no keys.
func duplicateKey(raw []byte) (string, bool) {
	_, dup, ok := scanMembers(raw, nil)
	if !ok || dup == nil {
		return "", false
	}
	return *dup, true
}

func isNull(raw []byte) bool {
	if len(raw) < 4 {
		return false
	}
	if len(raw) == 4 { // a value as the scanners cut it, without white space
		return string(raw) == "null"
	}
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// dropEmptyOptional sets the optional arrays and maps of the struct rv that
// were given empty to nil. The canonical form omits them, so an event decodes
// to the same value as its canonical encoding does. It runs after the
// cross-field checks, which still see what the producer sent.
func dropEmptyOptional(rv reflect.Value, s *spec) {
	for _, i := range s.emptyable {
		fs := &s.fields[i]
		fv := rv.Field(fs.index)
		switch fv.Kind() {
		case reflect.Slice, reflect.Map:
			if fs.optional && fv.Len() == 0 && fs.shape != shapeRaw {
				fv.SetZero()
			}
		case reflect.Struct:
			dropEmptyOptional(fv, fs.elem)
		case reflect.Pointer:
			if !fv.IsNil() && fs.shape == shapePtrStruct {
				dropEmptyOptional(fv.Elem(), fs.elem)
			}
		}
	}
}

// checkValue applies a field's tag rules to its decoded value.
func checkValue(v reflect.Value, fs *fieldSpec, path string) *FieldError {
	switch v.Kind() {
	case reflect.Pointer:
		return checkValue(v.Elem(), fs, path)
	case reflect.Slice:
		// Token arrays hold thousands of elements: check the common element
		// types without reflection, and name the element only on failure.
		switch s := v.Interface().(type) {
		case []int32:
			for i, x := range s {
				if x < 0 && !fs.signed || fs.hasMax && float64(x) > fs.max {
					return checkNumber(float64(x), fs, fmt.Sprintf("%s[%d]", path, i))
				}
			}
			return nil
		case []float32:
			for i, x := range s {
				f := float64(x)
				if x < 0 && !fs.signed || fs.hasMax && f > fs.max || math.IsNaN(f) || math.IsInf(f, 0) {
					return checkValue(reflect.ValueOf(x), fs, fmt.Sprintf("%s[%d]", path, i))
				}
			}
			return nil
		}
		for i := 0; i < v.Len(); i++ {
			if fe := checkValue(v.Index(i), fs, ""); fe != nil {
				fe.Field = fmt.Sprintf("%s[%d]", path, i)
				return fe
			}
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			if fe := checkString(k.String(), &fieldSpec{}, path); fe != nil {
				fe.Detail = "key: " + fe.Detail
				return fe
			}
			if fe := checkValue(v.MapIndex(k), fs, path+"."+k.String()); fe != nil {
				return fe
			}
		}
	case reflect.String:
		return checkString(v.String(), fs, path)
	case reflect.Int, reflect.Int32, reflect.Int64:
		return checkNumber(float64(v.Int()), fs, path)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fieldErr(path, ErrInvalidValue, "not a finite number")
		}
		return checkNumber(f, fs, path)
	}
	return nil
}

func checkNumber(f float64, fs *fieldSpec, path string) *FieldError {
	if !fs.signed && f < 0 {
		return fieldErr(path, ErrInvalidValue, "must not be negative, got %v", f)
	}
	if fs.hasMax && f > fs.max {
		return fieldErr(path, ErrInvalidValue, "must be at most %v, got %v", fs.max, f)
	}
	return nil
}

func checkString(s string, fs *fieldSpec, path string) *FieldError {
	return checkText(s, fs, path, true)
}

// checkText is checkString, with the UTF-8 check left out unless
// utf8Unknown is set: for text known to be valid.
func checkText(s string, fs *fieldSpec, path string, utf8Unknown bool) *FieldError {
	switch {
	case len(s) > MaxTextBytes:
		return fieldErr(path, ErrInvalidValue, "%d bytes, more than %d", len(s), MaxTextBytes)
	case fs.maxBytes > 0 && len(s) > fs.maxBytes:
		return fieldErr(path, ErrInvalidValue, "%d bytes, more than %d", len(s), fs.maxBytes)
	case utf8Unknown && !utf8.ValidString(s):
		return fieldErr(path, ErrInvalidValue, "not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fieldErr(path, ErrInvalidValue, "contains a NUL character")
	case s == "" && !fs.allowEmpty && !fs.optional:
		return fieldErr(path, ErrInvalidValue, "must not be empty")
	case fs.id && !ValidEntityID(s):
		return fieldErr(path, ErrInvalidValue, "%q is not an id ([A-Za-z0-9._:/-]{1,200})", clip(s))
	case fs.enum != nil && !slices.Contains(fs.enum, s):
		return fieldErr(path, ErrInvalidValue, "%q is not one of %s", clip(s), strings.Join(fs.enum, ", "))
	}
	return nil
}

// entityIDPattern is what ingest accepts as an entity id, as a regular
// expression (RE2 and ECMA-262 alike), for the schema: ValidEntityID's
// characters, in segments between slashes none of which is "." or "..".
// The length, 1 to 200, is the schema's minLength and maxLength: a
// pattern without lookahead cannot say both.
const entityIDPattern = `^` + entityIDSegment + `(?:/` + entityIDSegment + `)*$`

// entityIDSegment is one segment of an entity id: empty, or holding a
// character other than '.', or three dots or more.
const entityIDSegment = `(?:\.*[A-Za-z0-9_:-][A-Za-z0-9._:-]*|\.{3,})?`

// maxEntityIDLen bounds an entity id, in bytes (its characters are ASCII).
const maxEntityIDLen = 200

// runIDPattern is ValidRunID as a regular expression: a first character
// other than '.', or ".x", or "..x" (any x), 1 to 128 characters in all.
const runIDPattern = `^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}|\.\.[A-Za-z0-9._-]{1,126})$`

// ValidEntityID reports whether s may name a task, group, attempt, engine,
// vm or source: [A-Za-z0-9._:/-]{1,200}. Ingest also refuses an id with a
// "." or ".." path segment (see hasDotSegment); ids already in the log
// are read as they were written.
func ValidEntityID(s string) bool {
	if len(s) == 0 || len(s) > maxEntityIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if byteClass[s[i]]&classEntity == 0 {
			return false
		}
	}
	return true
}

// hasDotSegment reports whether the id s has a path segment "." or "..":
// is one, starts with "./" or "../", ends with "/." or "/..", or holds
// "/./" or "/../". Ingest refuses such ids: wherever an id becomes part of
// a URL path or a file name, the segment would name another place.
func hasDotSegment(s string) bool {
	if strings.IndexByte(s, '.') < 0 {
		return false
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// ValidRunID reports whether s may name a run: [A-Za-z0-9._-]{1,128}, and
// not "." or "..", which would read as paths wherever a run names a file.
func ValidRunID(s string) bool {
	if len(s) == 0 || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if byteClass[s[i]]&classWord == 0 {
			return false
		}
	}
	return true
}

// The classes of bytes the ids' checks look up: one load and a test a
// byte, where the comparisons were several branches (the envelope's id,
// run and source are checked in every record read).
const (
	classWord     = 1 << iota // [A-Za-z0-9._-]: a run id's characters
	classEntity               // classWord, ':' and '/': an entity id's
	classLowerHex             // [0-9a-f]: a canonical UUID's digits
)

var byteClass = func() (t [256]uint8) {
	for c := range 256 {
		b := byte(c)
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-' {
			t[c] |= classWord | classEntity
		}
		if b == ':' || b == '/' {
			t[c] |= classEntity
		}
		if b >= '0' && b <= '9' || b >= 'a' && b <= 'f' {
			t[c] |= classLowerHex
		}
	}
	return t
}()

// path is the field's path in errors below the object at path.
func (fs *fieldSpec) path(path string) string {
	switch path {
	case "":
		return fs.name
	case "data":
		return fs.dataPath
	}
	return path + "." + fs.name
}

// indexPath is the path of element i of the array at path.
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func describe(path string) string {
	if path == "" {
		return "the envelope"
	}
	return path
}

// jsonKind names the JSON kind of raw for error messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "the number " + clip(string(raw))
	}
}

func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return want(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int32:
		return "a 32-bit integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(want(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(want(t.Elem()), "a ") + "s"
	}
	return t.String()
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "..."
}
