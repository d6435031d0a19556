package events

import (
	"math"
	"reflect"
	"unsafe"
)

// The rules of a decoded object are data (rules.go), run by checkRules
// through reflection: for a turn, some 4,000 instructions of the 24,000
// its decoding took, most of them finding fields and boxing their values.
// Nearly every object passes them. So the common forms of rule are also
// compiled, once per struct type, into plain reads of the object's memory
// that answer whether every rule passes; when one does not, or a rule has
// a form not compiled here, checkRules runs as before and words the error.
// The compiled rules only ever say "passes" for an object the interpreted
// ones pass (TestFastRulesAgree holds them to each other on random
// objects of every type in the catalogue).

// fastRules reports whether every rule of an object passes, given its
// address; nil when some rule has a form it does not compile.
type fastRules func(p unsafe.Pointer) bool

// fastField reads one field of a struct, as compiledRules.valueAt sees it.
type fastField struct {
	off      uintptr
	kind     reflect.Kind // of the value, after the pointer if ptr
	ptr      bool         // the field is a pointer to the value
	optional bool         // a zero scalar counts as absent
	// elem and elemSize are the element type and size of a slice, or the
	// struct type a pointer field points to (kind Struct).
	elem     reflect.Type
	elemSize uintptr
}

// numeric reports whether k is a kind numberOf reads.
func numeric(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// fieldOf compiles the reading of the spec's field i of struct type t; ok
// is false for a field whose value it does not read.
func fieldOf(t reflect.Type, s *spec, i int) (fastField, bool) {
	fs := &s.fields[i]
	sf := t.Field(fs.index)
	f := fastField{off: sf.Offset, kind: sf.Type.Kind(), optional: fs.optional}
	switch {
	case f.kind == reflect.Pointer:
		f.ptr, f.kind = true, sf.Type.Elem().Kind()
		if f.kind == reflect.Struct {
			f.elem = sf.Type.Elem()
		} else if !numeric(f.kind) {
			return f, false
		}
	case f.kind == reflect.Slice:
		f.elem, f.elemSize = sf.Type.Elem(), sf.Type.Elem().Size()
	case numeric(f.kind), f.kind == reflect.String:
	default:
		return f, false
	}
	return f, true
}

// at is the address of the field's value in the object at p, nil when
// the field is absent (a nil pointer or slice, an optional zero scalar).
func (f *fastField) at(p unsafe.Pointer) unsafe.Pointer {
	q := unsafe.Add(p, f.off)
	switch {
	case f.ptr:
		return *(*unsafe.Pointer)(q)
	case f.kind == reflect.Slice:
		if unsafe.SliceData(*(*[]byte)(q)) == nil {
			return nil
		}
	case f.optional && f.kind == reflect.String:
		if *(*string)(q) == "" {
			return nil
		}
	case f.optional:
		if n := readNumber(q, f.kind); n.isInt && n.i == 0 || !n.isInt && math.Float64bits(n.f) == 0 {
			return nil
		}
	}
	return q
}

// readNumber is numberOf of the value of kind k at q.
func readNumber(q unsafe.Pointer, k reflect.Kind) number {
	var i int64
	switch k {
	case reflect.Int:
		i = int64(*(*int)(q))
	case reflect.Int8:
		i = int64(*(*int8)(q))
	case reflect.Int16:
		i = int64(*(*int16)(q))
	case reflect.Int32:
		i = int64(*(*int32)(q))
	case reflect.Int64:
		i = *(*int64)(q)
	case reflect.Float32:
		return number{f: float64(*(*float32)(q))}
	default:
		return number{f: *(*float64)(q)}
	}
	return number{i: i, f: float64(i), isInt: true}
}

// fastBound compiles compiledRules.bound: the bound's value for the
// object at p, and whether it applies.
func fastBound(t reflect.Type, s *spec, b *bound) (func(p unsafe.Pointer) (number, bool), bool) {
	if b == nil {
		return func(unsafe.Pointer) (number, bool) { return number{}, false }, true
	}
	if b.Field == "" {
		n := b.constant()
		return func(unsafe.Pointer) (number, bool) { return n, true }, true
	}
	f, ok := fieldOf(t, s, b.at)
	if !ok || !numeric(f.kind) {
		return nil, false
	}
	var m *fastField
	if b.Minus != "" {
		mf, ok := fieldOf(t, s, b.minusAt)
		if !ok || !numeric(mf.kind) {
			return nil, false
		}
		m = &mf
	}
	return func(p unsafe.Pointer) (number, bool) {
		q := f.at(p)
		if q == nil {
			return number{}, false
		}
		var minus int64
		if m != nil {
			if mq := m.at(p); mq != nil {
				minus = readNumber(mq, m.kind).i
			}
		}
		return b.of(readNumber(q, f.kind), minus)
	}, true
}

// compileFastRules compiles the rules of c, those of struct type t, or
// returns nil when one of them has a form not compiled here.
func compileFastRules(t reflect.Type, c *compiledRules) fastRules {
	if c == nil || c.defaultSpec != nil {
		return nil
	}
	s := c.spec
	checks := make([]func(p unsafe.Pointer) bool, 0, len(c.rules))
	for i := range c.rules {
		check := compileFastRule(t, c, s, i)
		if check == nil {
			return nil
		}
		checks = append(checks, check)
	}
	return func(p unsafe.Pointer) bool {
		for _, check := range checks {
			if !check(p) {
				return false
			}
		}
		return true
	}
}

// compileFastRule compiles rule i as checkOne runs it, or returns nil.
func compileFastRule(t reflect.Type, c *compiledRules, s *spec, i int) func(p unsafe.Pointer) bool {
	r := &c.rules[i]
	if c.formatCheck[i] != nil || c.keys[i] != nil || r.Interval != nil || r.Enum != nil {
		return nil
	}
	f, ok := fieldOf(t, s, c.field[i])
	if !ok {
		return nil
	}
	var other *fastField
	if c.requiredBy[i] >= 0 {
		o, ok := fieldOf(t, s, c.requiredBy[i])
		if !ok {
			return nil
		}
		other = &o
	}
	var value func(p unsafe.Pointer) bool // the check of a present value
	switch {
	case r.Items != "":
		value = compileFastItems(t, c, s, i, f)
	case r.Ascending:
		value = compileFastAscending(f)
	default:
		value = compileFastViolated(t, c, s, i, f)
	}
	if value == nil {
		return nil
	}
	return func(p unsafe.Pointer) bool {
		present := f.at(p) != nil
		if other != nil && !present && other.at(p) != nil {
			return false
		}
		return !present || value(p)
	}
}

// outOfBoundsFast compiles compiledRules.outOfBounds of rule r.
func outOfBoundsFast(t reflect.Type, s *spec, r *rule) func(p unsafe.Pointer, x number) bool {
	min, ok1 := fastBound(t, s, r.Minimum)
	max, ok2 := fastBound(t, s, r.Maximum)
	emin, ok3 := fastBound(t, s, r.ExclusiveMinimum)
	emax, ok4 := fastBound(t, s, r.ExclusiveMaximum)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil
	}
	return func(p unsafe.Pointer, x number) bool {
		if b, ok := min(p); ok && less(x, b) {
			return true
		}
		if b, ok := max(p); ok && less(b, x) {
			return true
		}
		if b, ok := emin(p); ok && lessEq(x, b) {
			return true
		}
		b, ok := emax(p)
		return ok && lessEq(b, x)
	}
}

