package events

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A rule is a check of a decoded object that looks beyond one field's own
// value: a bound set by another field, an array's length against a count, a
// field that another one requires, the keys of a map, or a named format.
// The rules of a struct type come from its ruleSet method; the checks of a
// single value live in its `rl` tags instead (see facts.go).
//
// Rules are data, not code, so that the schema generator can write each one
// into the catalogue's JSON Schema (schema.go) as an entry of
// "x-rolloutledger-rules", and every SDK checks what the decoder checks. A
// rule is skipped when its field is absent, except RequiredBy, which is
// about absence. An optional field holding its type's zero value ("", 0,
// false, an empty array) is absent: the canonical form leaves it out. A
// rule may combine several checks; it fails, with one error, when any of
// them does.
type rule struct {
	// Field is the JSON name of the field checked, and named by the error.
	Field string
	// Err is the error's sentinel; nil means ErrInvalidValue.
	Err error
	// Message is the error's detail, a template: {name} is the value of the
	// object's field name, {$len} the length of Field, {$key} the key that
	// failed PropertyNames, {$minimum}, {$exclusiveMaximum}, ... the value
	// of that bound, and for an Items rule {$index}, {$value} and
	// {$previous} the failing element's index, its member's value and the
	// previous element's. Integers print as %d, other numbers as %g,
	// strings as %q, arrays as [a, b]. A Format rule has no Message: the
	// format words its own.
	Message string

	// Bounds of a number.
	Minimum, Maximum, ExclusiveMinimum, ExclusiveMaximum *bound
	// Length is the number of entries an array must hold.
	Length *bound
	// RequiredBy names a field whose presence makes Field required.
	RequiredBy string
	// PropertyNames is a pattern every key of a map must match.
	PropertyNames string
	// Interval holds [low, high] arrays to lo <= low <= high <= hi; arrays
	// of another length are left to a Length rule.
	Interval *[2]float64
	// Enum lists the values a string may take.
	Enum []string
	// Format names a check of a string in formats.
	Format string

	// MinItems and MaxItems are the fewest and the most entries an array
	// may hold.
	MinItems, MaxItems *bound
	// Items names a member of the objects of the array Field. The rule's
	// bounds, First and Ascending then apply to that member of each
	// element in turn, and the error names the first element that fails
	// (field[i].member); the bounds may still refer to fields of the
	// object that holds the array. Field may also hold one object (a
	// pointer to a struct): the rule applies to its member, and the error
	// names field.member.
	Items string
	// First is the value the first element's member must have.
	First *bound
	// Ascending requires each element's member to be greater than the
	// previous element's. Without Items, on an array of strings or
	// numbers, it requires each element to be greater than the previous
	// one (strings compare bytewise): sorted and unique.
	Ascending bool
	// From is the index of the first element the bounds apply to.
	From int
}

// A bound is a number, or a linear function Offset + Scale × value of
// another field of the object, or the difference of two integer fields
// (Field − Minus, an absent Minus counting 0).
type bound struct {
	Value         float64
	Field         string
	Scale, Offset float64
	Minus         string

	// at and minusAt are Field's and Minus's index in the spec of the
	// struct the bound's rule was compiled for (-1: none), set in the
	// compiled copy of the bound (compileRules), the one the checks read:
	// the rules run for every fact, and looking the names up each time
	// was most of their work.
	at, minusAt int
}

// resolve returns a copy of b whose fields are looked up in s, or nil.
func (b *bound) resolve(s *spec) *bound {
	if b == nil {
		return nil
	}
	r := *b
	r.at, r.minusAt = -1, -1
	if i, ok := s.byName[b.Field]; ok && b.Field != "" {
		r.at = i
	}
	if i, ok := s.byName[b.Minus]; ok && b.Minus != "" {
		r.minusAt = i
	}
	return &r
}

