package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

//go:generate go run ./internal/schemagen

// schemaVocabulary is the version of the schema's own keywords
// ("x-rolloutledger-..."). It goes up whenever one is added or changes
// meaning, so that an SDK built for an older vocabulary refuses the schema
// rather than skip a rule it does not know.
const schemaVocabulary = 3

// noNUL is the pattern of text: any string without a NUL character.
const noNUL = `^[^\u0000]*$`

// JSONSchema returns the catalogue as a JSON Schema (draft 2020-12),
// derived from the types registered in the catalogue, their `rl` tags and
// their rules. The repository commits it as
// events/schema/catalogue.schema.json (go generate ./events/... writes it,
// and a copy inside the Python SDK's package); events/schema/README.md
// explains how to read it.
//
// A plain JSON Schema validator checks an event's shape with it: fields,
// types, bounds, enums, id patterns, and each (type, v)'s data. The rules
// it cannot express, and the order in which the decoder checks (which
// decides the error a body with several faults gets), are written as
// keywords of its own, "x-rolloutledger-...", which the SDKs interpret.
func JSONSchema() []byte { return bytes.Clone(schemaJSON()) }

var schemaJSON = sync.OnceValue(func() []byte {
	b, err := buildSchema()
	if err != nil {
		panic(err)
	}
	return b
})

const schemaDescription = "The facts rolloutledger accepts: one JSON object per event (the envelope), " +
	"whose type and v select the schema of its data (oneOf). A request body is one event " +
	"or a non-empty array of them ($defs/batch). " +
	"Beyond what JSON Schema says, the ledger's decoder holds every body to these rules, which the " +
	"x-rolloutledger keywords describe for implementations in other languages " +
	"(events/schema/README.md in the repository says more). " +
	"(1) Objects are checked in stages, and the first failure is the verdict: a key given twice " +
	"(duplicate_field, the first repeated key in document order); then an unknown key " +
	"(unknown_field, the first in sorted order); then each property in x-rolloutledger-order: " +
	"absent and required (missing_field), null (wrong_type: null is never a value), not of its " +
	"type and format (wrong_type), then its own keywords (invalid_value), objects inside it in " +
	"full before the next property. " +
	"(2) The rules of an object (x-rolloutledger-rules) run after the object and everything in it " +
	"decoded, rules of nested objects first; each names its field, code and message; " +
	"x-rolloutledger-report \"all\" reports every failing rule at once, naming the first. " +
	"(3) The envelope decodes (data left as it is), its rules run, then its type and v select the " +
	"data's schema: a type outside the catalogue is unknown_type at \"type\", a version it lacks " +
	"unknown_version at \"v\". Then data decodes and its rules run. " +
	"(4) Formats: int64 and int32 are integer literals (no fraction, no exponent) that fit; " +
	"double and float are numbers read as IEEE binary64 and binary32 (a literal out of range is " +
	"wrong_type); x-rolloutledger-maxBytes bounds a string's UTF-8 length. " +
	"(5) The whole body is UTF-8 and nests at most maxDepth arrays and objects (malformed), and " +
	"each event's canonical encoding is at most maxRecordBytes (too_large); see " +
	"x-rolloutledger-limits. Errors name the event's index in its request and the dotted path of " +
	"the field: data.gates[2].name, data.logprob_gap.4. " +
	"(6) A binary property (x-rolloutledger-binary int32le or float32le) is a string of standard " +
	"base64 with padding (RFC 4648 section 4) of little-endian 4-byte values, decoded strictly: " +
	"unused bits of the last group must be zero, so each value array has one encoding. Not a " +
	"string is wrong_type; not such base64, or a byte count that is not a multiple of 4, is " +
	"invalid_value at the property; a value outside x-rolloutledger-items (float32le values must " +
	"also be finite) is invalid_value at property[i]. The empty string means absent. " +
	"(7) In rules, and in the canonical form, an optional property without a default that holds " +
	"its zero value (\"\", 0, false) is absent."

// jsonObject is a JSON object whose members keep their order.
type jsonObject []jsonMember

type jsonMember struct {
	key string
	val any
}

func (o *jsonObject) set(key string, val any) { *o = append(*o, jsonMember{key, val}) }