// compileFastViolated compiles "not violated" of rule i on field f.
func compileFastViolated(t reflect.Type, c *compiledRules, s *spec, i int, f fastField) func(p unsafe.Pointer) bool {
	r := &c.rules[i]
	out := outOfBoundsFast(t, s, r)
	length, ok1 := fastBound(t, s, r.Length)
	minItems, ok2 := fastBound(t, s, r.MinItems)
	maxItems, ok3 := fastBound(t, s, r.MaxItems)
	if out == nil || !ok1 || !ok2 || !ok3 {
		return nil
	}
	counted := r.Length != nil || r.MinItems != nil || r.MaxItems != nil
	switch {
	case numeric(f.kind) && !counted:
		return func(p unsafe.Pointer) bool { return !out(p, readNumber(f.at(p), f.kind)) }
	case f.kind == reflect.Slice:
		return func(p unsafe.Pointer) bool {
			n := int64(len(*(*[]byte)(f.at(p))))
			if b, ok := length(p); ok && (!b.isInt || n != b.i) {
				return false
			}
			if b, ok := minItems(p); ok && n < b.i {
				return false
			}
			b, ok := maxItems(p)
			return !ok || n <= b.i
		}
	case f.kind == reflect.String && !counted && r.Minimum == nil && r.Maximum == nil && r.ExclusiveMinimum == nil && r.ExclusiveMaximum == nil:
		// Only RequiredBy: a present string passes.
		return func(unsafe.Pointer) bool { return true }
	}
	return nil
}

// compileFastItems compiles checkItems of rule i on field f, an array of
// objects or one object.
func compileFastItems(t reflect.Type, c *compiledRules, s *spec, i int, f fastField) func(p unsafe.Pointer) bool {
	r := &c.rules[i]
	if f.elem == nil || f.elem.Kind() != reflect.Struct {
		return nil
	}
	member := f.elem.Field(c.itemsAt[i])
	mk := member.Type.Kind()
	if !numeric(mk) {
		return nil
	}
	moff := member.Offset
	first, ok := fastBound(t, s, r.First)
	out := outOfBoundsFast(t, s, r)
	if !ok || out == nil {
		return nil
	}
	if f.kind != reflect.Slice { // one object
		return func(p unsafe.Pointer) bool {
			x := readNumber(unsafe.Add(f.at(p), moff), mk)
			if b, ok := first(p); ok && (less(x, b) || less(b, x)) {
				return false
			}
			return !out(p, x)
		}
	}
	ascending, from := r.Ascending, r.From
	return func(p unsafe.Pointer) bool {
		q := f.at(p)
		n := len(*(*[]byte)(q))
		base := unsafe.Pointer(unsafe.SliceData(*(*[]byte)(q)))
		var prev number
		for j := range n {
			x := readNumber(unsafe.Add(base, uintptr(j)*f.elemSize+moff), mk)
			if j == 0 {
				if b, ok := first(p); ok && (less(x, b) || less(b, x)) {
					return false
				}
			}
			if ascending && j > 0 && lessEq(x, prev) {
				return false
			}
			if j >= from && out(p, x) {
				return false
			}
			prev = x
		}
		return true
	}
}

// compileFastAscending compiles checkAscending on field f, an array of
// strings or integers.
func compileFastAscending(f fastField) func(p unsafe.Pointer) bool {
	if f.kind != reflect.Slice {
		return nil
	}
	switch f.elem.Kind() {
	case reflect.String:
		return func(p unsafe.Pointer) bool { return strictlyAscending(*(*[]string)(f.at(p))) }
	case reflect.Int64:
		return func(p unsafe.Pointer) bool { return strictlyAscending(*(*[]int64)(f.at(p))) }
	}
	return nil
}

// strictlyAscending reports whether each element of v is greater than the
// one before it.
func strictlyAscending[T string | int64](v []T) bool {
	for j := 1; j < len(v); j++ {
		if !(v[j-1] < v[j]) {
			return false
		}
	}
	return true
}