func num(v float64) *bound            { return &bound{Value: v} }
func ref(field string) *bound         { return &bound{Field: field, Scale: 1} }
func diff(field, minus string) *bound { return &bound{Field: field, Scale: 1, Minus: minus} }
func linear(field string, scale, offset float64) *bound {
	return &bound{Field: field, Scale: scale, Offset: offset}
}

// A ruleSet is the rules of a struct type and how they report.
type ruleSet struct {
	rules []rule
	// all reports every failing rule, rather than the first: the error
	// names the first, and its detail lists them all.
	all bool
	// defaults, when not nil, is a struct whose fields stand in for the
	// object's absent ones (matched by JSON name) while the rules run.
	defaults any
}

// ruled is implemented by the struct types that have rules; the decoder
// runs them after the whole fact decoded, the rules of nested objects
// first.
type ruled interface {
	ruleSet() ruleSet
}

var ruledType = reflect.TypeFor[ruled]()

// A format is a named check of a string. Its pattern is what a validator
// that does not know the name can check instead; complete says whether the
// pattern alone decides.
type format struct {
	// check returns why s is refused, or "" when it is not.
	check       func(s string) string
	pattern     string
	complete    bool
	description string
}

// compiledRules is a ruleSet bound to the fields of one struct type.
type compiledRules struct {
	ruleSet
	spec         *spec
	defaultValue reflect.Value // rs.defaults, or invalid
	defaultSpec  *spec         // defaultValue's spec, or nil
	// field and requiredBy are the spec's field index of each rule's
	// Field and RequiredBy (-1 for none): looked up once, not per fact.
	field, requiredBy []int
	keys              []*regexp.Regexp
	messages          [][]segment
	// formatCheck is each rule's Format check (nil for none), looked up once.
	formatCheck []func(string) string
	// itemsAt is, for each rule with Items, the struct field index of
	// that member in the elements' type (-1 for none), looked up once.
	itemsAt []int
}

// placeholders are the names a message may use besides the fields'.
var placeholders = []string{"$len", "$key", "$minimum", "$maximum", "$exclusiveMinimum", "$exclusiveMaximum", "$index", "$value", "$previous"}

// segment is a piece of a message template: literal text, or a placeholder.
type segment struct {
	text string
	name string // field name, or "$len", "$key", "$minimum", ...
}

