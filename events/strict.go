package events

import (
	"bytes"
	"fmt"
	json "github.com/segmentio/encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxTextBytes bounds every string field of a fact.
const MaxTextBytes = 64 << 10

// spec is what the strict decoder knows of one struct type: its fields in
// declaration order and the rules their tags declare. Specs are built once
// per type and shared.
type spec struct {
	fields []fieldSpec
	byName map[string]int
}

type fieldSpec struct {
	name       string
	index      int
	typ        reflect.Type
	optional   bool
	id         bool
	signed     bool
	allowEmpty bool
	hasMax     bool
	max        float64
	enum       []string
}

var specs sync.Map // reflect.Type -> *spec

func specOf(t reflect.Type) *spec {
	if s, ok := specs.Load(t); ok {
		return s.(*spec)
	}
	s := &spec{byName: map[string]int{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fs := fieldSpec{name: name, index: i, typ: f.Type, optional: f.Type.Kind() == reflect.Pointer}
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
			case "":
			default:
				panic(fmt.Sprintf("events: unknown rl tag %q on %s.%s", key, t.Name(), f.Name))
			}
		}
		s.byName[name] = len(s.fields)
		s.fields = append(s.fields, fs)
	}
	actual, _ := specs.LoadOrStore(t, s)
	return actual.(*spec)
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// decodeStrict fills the struct v points to from the JSON object raw,
// refusing unknown, missing, null and mistyped fields, and checking the tag
// rules. path prefixes field names in errors.
func decodeStrict(raw []byte, v any, path string) *FieldError {
	rv := reflect.ValueOf(v).Elem()
	return decodeObject(raw, rv, path)
}

func decodeObject(raw []byte, rv reflect.Value, path string) *FieldError {
	var buf [24]member
	obj, dup, ok := scanMembers(raw, buf[:0])
	if !ok {
		return fieldErr(path, ErrWrongType, "want an object, got %s", jsonKind(raw))
	}
	// A key given twice is refused before anything else: which of its
	// values counts differs between JSON parsers, and a proxy or
	// authorizer reading the body with another one must not see another
	// event than the ledger records.
	if dup != nil {
		return fieldErr(join(path, *dup), ErrDuplicateField, "%q is given more than once", clip(*dup))
	}
	s := specOf(rv.Type())
	// Each field's value, by its index in s.fields; unknown fields first,
	// in sorted order so the error is deterministic.
	var valsBuf [24][]byte
	vals := valsBuf[:0]
	if n := len(s.fields); n <= len(valsBuf) {
		vals = valsBuf[:n]
	} else {
		vals = make([][]byte, n)
	}
	var unknown []string
	for _, m := range obj {
		if i, ok := s.byName[m.key]; ok {
			vals[i] = m.val
		} else {
			unknown = append(unknown, m.key)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fieldErr(join(path, unknown[0]), ErrUnknownField, "%q is not a field of %s", unknown[0], describe(path))
	}
	for i := range s.fields {
		fs := &s.fields[i]
		val := vals[i]
		if val == nil {
			if fs.optional {
				continue
			}
			return fieldErr(join(path, fs.name), ErrMissingField, "required")
		}
		fpath := join(path, fs.name)
		if isNull(val) {
			return fieldErr(fpath, ErrWrongType, "null is not allowed")
		}
		if fe := decodeValue(val, rv.Field(fs.index), fs, fpath); fe != nil {
			return fe
		}
	}
	return nil
}

func decodeValue(raw []byte, fv reflect.Value, fs *fieldSpec, path string) *FieldError {
	t := fv.Type()
	switch {
	case t == rawMessageType:
		fv.SetBytes(bytes.TrimSpace(raw))
		return nil
	case t.Kind() == reflect.Struct:
		return decodeObject(raw, fv, path)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		items, ok := scanArray(raw)
		if !ok {
			return fieldErr(path, ErrWrongType, "want an array of objects, got %s", jsonKind(raw))
		}
		out := reflect.MakeSlice(t, len(items), len(items))
		for i, item := range items {
			if fe := decodeObject(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i)); fe != nil {
				return fe
			}
		}
		fv.Set(out)
		return nil
	}
	if t.Kind() == reflect.Map {
		if k, ok := duplicateKey(raw); ok {
			return fieldErr(path+"."+k, ErrDuplicateField, "key %q is given more than once", clip(k))
		}
	} else if decodeScalar(raw, fv) {
		return checkValue(fv, fs, path)
	}
	if fe := refuseInnerNull(raw, t, path); fe != nil {
		return fe
	}
	if err := json.Unmarshal(raw, fv.Addr().Interface()); err != nil {
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
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// dropEmptyOptional sets the optional arrays and maps of the struct rv that
// were given empty to nil. The canonical form omits them, so an event decodes
// to the same value as its canonical encoding does. It runs after the
// cross-field checks, which still see what the producer sent.
func dropEmptyOptional(rv reflect.Value) {
	for _, fs := range specOf(rv.Type()).fields {
		fv := rv.Field(fs.index)
		switch fv.Kind() {
		case reflect.Slice, reflect.Map:
			if fs.optional && fv.Len() == 0 && fv.Type() != rawMessageType {
				fv.SetZero()
			}
		case reflect.Struct:
			dropEmptyOptional(fv)
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
	switch {
	case len(s) > MaxTextBytes:
		return fieldErr(path, ErrInvalidValue, "%d bytes, more than %d", len(s), MaxTextBytes)
	case !utf8.ValidString(s):
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

// ValidEntityID reports whether s may name a task, group, attempt, engine,
// vm or source: [A-Za-z0-9._:/-]{1,200}.
func ValidEntityID(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isWordByte(c) && c != ':' && c != '/' {
			return false
		}
	}
	return true
}

// ValidRunID reports whether s may name a run: [A-Za-z0-9._-]{1,128}, and
// not "." or "..", which would read as paths wherever a run names a file.
func ValidRunID(s string) bool {
	if len(s) == 0 || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
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
