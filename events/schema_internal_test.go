package events

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSchemaPatterns: each pattern the schema gives other languages
// accepts exactly what the Go check it restates accepts.
func TestSchemaPatterns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	mutate := func(s, alphabet string) string {
		b := []byte(s)
		switch r.IntN(4) {
		case 0:
			if len(b) > 0 {
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			}
		case 1:
			if len(b) > 0 {
				i := r.IntN(len(b))
				b = append(b[:i], b[i+1:]...)
			}
		case 2:
			i := r.IntN(len(b) + 1)
			b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
		default:
			b = append(b, strings.Repeat(string(alphabet[r.IntN(len(alphabet))]), r.IntN(130))...)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name     string
		pattern  string
		check    func(string) bool
		seeds    []string
		alphabet string
		// maxLen, when set, is the schema's minLength 1 and maxLength,
		// which the pattern needs beside it.
		maxLen int
	}{
		{"entity id", entityIDPattern, func(s string) bool { return ValidEntityID(s) && !hasDotSegment(s) }, []string{
			"", "a", "g-17/a0", "vm/host-4:0192", strings.Repeat("a", 199), strings.Repeat("b", 200), "a b", "tâche", "a\n",
			".", "..", "...", "./a", "../a", "a/.", "a/..", "a/./b", "a/../b", ".a/..b/...", "a//b", "/", "/.", "./", strings.Repeat("./", 80),
		}, "aZ09._:/- \n\x00é", maxEntityIDLen},
		{"run id", runIDPattern, ValidRunID, []string{"", ".", "..", "...", ".a", "..a", "a.", "r-1", strings.Repeat("r", 127), strings.Repeat("r", 128), "r:1", "r/1", "r\n"}, "aZ09._- :/\n", 0},
		{"uuid", uuidPattern, func(s string) bool { return formats["uuid"].check(s) == "" }, []string{
			"0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11", "0192F0C4-7A1E-7C3B-BD2E-4B1F8A6C0D11", "00000000-0000-0000-0000-000000000000",
			"0192f0c4-7a1e-7c3b-cd2e-4b1f8a6c0d11", "{0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11}", "0192f0c47a1e7c3b9d2e4b1f8a6c0d11",
			"urn:uuid:0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11", "0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11\n",
		}, "0123456789abcdefABCDEFg-{}:\n", 0},
		{"date-time grammar", timePattern, strictRFC3339, []string{
			"2026-11-29T19:10:00.123Z", "2026-11-29T19:10:00Z", "2026-11-29T19:10:00.123456789+05:30", "2026-11-29T19:10:00.1234567890Z",
			"2026-11-29t19:10:00Z", "2026-11-29T9:10:00Z", "2026-11-29T19:10:00,5Z", "2026-11-29T19:10:00+24:00", "2026-11-29T19:10:00-23:60",
			"2026-11-29 19:10:00Z", "2026-11-29T19:10:00z", "2026-11-29T19:10:00.Z", "2026-11-29T19:10:00Z\n",
		}, "0123456789-:.TZz+, \n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			re := regexp.MustCompile(tc.pattern)
			inputs := append([]string(nil), tc.seeds...)
			for range 20000 {
				s := tc.seeds[r.IntN(len(tc.seeds))]
				for range 1 + r.IntN(3) {
					s = mutate(s, tc.alphabet)
				}
				inputs = append(inputs, s)
			}
			for _, s := range inputs {
				got := re.MatchString(s)
				if tc.maxLen > 0 {
					got = got && len(s) >= 1 && utf8.RuneCountInString(s) <= tc.maxLen
				}
				if want := tc.check(s); got != want {
					t.Errorf("%q: pattern says %v, the Go check %v", s, got, want)
				}
			}
		})
	}
}

type badRules struct {
	A int `json:"a"`
}

func (*badRules) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "a", Maximum: ref("b"), Message: "{a}"}}}
}

type badMessage struct {
	A int `json:"a"`
}

func (*badMessage) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "a", Minimum: num(1), Message: "got {$bogus}"}}}
}

// TestRulesCheckedWhenCompiled: a rule naming a field the type lacks, or a
// message naming an unknown value, fails at once and says where.
func TestRulesCheckedWhenCompiled(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func()
		want string
	}{
		{"unknown field", func() { specOf(reflect.TypeFor[badRules]()) }, `rule on badRules.a: "b" is not a field`},
		{"unknown placeholder", func() { specOf(reflect.TypeFor[badMessage]()) }, `rule on badMessage.a: message names "$bogus"`},
		{"items of a number", func() { specOf(reflect.TypeFor[badItems]()) }, `rule on badItems.a: items applies to an array of objects`},
		{"unknown member", func() { specOf(reflect.TypeFor[badMember]()) }, `rule on badMember.a: "x" is not a member of itemType`},
		{"ascending without items", func() { specOf(reflect.TypeFor[badAscending]()) }, `rule on badAscending.a: ascending without items applies to an array of strings or numbers`},
		{"binary of strings", func() { specOf(reflect.TypeFor[badBinary]()) }, `badBinary.A: a int32le field is an optional []int32`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				got, _ := recover().(string)
				if !strings.Contains(got, tc.want) {
					t.Errorf("got panic %q, want it to contain %q", got, tc.want)
				}
			}()
			tc.spec()
		})
	}
}

type badItems struct {
	A int `json:"a"`
}

func (*badItems) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "a", Items: "b", Ascending: true, Message: "{a}"}}}
}

type itemType struct {
	B int `json:"b"`
}

type badMember struct {
	A []itemType `json:"a"`
}

func (*badMember) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "a", Items: "x", Ascending: true, Message: "{$value}"}}}
}

type badAscending struct {
	A []itemType `json:"a"`
}