func compileRules(t reflect.Type, s *spec) *compiledRules {
	if !reflect.PointerTo(t).Implements(ruledType) {
		return nil
	}
	rs := reflect.New(t).Interface().(ruled).ruleSet()
	// The rules' own copies, whose bounds know their fields' indices in s
	// (a ruleSet's rules may be shared with another version's struct).
	rs.rules = slices.Clone(rs.rules)
	for i := range rs.rules {
		r := &rs.rules[i]
		for _, b := range []**bound{&r.Minimum, &r.Maximum, &r.ExclusiveMinimum, &r.ExclusiveMaximum, &r.Length, &r.MinItems, &r.MaxItems, &r.First} {
			*b = (*b).resolve(s)
		}
	}
	c := &compiledRules{ruleSet: rs, spec: s}
	if rs.defaults != nil {
		c.defaultValue = reflect.ValueOf(rs.defaults)
		c.defaultSpec = specOf(c.defaultValue.Type())
	}
	bad := func(r rule, format string, args ...any) {
		panic(fmt.Sprintf("events: rule on %s.%s: %s", t.Name(), r.Field, fmt.Sprintf(format, args...)))
	}
	for _, r := range rs.rules {
		names := []string{r.Field, r.RequiredBy}
		for _, b := range []*bound{r.Minimum, r.Maximum, r.ExclusiveMinimum, r.ExclusiveMaximum, r.Length, r.MinItems, r.MaxItems, r.First} {
			if b != nil {
				names = append(names, b.Field, b.Minus)
			}
		}
		for _, n := range names {
			if _, ok := s.byName[n]; n != "" && !ok {
				bad(r, "%q is not a field", n)
			}
		}
		c.field = append(c.field, s.byName[r.Field])
		if r.RequiredBy != "" {
			c.requiredBy = append(c.requiredBy, s.byName[r.RequiredBy])
		} else {
			c.requiredBy = append(c.requiredBy, -1)
		}
		ft := s.fields[s.byName[r.Field]].typ
		member := -1
		switch {
		case r.Items != "":
			if ft.Kind() != reflect.Slice && ft.Kind() != reflect.Pointer || ft.Elem().Kind() != reflect.Struct {
				bad(r, "items applies to an array of objects or an object, not %s", ft)
			}
			es := specOf(ft.Elem())
			j, ok := es.byName[r.Items]
			if !ok {
				bad(r, "%q is not a member of %s", r.Items, ft.Elem().Name())
			}
			member = es.fields[j].index
		case r.Ascending && (ft.Kind() != reflect.Slice || !scalarKind(ft.Elem().Kind())):
			bad(r, "ascending without items applies to an array of strings or numbers, not %s", ft)
		case r.First != nil || r.From != 0:
			bad(r, "first and from need items")
		}
		c.itemsAt = append(c.itemsAt, member)
		var key *regexp.Regexp
		if r.PropertyNames != "" {
			key = regexp.MustCompile(r.PropertyNames)
		}
		c.keys = append(c.keys, key)
		var check func(string) string
		if r.Format != "" {
			f, ok := formats[r.Format]
			if !ok {
				bad(r, "unknown format %q", r.Format)
			}
			check = f.check
			if r.Message != "" {
				bad(r, "a format words its own message")
			}
		}
		msg := parseTemplate(r.Message)
		for _, seg := range msg {
			_, field := s.byName[seg.name]
			if seg.name != "" && !field && !slices.Contains(placeholders, seg.name) {
				bad(r, "message names %q, which is neither a field nor one of %v", seg.name, placeholders)
			}
		}
		c.messages = append(c.messages, msg)
		c.formatCheck = append(c.formatCheck, check)
	}
	return c
}

func parseTemplate(msg string) []segment {
	var out []segment
	for msg != "" {
		open := strings.IndexByte(msg, '{')
		end := strings.IndexByte(msg, '}')
		if open < 0 || end < open {
			out = append(out, segment{text: msg})
			break
		}
		if open > 0 {
			out = append(out, segment{text: msg[:open]})
		}
		out = append(out, segment{name: msg[open+1 : end]})
		msg = msg[end+1:]
	}
	return out
}

// number is a field's or a bound's numeric value, exact for integers.
type number struct {
	i     int64
	f     float64
	isInt bool
}

func numberOf(v reflect.Value) (number, bool) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return number{i: v.Int(), f: float64(v.Int()), isInt: true}, true
	case reflect.Float32, reflect.Float64:
		return number{f: v.Float()}, true
	}
	return number{}, false
}

// less reports a < b, and lessEq a <= b; both are false when either is
// NaN, as Go's operators are.
func less(a, b number) bool {
	if a.isInt && b.isInt {
		return a.i < b.i
	}
	return a.f < b.f
}

func lessEq(a, b number) bool {
	if a.isInt && b.isInt {
		return a.i <= b.i
	}
	return a.f <= b.f
}

// value returns the field's value, nil pointers followed, and whether it
// is present: a nil pointer, slice or map is absent unless a default
// stands in for it.
func (c *compiledRules) value(rv reflect.Value, name string) (reflect.Value, bool) {
	return c.valueAt(rv, c.spec.byName[name])
}

// valueAt is value of the spec's field i.
func (c *compiledRules) valueAt(rv reflect.Value, i int) (reflect.Value, bool) {
	fs := &c.spec.fields[i]
	fv := rv.Field(fs.index)
	switch fv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if fv.IsNil() {
			if c.defaultSpec != nil {
				if j, ok := c.defaultSpec.byName[fs.name]; ok {
					return c.defaultValue.Field(c.defaultSpec.fields[j].index), true
				}
			}
			return reflect.Value{}, false
		}
		if fv.Kind() == reflect.Pointer {
			return fv.Elem(), true
		}
	default:
		if fs.optional && fv.IsZero() {
			return reflect.Value{}, false
		}
	}
	return fv, true
}