func (o jsonObject) get(key string) (any, bool) {
	for _, m := range o {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

type schemaGen struct {
	defs   jsonObject
	nested []reflect.Type
	names  map[reflect.Type]string
}

func buildSchema() ([]byte, error) {
	g := &schemaGen{names: map[reflect.Type]string{}}
	envelopeDef, err := g.object(reflect.TypeFor[envelope](), "")
	if err != nil {
		return nil, err
	}
	g.defs.set("envelope", envelopeDef)
	g.defs.set("batch", jsonObject{
		{"description", "A request body holding several events."},
		{"type", "array"},
		{"minItems", 1},
		{"items", jsonObject{{"$ref", "#"}}},
	})
	g.defs.set("entity-id", jsonObject{
		{"description", "The id of a task, group, attempt, engine, vm or source: [A-Za-z0-9._:/-], " +
			"in segments between slashes none of which is . or .. (a path segment wherever the id lands in a URL or file name)."},
		{"type", "string"},
		{"minLength", 1},
		{"maxLength", maxEntityIDLen},
		{"pattern", entityIDPattern},
	})

	var branches []any
	for _, t := range FactTypes() {
		for v := 1; v <= CurrentVersion(t); v++ {
			name := fmt.Sprintf("%s.v%d", t, v)
			title := fmt.Sprintf("%s v%d", t, v)
			def, err := g.object(wireType(t, v), title)
			if err != nil {
				return nil, err
			}
			g.defs.set(name, def)
			branches = append(branches, jsonObject{
				{"title", title},
				{"properties", jsonObject{
					{"type", jsonObject{{"const", string(t)}}},
					{"v", jsonObject{{"const", v}}},
					{"data", jsonObject{{"$ref", "#/$defs/" + name}}},
				}},
			})
		}
	}
	for i := 0; i < len(g.nested); i++ {
		t := g.nested[i]
		def, err := g.object(t, "")
		if err != nil {
			return nil, err
		}
		g.defs.set(g.names[t], def)
	}

	formatNames := slices.Sorted(maps.Keys(formats))
	var formatDefs jsonObject
	for _, name := range formatNames {
		f := formats[name]
		formatDefs.set(name, jsonObject{
			{"description", f.description},
			{"pattern", f.pattern},
			{"complete", f.complete},
		})
	}

	root := jsonObject{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "urn:rolloutledger:events:catalogue"},
		{"$comment", "Generated from the Go catalogue (package events) by go generate ./events/...; do not edit."},
		{"title", "rolloutledger fact catalogue"},
		{"description", schemaDescription},
		{"x-rolloutledger-vocabulary", schemaVocabulary},
		{"x-rolloutledger-limits", jsonObject{
			{"maxRecordBytes", MaxRecordBytes},
			{"maxDepth", MaxDepth},
			{"maxTextBytes", MaxTextBytes},
		}},
		{"x-rolloutledger-formats", formatDefs},
		{"$ref", "#/$defs/envelope"},
		{"oneOf", branches},
		{"$defs", g.defs},
	}
	var buf bytes.Buffer
	writeJSON(&buf, root, "")
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// defName names the schema of a nested struct type: RunConfig is
// "run-config".
func (g *schemaGen) defName(t reflect.Type) string {
	if name, ok := g.names[t]; ok {
		return name
	}
	var b strings.Builder
	for i, r := range t.Name() {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	g.names[t] = b.String()
	g.nested = append(g.nested, t)
	return b.String()
}

// object is the schema of the struct type t.
func (g *schemaGen) object(t reflect.Type, title string) (jsonObject, error) {
	s := specOf(t)
	var defaults reflect.Value
	if s.rules != nil && s.rules.defaultValue.IsValid() {
		defaults = s.rules.defaultValue
		if ds := specOf(defaults.Type()); ds.rules != nil {
			if errs := ds.rules.check(defaults, t.Name(), true); len(errs) > 0 {
				return nil, fmt.Errorf("events: the defaults of %s break its rules: %v", t.Name(), errs[0])
			}
		}
	}
	var required, order []any
	var props jsonObject
	for i := range s.fields {
		fs := &s.fields[i]
		_, opts, _ := strings.Cut(t.Field(fs.index).Tag.Get("json"), ",")
		if omit := slices.Contains(strings.Split(opts, ","), "omitempty"); omit != fs.optional {
			// The canonical form leaves out exactly the optional fields
			// that are empty; the SDKs rely on it.
			return nil, fmt.Errorf("events: %s.%s: optional and omitempty must go together", t.Name(), fs.name)
		}
		// The schema tells an explicit zero that is kept (a pointer's) from
		// one that is absent (a plain scalar's) by the default the former
		// has (README: "Rules").
		// A pointer without a default keeps its zero too, and says so
		// (x-rolloutledger-keepZero): "parent": 0 names turn 0.
		keepZero := fs.optional && fs.typ.Kind() == reflect.Pointer && fs.typ.Elem().Kind() != reflect.Struct &&
			!hasDefault(defaults, fs.name)
		if !fs.optional {
			required = append(required, fs.name)
		}
		order = append(order, fs.name)
		prop, err := g.value(fs.typ, fs)
		if err != nil {
			return nil, fmt.Errorf("events: %s.%s: %w", t.Name(), fs.name, err)
		}
		if keepZero {
			prop.set("x-rolloutledger-keepZero", true)
		}
		if defaults.IsValid() {
			ds := specOf(defaults.Type())
			if j, ok := ds.byName[fs.name]; ok {
				prop.set("default", plainValue(defaults.Field(ds.fields[j].index)))
			}
		}
		props.set(fs.name, prop)
	}
	var o jsonObject
	if title != "" {
		o.set("title", title)
	}
	o.set("type", "object")
	o.set("additionalProperties", false)
	if len(required) > 0 {
		o.set("required", required)
	}
	o.set("properties", props)
	o.set("x-rolloutledger-order", order)
	if s.rules != nil {
		var rules, restated []any
		for _, r := range s.rules.rules {
			rules = append(rules, ruleJSON(r))
			if sub := restate(r, s); sub != nil {
				restated = append(restated, sub)
			}
		}
		o.set("x-rolloutledger-rules", rules)
		if s.rules.all {
			o.set("x-rolloutledger-report", "all")
		}
		if len(restated) > 0 {
			o.set("allOf", restated)
		}
	}
	return o, nil
}

// hasDefault reports whether the defaults struct d (invalid when none)
// has the field name.
func hasDefault(d reflect.Value, name string) bool {
	if !d.IsValid() {
		return false
	}
	_, ok := specOf(d.Type()).byName[name]
	return ok
}

// value is the schema of a field of type t with the tag rules fs.
func (g *schemaGen) value(t reflect.Type, fs *fieldSpec) (jsonObject, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case fs.format == formatBytes:
		return jsonObject{
			{"type", "string"},
			{"contentEncoding", "base64"},
			{"pattern", base64Pattern},
			{"x-rolloutledger-binary", fs.format},
		}, nil
	case fs.format != "":
		items, err := scalarSchema(t.Elem(), fs)
		if err != nil {
			return nil, err
		}
		return jsonObject{
			{"type", "string"},
			{"contentEncoding", "base64"},
			{"pattern", base64Pattern},
			{"x-rolloutledger-binary", fs.format},
			{"x-rolloutledger-items", items},
		}, nil
	case t == rawMessageType:
		return jsonObject{{"description", "Any JSON value but null; the event's type and v select its schema."}}, nil
	case t.Kind() == reflect.Struct:
		return jsonObject{{"$ref", "#/$defs/" + g.defName(t)}}, nil
	case t.Kind() == reflect.Slice:
		items, err := g.value(t.Elem(), fs)
		if err != nil {
			return nil, err
		}
		return jsonObject{{"type", "array"}, {"items", items}}, nil
	case t.Kind() == reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map keys of type %s have no schema", t.Key())
		}
		values, err := g.value(t.Elem(), fs)
		if err != nil {
			return nil, err
		}
		return jsonObject{
			{"type", "object"},
			{"propertyNames", textSchema(false)[1:]},
			{"additionalProperties", values},
		}, nil
	}
	return scalarSchema(t, fs)
}

// textSchema is the schema of a string by the decoder's rules for every
// string: at most MaxTextBytes of UTF-8 (maxLength, counted in characters,
// is the looser bound a plain validator can check), no NUL, and not empty
// unless allowed.
func textSchema(allowEmpty bool) jsonObject {
	o := jsonObject{{"type", "string"}}
	if !allowEmpty {
		o.set("minLength", 1)
	}
	o.set("maxLength", MaxTextBytes)
	o.set("x-rolloutledger-maxBytes", MaxTextBytes)
	o.set("pattern", noNUL)
	return o
}

func scalarSchema(t reflect.Type, fs *fieldSpec) (jsonObject, error) {
	numeric := func(typ, format string, lo, hi float64) jsonObject {
		o := jsonObject{{"type", typ}, {"format", format}}
		if !fs.signed {
			lo = 0
		}
		if fs.hasMax {
			hi = min(hi, fs.max)
		}
		if !math.IsInf(lo, -1) {
			o.set("minimum", lo)
		}
		if !math.IsInf(hi, 1) {
			o.set("maximum", hi)
		}
		return o
	}
	inf := math.Inf(1)
	if (fs.id || fs.enum != nil || fs.allowEmpty) && t.Kind() != reflect.String {
		return nil, fmt.Errorf("id, enum and empty apply to strings, not %s", t)
	}
	switch t.Kind() {
	case reflect.String:
		switch {
		case fs.id:
			return jsonObject{{"$ref", "#/$defs/entity-id"}}, nil
		case fs.enum != nil:
			values := make([]any, len(fs.enum))
			for i, v := range fs.enum {
				values[i] = v
			}
			return jsonObject{{"type", "string"}, {"enum", values}}, nil
		}
		o := textSchema(fs.allowEmpty || fs.optional)
		if fs.maxBytes > 0 {
			for i := range o {
				if o[i].key == "maxLength" || o[i].key == "x-rolloutledger-maxBytes" {
					o[i].val = fs.maxBytes
				}
			}
		}
		return o, nil
	case reflect.Bool:
		return jsonObject{{"type", "boolean"}}, nil
	case reflect.Int, reflect.Int64:
		// int64 bounds are left to the format: 2^63 is not a number every
		// JSON parser reads exactly.
		return numeric("integer", "int64", -inf, inf), nil
	case reflect.Int32:
		return numeric("integer", "int32", math.MinInt32, math.MaxInt32), nil
	case reflect.Float64:
		return numeric("number", "double", -inf, inf), nil
	case reflect.Float32:
		return numeric("number", "float", -inf, inf), nil
	}
	return nil, fmt.Errorf("type %s has no schema", t)
}

// ruleJSON is a rule as an entry of x-rolloutledger-rules.
func ruleJSON(r rule) jsonObject {
	o := jsonObject{{"field", r.Field}}
	if r.Err != nil {
		o.set("code", codes[r.Err])
	}
	if r.Items != "" {
		o.set("items", r.Items)
	}
	for _, b := range []struct {
		key string
		b   *bound
	}{{"minimum", r.Minimum}, {"maximum", r.Maximum}, {"exclusiveMinimum", r.ExclusiveMinimum}, {"exclusiveMaximum", r.ExclusiveMaximum},
		{"length", r.Length}, {"minItems", r.MinItems}, {"maxItems", r.MaxItems}, {"first", r.First}} {
		if b.b != nil {
			o.set(b.key, boundJSON(b.b))
		}
	}
	if r.Ascending {
		o.set("ascending", true)
	}
	if r.From != 0 {
		o.set("from", r.From)
	}
	if r.RequiredBy != "" {
		o.set("requiredBy", r.RequiredBy)
	}
	if r.PropertyNames != "" {
		o.set("propertyNames", jsonObject{{"pattern", r.PropertyNames}})
	}
	if r.Interval != nil {
		o.set("interval", []any{r.Interval[0], r.Interval[1]})
	}
	if r.Enum != nil {
		values := make([]any, len(r.Enum))
		for i, v := range r.Enum {
			values[i] = v
		}
		o.set("enum", values)
	}
	if r.Format != "" {
		o.set("format", r.Format)
	}
	if r.Message != "" {
		o.set("message", r.Message)
	}
	return o
}

func boundJSON(b *bound) any {
	switch {
	case b.Field == "":
		return b.Value
	case b.Minus != "":
		return jsonObject{{"field", b.Field}, {"minus", b.Minus}}
	case b.Scale == 1 && b.Offset == 0:
		return jsonObject{{"field", b.Field}}
	}
	return jsonObject{{"field", b.Field}, {"scale", b.Scale}, {"offset", b.Offset}}
}

// standardFormats are the formats JSON Schema itself names, whose meaning
// includes ours.
var standardFormats = map[string]bool{"uuid": true, "date-time": true}

// restate says as much of r, a rule of the object s, as standard JSON
// Schema can, for validators that skip x-rolloutledger-rules; nil when it
// can say nothing. It never says more than r: what r accepts, the
// restatement accepts.
func restate(r rule, s *spec) jsonObject {
	if r.Items != "" {
		// Only a constant first value has a standard form: the first
		// element's member.
		if r.First == nil || r.First.Field != "" {
			return nil
		}
		first := jsonObject{{"properties", jsonObject{{r.Items, jsonObject{{"const", r.First.Value}}}}}}
		return jsonObject{{"properties", jsonObject{{r.Field, jsonObject{{"prefixItems", []any{first}}}}}}}
	}
	var prop jsonObject
	for _, b := range []struct {
		key string
		b   *bound
	}{{"minimum", r.Minimum}, {"maximum", r.Maximum}, {"exclusiveMinimum", r.ExclusiveMinimum}, {"exclusiveMaximum", r.ExclusiveMaximum}} {
		if b.b != nil && b.b.Field == "" {
			prop.set(b.key, b.b.Value)
		}
	}
	if r.Length != nil && r.Length.Field == "" {
		prop.set("minItems", r.Length.Value)
		prop.set("maxItems", r.Length.Value)
	}
	if r.MinItems != nil && r.MinItems.Field == "" {
		prop.set("minItems", r.MinItems.Value)
	}
	if r.MaxItems != nil && r.MaxItems.Field == "" {
		prop.set("maxItems", r.MaxItems.Value)
	}
	if r.Ascending {
		prop.set("uniqueItems", true)
	}
	if r.PropertyNames != "" {
		prop.set("propertyNames", jsonObject{{"pattern", r.PropertyNames}})
	}
	if r.Interval != nil {
		prop.set("items", jsonObject{{"minimum", r.Interval[0]}, {"maximum", r.Interval[1]}})
	}
	if r.Enum != nil {
		values := make([]any, len(r.Enum))
		for i, v := range r.Enum {
			values[i] = v
		}
		prop.set("enum", values)
	}
	if r.Format != "" {
		if standardFormats[r.Format] {
			prop.set("format", r.Format)
		}
		prop.set("pattern", formats[r.Format].pattern)
	}
	var o jsonObject
	if len(prop) > 0 {
		o.set("properties", jsonObject{{r.Field, prop}})
	}
	// dependentRequired sees a member's presence; r sees its value, and
	// an optional scalar's zero or a binary field's "" is absent to it.
	if by := s.fields[s.byName[r.RequiredBy]]; r.RequiredBy != "" && by.format == "" &&
		(!by.optional || by.typ.Kind() == reflect.Slice || by.typ.Kind() == reflect.Map || by.typ.Kind() == reflect.Pointer) {
		o.set("dependentRequired", jsonObject{{r.RequiredBy, []any{r.Field}}})
	}
	if len(o) == 0 {
		return nil
	}
	return o
}

// plainValue converts a Go value to the JSON types writeJSON knows.
func plainValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer:
		return plainValue(v.Elem())
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Slice, reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plainValue(v.Index(i))
		}
		return out
	}
	panic(fmt.Sprintf("events: no JSON for a default of type %s", v.Type()))
}