func (*badAscending) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "a", Ascending: true, Message: "{$len}"}}}
}

type badBinary struct {
	A []string `json:"a,omitempty" rl:"optional,int32le"`
}

// zeroIsAbsent has an optional scalar that a rule requires another field
// for: its zero value, which the canonical form leaves out, is absent.
type zeroIsAbsent struct {
	Text string `json:"text,omitempty" rl:"optional"`
	Cut  int64  `json:"cut,omitempty" rl:"optional"`
}

func (*zeroIsAbsent) ruleSet() ruleSet {
	return ruleSet{rules: []rule{{Field: "text", RequiredBy: "cut", Err: ErrMissingField, Message: "cut {cut} without text"}}}
}

// TestOptionalZeroIsAbsent: in rules, an optional field holding its zero
// value is absent, as it is from the canonical form.
func TestOptionalZeroIsAbsent(t *testing.T) {
	for _, tc := range []struct {
		v    zeroIsAbsent
		want string
	}{
		{zeroIsAbsent{}, ""},
		{zeroIsAbsent{Text: "x"}, ""},
		{zeroIsAbsent{Text: "x", Cut: 3}, ""},
		{zeroIsAbsent{Cut: 3}, "cut 3 without text"},
	} {
		var got string
		if fe := checkRules(reflect.ValueOf(&tc.v).Elem(), specOf(reflect.TypeOf(tc.v)), "data"); fe != nil {
			got = fe.Detail
		}
		if got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestCatalogueShapes holds the catalogue to what decoding and encoding
// rely on: the newest version of each type is its Fact struct, every older
// one has both steps, and binary fields sit directly in a fact's data
// (the encoder writes nested objects with encoding/json).
func TestCatalogueShapes(t *testing.T) {
	for _, typ := range FactTypes() {
		versions := catalogue[typ]
		for i, sv := range versions {
			w := sv.newWire()
			if i == len(versions)-1 {
				f, ok := w.(Fact)
				if !ok || f.FactType() != typ || sv.up != nil || sv.down != nil {
					t.Errorf("%s v%d, the newest: got %T, want the type's Fact with no steps", typ, i+1, w)
				}
			} else if sv.up == nil || sv.down == nil {
				t.Errorf("%s v%d: a step is missing", typ, i+1)
			}
			s := specOf(reflect.TypeOf(w).Elem())
			for _, j := range s.nested {
				et := s.fields[j].typ
				if et.Kind() == reflect.Slice || et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if len(specOf(et).binary) > 0 {
					t.Errorf("%s v%d: %s nests binary fields", typ, i+1, s.fields[j].name)
				}
			}
		}
	}
}

// TestReceivedBinaryTextIsCopied: decoding keeps the text of each binary
// field as a slice of the body itself, and the encoder writes that text
// rather than encoding the values again.
func TestReceivedBinaryTextIsCopied(t *testing.T) {
	body := []byte(`{"id":"0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11","run":"r","type":"turn.generated","v":2,"at":"2026-11-29T19:10:00Z",` +
		`"source":"e","data":{"attempt":"a","turn":0,"prompt_tokens":1,"completion_tokens":1,"cached_tokens":0,` +
		`"version_segments":[{"start":0,"policy_version":0}],"observation_token_ids":"BwAAAA==","token_ids":"CwAAAA==","logprobs":"AACAvw==",` +
		`"finish":"stop","latency_ms":1}}`)
	evs, states, err := decodeBatch(body, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := states[0].binary
	if len(got) != 3 {
		t.Fatalf("got %d binary texts, want 3", len(got))
	}
	for i, want := range []string{"BwAAAA==", "CwAAAA==", "AACAvw=="} {
		start := bytes.Index(body, []byte(`"`+want+`"`)) + 1
		if string(got[i].text) != want || &got[i].text[0] != &body[start] {
			t.Errorf("text %d: got %q, want %q as a slice of the body", i, got[i].text, want)
		}
	}
	// A stand-in text shows which the encoder writes.
	got[1].text = []byte("STANDIN=")
	rec, err := encode(evs[0], got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rec, []byte(`"token_ids":"STANDIN="`)) {
		t.Errorf("the encoder did not copy the received text: %s", rec)
	}
	if rec, _ := encode(evs[0], nil); !bytes.Contains(rec, []byte(`"token_ids":"CwAAAA=="`)) {
		t.Errorf("without received text, the encoder wrote %s", rec)
	}
}

// TestBinaryPortablePath runs the big-endian hosts' path (bytes converted
// with encoding/binary) on this host: the same values, the same text.
func TestBinaryPortablePath(t *testing.T) {
	ids := []int32{0, 1, -2, 151935, 1 << 30, -1 << 31}
	lps := []float32{0, -0.5, -1e-30, -3.4e38, 1.5}
	run := func() (string, string, []int32, []float32) {
		ti, tf := appendBase64(nil, ids), appendBase64(nil, lps)
		gi, _, why := decodeBase64[int32](ti, nil)
		gf, _, why2 := decodeBase64[float32](tf, nil)
		if why != "" || why2 != "" {
			t.Fatalf("%s %s", why, why2)
		}
		return string(ti), string(tf), gi, gf
	}
	ti, tf, gi, gf := run()
	defer func(le bool) { littleEndian = le }(littleEndian)
	littleEndian = !littleEndian
	pi, pf, pgi, pgf := run()
	if pi != ti || pf != tf || !reflect.DeepEqual(pgi, gi) || !reflect.DeepEqual(pgf, gf) || !reflect.DeepEqual(gi, ids) || !reflect.DeepEqual(gf, lps) {
		t.Errorf("the two paths differ:\n%s %s %v %v\n%s %s %v %v", ti, tf, gi, gf, pi, pf, pgi, pgf)
	}
}