func (c *compiledRules) bound(rv reflect.Value, b *bound) (number, bool) {
	if b == nil {
		return number{}, false
	}
	if b.Field == "" {
		return b.constant(), true
	}
	v, ok := c.valueAt(rv, b.at)
	if !ok {
		return number{}, false
	}
	n, ok := numberOf(v)
	if !ok {
		return number{}, false
	}
	var minus int64
	if b.Minus != "" {
		if mv, present := c.valueAt(rv, b.minusAt); present {
			mn, _ := numberOf(mv)
			minus = mn.i
		}
	}
	return b.of(n, minus)
}

// constant is the value of a bound that names no field, exact as an
// integer when it is one.
func (b *bound) constant() number {
	if b.Value == math.Trunc(b.Value) && math.Abs(b.Value) < 1<<53 {
		return number{i: int64(b.Value), f: b.Value, isInt: true}
	}
	return number{f: b.Value}
}

// of is the value of a bound whose field holds n and whose Minus field
// holds minus (0 when absent); a difference of numbers that are not
// integers does not apply.
func (b *bound) of(n number, minus int64) (number, bool) {
	if b.Minus != "" {
		return number{i: n.i - minus, f: float64(n.i - minus), isInt: true}, n.isInt
	}
	if b.Scale == 1 && b.Offset == 0 {
		return n, true
	}
	// The conversion keeps the product from being fused with the sum:
	// every implementation computes the bound with the same two roundings.
	return number{f: float64(b.Scale*n.f) + b.Offset}, true
}

// check runs the rules on the struct rv, whose path prefixes field names
// in errors. It returns the failures: the first only, unless all is set.
func (c *compiledRules) check(rv reflect.Value, path string, all bool) []*FieldError {
	var errs []*FieldError
	for i := range c.rules {
		if fe := c.checkOne(rv, path, i); fe != nil {
			errs = append(errs, fe)
			if !all {
				break
			}
		}
	}
	return errs
}

func (c *compiledRules) checkOne(rv reflect.Value, path string, i int) *FieldError {
	r := &c.rules[i]
	v, present := c.valueAt(rv, c.field[i])
	if c.requiredBy[i] >= 0 {
		if _, other := c.valueAt(rv, c.requiredBy[i]); other && !present {
			return c.fail(rv, path, i, v, "", nil)
		}
	}
	if !present {
		return nil
	}
	if check := c.formatCheck[i]; check != nil {
		if detail := check(v.String()); detail != "" {
			return &FieldError{Field: join(path, r.Field), Err: c.sentinel(r), Detail: detail}
		}
	}
	if r.Items != "" {
		return c.checkItems(rv, path, i, v)
	}
	if r.Ascending {
		return c.checkAscending(rv, path, i, v)
	}
	if re := c.keys[i]; re != nil {
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			if !re.MatchString(k.String()) {
				return c.fail(rv, path, i, v, k.String(), nil)
			}
		}
	}
	if c.violated(rv, r, v) {
		return c.fail(rv, path, i, v, "", nil)
	}
	return nil
}

// item is the element of an array an Items (or element-wise Ascending)
// rule failed on; single says the field holds one object, not an array.
type item struct {
	index           int
	value, previous string
	single          bool
}

func numberItem(j int, x, prev number) *item {
	return &item{index: j, value: formatNumber(x), previous: formatNumber(prev)}
}