// writeJSON writes v indented by two spaces per level; arrays and objects
// of scalars that fit stay on one line.
func writeJSON(buf *bytes.Buffer, v any, indent string) {
	if line, ok := inline(v); ok && len(indent)+len(line) <= 100 {
		buf.WriteString(line)
		return
	}
	inner := indent + "  "
	switch x := v.(type) {
	case jsonObject:
		buf.WriteString("{\n")
		for i, m := range x {
			buf.WriteString(inner)
			buf.WriteString(jsonString(m.key))
			buf.WriteString(": ")
			writeJSON(buf, m.val, inner)
			if i < len(x)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "}")
	case []any:
		buf.WriteString("[\n")
		for i, e := range x {
			buf.WriteString(inner)
			writeJSON(buf, e, inner)
			if i < len(x)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "]")
	default:
		s, _ := scalarJSON(v)
		buf.WriteString(s)
	}
}

// inline renders v on one line when it is a scalar, or an array or object
// of scalars.
func inline(v any) (string, bool) {
	if s, ok := scalarJSON(v); ok {
		return s, true
	}
	var parts []string
	switch x := v.(type) {
	case jsonObject:
		if len(x) == 0 {
			return "{}", true
		}
		for _, m := range x {
			s, ok := scalarJSON(m.val)
			if !ok {
				return "", false
			}
			parts = append(parts, jsonString(m.key)+": "+s)
		}
		return "{" + strings.Join(parts, ", ") + "}", true
	case []any:
		for _, e := range x {
			s, ok := scalarJSON(e)
			if !ok {
				return "", false
			}
			parts = append(parts, s)
		}
		return "[" + strings.Join(parts, ", ") + "]", true
	}
	return "", false
}

func scalarJSON(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return jsonString(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e21 {
			return strconv.FormatFloat(x, 'f', -1, 64), true
		}
		return strconv.FormatFloat(x, 'g', -1, 64), true
	}
	return "", false
}

func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}