// scalarKind reports whether an array of k may be Ascending without Items.
func scalarKind(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Int, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// checkAscending runs the Ascending rule i, without Items, on the array v
// of strings or numbers: each element must be greater than the one before.
func (c *compiledRules) checkAscending(rv reflect.Value, path string, i int, v reflect.Value) *FieldError {
	for j := 1; j < v.Len(); j++ {
		x, prev := v.Index(j), v.Index(j-1)
		var ok bool
		if x.Kind() == reflect.String {
			ok = prev.String() < x.String()
		} else {
			a, _ := numberOf(prev)
			b, _ := numberOf(x)
			ok = less(a, b)
		}
		if !ok {
			return c.fail(rv, path, i, v, "", &item{index: j, value: formatValue(x), previous: formatValue(prev)})
		}
	}
	return nil
}

// checkItems runs the Items rule i on the elements of v, the array of
// objects its field holds (or the one object), and fails on the first
// that breaks it.
func (c *compiledRules) checkItems(rv reflect.Value, path string, i int, v reflect.Value) *FieldError {
	r := &c.rules[i]
	member := c.itemsAt[i]
	if v.Kind() == reflect.Struct {
		x, _ := numberOf(v.Field(member))
		bad := false
		if b, ok := c.bound(rv, r.First); ok {
			bad = less(x, b) || less(b, x)
		}
		if bad || c.outOfBounds(rv, r, x) {
			return c.fail(rv, path, i, v, "", &item{value: formatNumber(x), single: true})
		}
		return nil
	}
	var prev number
	for j := 0; j < v.Len(); j++ {
		x, _ := numberOf(v.Index(j).Field(member))
		bad := false
		if b, ok := c.bound(rv, r.First); ok && j == 0 {
			bad = less(x, b) || less(b, x)
		}
		if r.Ascending && j > 0 && lessEq(x, prev) {
			bad = true
		}
		if j >= r.From && c.outOfBounds(rv, r, x) {
			bad = true
		}
		if bad {
			return c.fail(rv, path, i, v, "", numberItem(j, x, prev))
		}
		prev = x
	}
	return nil
}

// outOfBounds reports whether x breaks one of r's bounds.
func (c *compiledRules) outOfBounds(rv reflect.Value, r *rule, x number) bool {
	if b, ok := c.bound(rv, r.Minimum); ok && less(x, b) {
		return true
	}
	if b, ok := c.bound(rv, r.Maximum); ok && less(b, x) {
		return true
	}
	if b, ok := c.bound(rv, r.ExclusiveMinimum); ok && lessEq(x, b) {
		return true
	}
	if b, ok := c.bound(rv, r.ExclusiveMaximum); ok && lessEq(b, x) {
		return true
	}
	return false
}

// violated reports whether v, the present value of r.Field, breaks one of
// r's bounds, its length, interval or enum.
func (c *compiledRules) violated(rv reflect.Value, r *rule, v reflect.Value) bool {
	if x, ok := numberOf(v); ok && c.outOfBounds(rv, r, x) {
		return true
	}
	if n, ok := c.bound(rv, r.Length); ok && (!n.isInt || int64(v.Len()) != n.i) {
		return true
	}
	if n, ok := c.bound(rv, r.MinItems); ok && int64(v.Len()) < n.i {
		return true
	}
	if n, ok := c.bound(rv, r.MaxItems); ok && int64(v.Len()) > n.i {
		return true
	}
	if r.Interval != nil && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Len() == 2 {
		lo, hi := v.Index(0).Float(), v.Index(1).Float()
		if lo < r.Interval[0] || hi > r.Interval[1] || lo > hi {
			return true
		}
	}
	return r.Enum != nil && !slices.Contains(r.Enum, v.String())
}

func (c *compiledRules) sentinel(r *rule) error {
	if r.Err == nil {
		return ErrInvalidValue
	}
	return r.Err
}

// fail renders rule i's error for the value v of its field; key is the
// map key that failed PropertyNames, and it the element that failed an
// Items rule, if that is what failed.
func (c *compiledRules) fail(rv reflect.Value, path string, i int, v reflect.Value, key string, it *item) *FieldError {
	r := &c.rules[i]
	field := join(path, r.Field)
	if r.PropertyNames != "" && key != "" {
		field += "." + key
	}
	switch {
	case it != nil && it.single:
		field += "." + r.Items
	case it != nil && r.Items != "":
		field += fmt.Sprintf("[%d].%s", it.index, r.Items)
	case it != nil:
		field += fmt.Sprintf("[%d]", it.index)
	}
	var b strings.Builder
	for _, seg := range c.messages[i] {
		switch seg.name {
		case "":
			b.WriteString(seg.text)
		case "$key":
			b.WriteString(strconv.Quote(key))
		case "$len":
			b.WriteString(strconv.Itoa(v.Len()))
		case "$index", "$value", "$previous":
			if it != nil {
				b.WriteString(map[string]string{"$index": strconv.Itoa(it.index), "$value": it.value,
					"$previous": it.previous}[seg.name])
			}
		case "$minimum", "$maximum", "$exclusiveMinimum", "$exclusiveMaximum":
			bd := map[string]*bound{"$minimum": r.Minimum, "$maximum": r.Maximum, "$exclusiveMinimum": r.ExclusiveMinimum, "$exclusiveMaximum": r.ExclusiveMaximum}[seg.name]
			if n, ok := c.bound(rv, bd); ok {
				b.WriteString(formatNumber(n))
			}
		default:
			if fv, ok := c.value(rv, seg.name); ok {
				b.WriteString(formatValue(fv))
			}
		}
	}
	return &FieldError{Field: field, Err: c.sentinel(r), Detail: b.String()}
}

func formatNumber(n number) string {
	if n.isInt {
		return strconv.FormatInt(n.i, 10)
	}
	return strconv.FormatFloat(n.f, 'g', -1, 64)
}

// formatValue prints v as fmt's %d, %g and %q would, and arrays as [a, b].
func formatValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Pointer:
		return formatValue(v.Elem())
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Float32:
		return strconv.FormatFloat(v.Float(), 'g', -1, 32)
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = formatValue(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if n, ok := numberOf(v); ok {
		return formatNumber(n)
	}
	return fmt.Sprint(v.Interface())
}

// checkRules runs the rules of the struct rv and of every object inside it,
// innermost first and in field order, and returns the first failure. An
// object whose rules report all of their failures gives one error naming
// the first, its detail listing them all.
func checkRules(rv reflect.Value, s *spec, path string) *FieldError {
	if s.fast != nil && rv.CanAddr() && s.fast(rv.Addr().UnsafePointer()) {
		return nil
	}
	// Objects without rules, at any depth, have nothing to check here.
	for _, i := range s.ruled {
		fs := &s.fields[i]
		fv := rv.Field(fs.index)
		fpath := fs.path(path)
		switch fv.Kind() {
		case reflect.Struct:
			if fe := checkRules(fv, fs.elem, fpath); fe != nil {
				return fe
			}
		case reflect.Pointer:
			if !fv.IsNil() {
				if fe := checkRules(fv.Elem(), fs.elem, fpath); fe != nil {
					return fe
				}
			}
		case reflect.Slice:
			for j := 0; j < fv.Len(); j++ {
				if fe := checkRules(fv.Index(j), fs.elem, indexPath(fpath, j)); fe != nil {
					return fe
				}
			}
		}
	}
	if s.rules == nil {
		return nil
	}
	errs := s.rules.check(rv, path, s.rules.all)
	if len(errs) == 0 {
		return nil
	}
	if !s.rules.all {
		return errs[0]
	}
	return &FieldError{Field: errs[0].Field, Err: errs[0].Err, Detail: joinDetails(errs)}
}

// joinDetails lists every failure as "field: detail", separated by "; ".
func joinDetails(errs []*FieldError) string {
	parts := make([]string, len(errs))
	for i, fe := range errs {
		parts[i] = fe.Field + ": " + fe.Detail
	}
	return strings.Join(parts, "; ")
}
