package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// fuzzSeeds are the valid examples, the bad inputs small enough to mutate,
// and a few arrays of them.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	var valid []string
	for _, ex := range examples {
		valid = append(valid, ex.body())
		seeds = append(seeds, []byte(ex.body()))
	}
	for _, bad := range badInputs() {
		if !bad.large && len(bad.body) < 4096 {
			seeds = append(seeds, []byte(bad.body))
		}
	}
	seeds = append(seeds,
		[]byte(array(valid...)),
		[]byte(array(valid[0], valid[7], valid[len(valid)-1])),
		[]byte(" \n"+array(valid[1])+"\n"),
		// Empty optional arrays, which the canonical form leaves out.
		[]byte(turn(turnBare.set("completion_tokens", "0").set("observation_token_ids", "[]").set("token_ids", "[]").set("logprobs", "[]"))),
		// Version 2: empty binary strings (absent), escapes inside base64
		// (\/ is /), zero text_cut (absent), many segments.
		[]byte(turn2(turnV2Bare.set("observation_token_ids", `""`).set("token_ids", `""`).set("logprobs", `""`).set("text_cut", "0"))),
		[]byte(turn2(turnV2Bare.set("completion_tokens", "1").set("token_ids", `"\/\/\/\/Pw=="`).set("logprobs", q(b64f(-1))))),
		[]byte(turn2(turnV2Data.set("completion_tokens", "9").set("token_ids", q(b64i(1, 2, 3, 4, 5, 6, 7, 8, 9))).
			set("logprobs", q(b64f(-1, -2, -3, -4, -5, -6, -7, -8, -9))).
			set("version_segments", `[{"start":0,"policy_version":3},{"start":1,"policy_version":4},{"start":5,"policy_version":9},{"start":8,"policy_version":10}]`))),
		// Escapes of UTF-16 surrogates: a pair, an escaped backslash
		// before "u", and a lone one (refused at ingest).
		[]byte(failed(failedData.set("reason", `"\ud83d\ude00\\ud800\u00e9"`))),
		[]byte(array(failed(failedData.set("reason", `"\ud83d\ude00"`)), failed(failedData.set("reason", `"x\ud800\u0041"`)))),
		// Entity ids with dots: beside other characters, and as segments.
		[]byte(failed(failedData.set("attempt", q(".a/..b/.../a/../b")))),
	)
	return seeds
}

// knownCodes are the wire codes a refusal may carry.
var knownCodes = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range wireCodes {
		m[c] = true
	}
	return m
}()

// checkRefusal asserts that err is a well-formed refusal.
func checkRefusal(t *testing.T, err error, maxIndex int) *events.FieldError {
	t.Helper()
	fe, ok := events.AsFieldError(err)
	if !ok {
		t.Fatalf("got %T %v, want a *events.FieldError", err, err)
	}
	if code := fe.Code(); !knownCodes[code] {
		t.Fatalf("got code %q, want a known one (%v)", code, err)
	}
	if !errors.Is(err, fe.Err) {
		t.Fatalf("got %v, want it to wrap its sentinel", err)
	}
	if fe.Index < 0 || fe.Index > maxIndex {
		t.Fatalf("got index %d, want 0..%d (%v)", fe.Index, maxIndex, err)
	}
	return fe
}

// checkCanonical asserts that ev, decoded from some input, is a fixpoint of
// the canonical encoding, and returns its encoding (nil when it is too large
// to be a record).
func checkCanonical(t *testing.T, ev events.Event) []byte {
	t.Helper()
	enc, err := events.Encode(ev)
	if err != nil {
		if errors.Is(err, events.ErrTooLarge) {
			return nil
		}
		t.Fatalf("Encode of a decoded event: %v", err)
	}
	again, err := events.Decode(enc)
	if err != nil {
		t.Fatalf("Decode(Encode(ev)) = %v\nencoding: %s", err, enc)
	}
	if !reflect.DeepEqual(again, ev) {
		t.Fatalf("Decode(Encode(ev)) differs:\ngot  %#v\nwant %#v\nencoding: %s", again, ev, enc)
	}
	enc2, err := events.Encode(again)
	if err != nil {
		t.Fatalf("re-Encode: %v", err)
	}
	if !bytes.Equal(enc2, enc) {
		t.Fatalf("encoding is not a fixpoint:\nfirst  %s\nsecond %s", enc, enc2)
	}
	return enc
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	// One Decoder for every input, as a reader of the log keeps one.
	var dec events.Decoder
	f.Fuzz(func(t *testing.T, record []byte) {
		ev, err := events.Decode(record)
		if dev, derr := dec.Decode(record); (err == nil) != (derr == nil) || err != nil && err.Error() != derr.Error() || err == nil && !reflect.DeepEqual(dev, ev) {
			t.Fatalf("Decode: %+v, %v; Decoder: %+v, %v", ev, err, dev, derr)
		}
		checkCanonicalBatch(t, record, err)
		if err != nil {
			fe := checkRefusal(t, err, 0)
			// Decode and DecodeBatch agree on a single object, but for
			// the rules ingest holds new facts to, which may come first.
			if trimmed := bytes.TrimSpace(record); len(trimmed) > 0 && trimmed[0] == '{' {
				_, berr := events.DecodeBatch(record)
				bfe, ok := events.AsFieldError(berr)
				if !ok || (bfe.Code() != fe.Code() || bfe.Field != fe.Field || bfe.Index != 0) && !ingestOnly(bfe) {
					t.Fatalf("Decode: %v; DecodeBatch: %v", err, berr)
				}
			}
			return
		}
		checkCanonical(t, ev)
		evs, err := events.DecodeBatch(record)
		if fe, ok := events.AsFieldError(err); ok && ingestOnly(fe) {
			return
		}
		if err != nil || len(evs) != 1 || !reflect.DeepEqual(evs[0], ev) {
			t.Fatalf("Decode accepted %q, DecodeBatch gave %v, %v", record, evs, err)
		}
	})
}

// ingestOnly reports whether fe is the refusal of a rule that ingest
// holds new facts to and Decode, reading the log, does not (see
// badInput.ingestOnly).
func ingestOnly(fe *events.FieldError) bool {
	return fe.Code() == "invalid_value" && (strings.Contains(fe.Detail, "surrogate") || strings.Contains(fe.Detail, "path segment"))
}

// checkCanonicalBatch asserts that CanonicalBatch reaches the verdict of
// DecodeBatch and EncodeBatch on body, and writes the same records: what
// it copies from the body as received is what encoding would write.
func checkCanonicalBatch(t *testing.T, body []byte, decodeErr error) {
	t.Helper()
	evs, recs, err := events.CanonicalBatch(body)
	want, wantErr := events.DecodeBatch(body)
	var wantRecs [][]byte
	if wantErr == nil {
		wantRecs, wantErr = events.EncodeBatch(want)
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("CanonicalBatch: %v; DecodeBatch and EncodeBatch: %v", err, wantErr)
	}
	if err != nil {
		fe, _ := events.AsFieldError(err)
		wfe, _ := events.AsFieldError(wantErr)
		if fe == nil || wfe == nil || fe.Code() != wfe.Code() || fe.Field != wfe.Field || fe.Index != wfe.Index {
			t.Fatalf("CanonicalBatch: %v; DecodeBatch and EncodeBatch: %v", err, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(evs, want) || !slices.EqualFunc(recs, wantRecs, bytes.Equal) {
		t.Fatalf("CanonicalBatch differs from DecodeBatch and EncodeBatch of %q", body)
	}
	// A Canonicalizer reused from body to body, its memory holding what
	// earlier bodies left, gives the same.
	reused.Lock()
	defer reused.Unlock()
	revs, rrecs, err := reused.c.Batch(body)
	if err != nil || !reflect.DeepEqual(revs, want) || !slices.EqualFunc(rrecs, wantRecs, bytes.Equal) {
		t.Fatalf("a reused Canonicalizer differs from DecodeBatch and EncodeBatch of %q (%v)", body, err)
	}
}

// reused is the Canonicalizer checkCanonicalBatch reuses for every body.
var reused struct {
	sync.Mutex
	c events.Canonicalizer
}

func FuzzDecodeBatch(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := events.DecodeBatch(body)
		checkCanonicalBatch(t, body, err)
		if err != nil {
			// An index names an event, so it cannot pass the body's length.
			checkRefusal(t, err, len(body))
			return
		}
		if len(evs) == 0 {
			t.Fatalf("DecodeBatch(%q) accepted no events", body)
		}
		var encs [][]byte
		for _, ev := range evs {
			enc := checkCanonical(t, ev)
			if enc == nil {
				// EncodeBatch must then refuse the batch, naming an event.
				_, err := events.EncodeBatch(evs)
				if fe := checkRefusal(t, err, len(evs)-1); !errors.Is(fe, events.ErrTooLarge) {
					t.Fatalf("EncodeBatch: got %v, want too_large", err)
				}
				return
			}
			encs = append(encs, enc)
		}
		batch, err := events.EncodeBatch(evs)
		if err != nil {
			t.Fatalf("EncodeBatch: %v", err)
		}
		if !slices.EqualFunc(batch, encs, bytes.Equal) {
			t.Fatalf("EncodeBatch differs from Encode of each event")
		}
		// The canonical records, sent again as one array, are the same batch.
		again, err := events.DecodeBatch(append(append([]byte("["), bytes.Join(batch, []byte(","))...), ']'))
		if err != nil {
			t.Fatalf("DecodeBatch of the canonical records: %v", err)
		}
		if !reflect.DeepEqual(again, evs) {
			t.Fatalf("DecodeBatch of the canonical records differs:\ngot  %#v\nwant %#v", again, evs)
		}
	})
}

// factSeeds are the data of every valid vector, with its type and version
// as FuzzFactData reads them from one byte: the type's index in
// events.FactTypes, plus len(FactTypes) times the version less one.
func factSeeds(f *testing.F) (seeds []struct {
	typ  uint8
	data []byte
}) {
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		f.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(raw, &vs); err != nil {
		f.Fatal(err)
	}
	for _, v := range vs {
		if !v.Valid {
			continue
		}
		b, _ := v.body()
		evs, err := events.DecodeBatch(b)
		if err != nil {
			f.Fatalf("valid vector %s: %v", v.Name, err)
		}
		for _, ev := range evs {
			enc, err := events.Encode(ev)
			if err != nil {
				f.Fatal(err)
			}
			var env struct{ Data json.RawMessage }
			if err := json.Unmarshal(enc, &env); err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, struct {
				typ  uint8
				data []byte
			}{uint8(slices.Index(events.FactTypes(), ev.Type) + len(events.FactTypes())*(ev.V-1)), env.Data})
		}
	}
	return seeds
}

// FuzzFactData mutates the data of each fact type and version under a
// fixed, valid envelope, so that every type's rules are explored: the
// event decodes as the general path decodes it, and either decodes to a
// fixpoint of the canonical encoding or is refused with a known code
// naming a field of its data. The first byte
// picks the type and the version (see factSeeds); seeds of the bytes below
// len(FactTypes) are version 1.
func FuzzFactData(f *testing.F) {
	for _, s := range factSeeds(f) {
		f.Add(s.typ, s.data)
	}
	types := events.FactTypes()
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		ft := types[int(typ)%len(types)]
		v := 1 + int(typ)/len(types)%events.CurrentVersion(ft)
		record := fmt.Appendf(nil, `{"id":"0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d11","run":"fuzz","type":%q,"v":%d,"at":"2026-11-29T19:10:00Z","source":"fuzz","data":%s}`, ft, v, data)
		// The data's one-pass decoding (fastobject.go) against the general
		// path: the same event or the same refusal, read from the log and
		// as a new fact.
		for _, ingest := range []bool{false, true} {
			got, gerr := events.DecodeAs(record, ingest)
			want, werr := events.DecodeGeneral(record, ingest)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("ingest %v, %s v%d data %q:\nfast    %#v, %v\ngeneral %#v, %v", ingest, ft, v, data, got, gerr, want, werr)
			}
		}
		ev, err := events.Decode(record)
		if err != nil {
			fe := checkRefusal(t, err, 0)
			// The envelope is valid: a refusal names the data, or the record
			// as a whole (syntax, size, nesting). Data that is not one JSON
			// value may rewrite the envelope, which FuzzDecode covers.
			if json.Valid(data) && fe.Field != "data" && !strings.HasPrefix(fe.Field, "data.") && !(fe.Field == "" && (errors.Is(fe, events.ErrMalformed) || errors.Is(fe, events.ErrTooLarge))) {
				t.Fatalf("a refusal of %s data names field %q: %v", ft, fe.Field, err)
			}
			return
		}
		if ev.Type != ft || ev.V != v || ev.Data.FactType() != ft {
			t.Fatalf("decoded %s v%d data as %s v%d (%T)", ft, v, ev.Type, ev.V, ev.Data)
		}
		checkCanonical(t, ev)
	})
}

// FuzzCanonicalEnvelope holds the canonical envelope's fast path to the
// general decoder: the same event, or the same refusal, for every input,
// both as a record of the log and as a new fact.
func FuzzCanonicalEnvelope(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	for _, s := range envelopeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, record []byte) {
		for _, ingest := range []bool{false, true} {
			got, err := events.DecodeAs(record, ingest)
			want, werr := events.DecodeGeneral(record, ingest)
			if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("ingest %v, %q:\nfast    %#v, %v\ngeneral %#v, %v", ingest, record, got, err, want, werr)
			}
		}
		// As the element of a request body, which is validated whole
		// before its events are read.
		trimmed := bytes.Trim(record, " \t\r\n") // JSON's white space
		if len(trimmed) == 0 || !segjson.Valid(trimmed) || bytes.Count(trimmed, []byte("["))+bytes.Count(trimmed, []byte("{")) >= events.MaxDepth {
			return
		}
		evs, err := events.DecodeBatch([]byte("[" + string(record) + "]"))
		want, werr := events.DecodeGeneral(trimmed, true)
		var got events.Event
		if len(evs) == 1 {
			got = evs[0]
		}
		if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("in a batch, %q:\nfast    %#v, %v\ngeneral %#v, %v", record, got, err, want, werr)
		}
	})
}

// FuzzBatchFastPath holds DecodeBatch, which reads an array whose events
// all take the fast path without validating the body first, to the body
// validated whole and then read: the same events, or the same refusal,
// for any body. The seeds put the envelope's seeds in arrays beside valid
// events, and arrays whose text between events is not JSON.
func FuzzBatchFastPath(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	base := failed(failedData)
	for _, s := range envelopeSeeds() {
		f.Add([]byte("[" + base + "," + string(s) + "]"))
		f.Add([]byte("[" + string(s) + " , " + base + "]"))
	}
	for _, body := range []string{
		"[" + base + "," + base + "]", "[" + base + "]", "[ " + base + " ]", "[" + base + ",]", "[," + base + "]", "[" + base + base + "]",
		"[" + base + ";" + base + "]", "[" + base + "] ]", "[" + base + "]]", "[" + base, "[" + base + ",", "[" + base + ", ",
		"[" + base + "," + strings.TrimSuffix(base, "}") + "]", "[" + base + ",\"x\"]", "[" + base + ",1]", "[" + base + ",[]]",
		"[" + base + ",{}]", "[" + base + ",null]", "[" + base + "," + base + "\f]", "[\"" + base + "]", "[" + base + ",\"]",
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := events.DecodeBatch(body)
		want, werr := events.DecodeBatchGeneral(body)
		if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast    %#v, %v\ngeneral %#v, %v", body, got, err, want, werr)
		}
	})
}

// envelopeSeeds are canonical records whose envelopes hold each value the
// fast path must leave to the general one, and some it must read itself.
func envelopeSeeds() [][]byte {
	base := failed(failedData)
	env := func(field, value string) []byte {
		return []byte(record(events.TypeAttemptFailed, failedData).set(field, value).String())
	}
	seeds := [][]byte{
		[]byte(base),
		[]byte(" " + base),
		[]byte(base + "\n"),
		[]byte(strings.Replace(base, `"data":`, `"data": `, 1)),
		[]byte(strings.Replace(base, `"data":`, `"data":`+"\t", 1)),
		[]byte(strings.TrimSuffix(base, "}") + ` }`),
		[]byte(strings.TrimSuffix(base, "}") + `,"data":{}}`),
		[]byte(strings.TrimSuffix(base, "}") + `,"extra":1}`),
		[]byte(strings.Replace(base, `"data":`, `"data":[],"x":`, 1)),
	}
	for _, c := range []struct{ field, value string }{
		{"id", q(strings.ToUpper(testID))},
		{"id", q("01890a5d-ac96-774b-Bcc8-1ef0d1a2b3c4")}, // upper case in places: the general path lowers it
		{"id", q("01890a5d-ac96-774b-bcc8-1EF0d1a2b3c4")},
		{"id", q("01890a5d-ac96-774b-8cc8-1ef0d1a2b3c4")}, {"id", q("01890a5d-ac96-774b-acc8-1ef0d1a2b3c4")},
		{"id", q("01890a5d-ac96-774b-ccc8-1ef0d1a2b3c4")}, {"id", q("01890a5d-ac96-774b-bcc8-1ef0d1a2b3cg")},
		{"id", q("01890a5d-ac96+774b-bcc8-1ef0d1a2b3c4")},
		{"id", q("01890a5d-ac96-774b-7cc8-1ef0d1a2b3c4")}, // variant not RFC 4122
		{"id", q("01890a5d-ac96-774b-bcc8-1ef0d1a2b3c")},
		{"id", q("{01890a5d-ac96-774b-bcc8-1ef0d1a2b3c4}")},
		{"id", q("01890a5dac96774bbcc81ef0d1a2b3c4")},
		{"id", `"01890a5d-ac96-774b-bcc8-1ef0d1a2b3c\u0034"`},
		{"run", q(".")}, {"run", q("..")}, {"run", q("...")}, {"run", q("r/1")}, {"run", q("")}, {"run", q(strings.Repeat("r", 129))},
		{"run", `"r\/1"`}, {"run", `"r` + "\x01" + `"`},
		{"type", q("")}, {"type", q("attempt.nope")}, {"type", `"attempt.f\u0061iled"`},
		{"v", "0"}, {"v", "00"}, {"v", "01"}, {"v", "-1"}, {"v", "1.0"}, {"v", "1e0"}, {"v", "99999"}, {"v", "9"}, {"v", `"1"`},
		{"at", q("2026-11-29T19:10:00.123456789+02:00")}, {"at", q("2026-11-29T19:10:00+24:00")}, {"at", q("0000-01-01T00:30:00+01:00")},
		{"at", q("9999-12-31T23:30:00-01:00")}, {"at", q("2026-02-30T19:10:00Z")}, {"at", q("2026-11-29 19:10:00Z")}, {"at", q("")},
		{"source", q("vm/./x")}, {"source", q("../engine")}, {"source", q("engine 1")}, {"source", q("")}, {"source", q(strings.Repeat("e", 201))},
		{"source", `"engine-\u00e9"`}, {"source", q("engine-é")}, {"source", "1"}, {"source", "null"},
		{"data", "null"}, {"data", "[]"}, {"data", `"x"`}, {"data", "{}"},
		// Data the fast path validates as it cuts its members: a refusal
		// found before the bytes that are not JSON must not stand.
		{"data", `{"zzz":1,"attempt":}`}, {"data", `{"zzz":1,"attempt":"a"`}, {"data", `{"zzz":1,"attempt":"a"}}`},
		{"data", `{"attempt":"a","reason":"x","zzz":01}`}, {"data", `{"attempt":"a","reason":"x\q"}`}, {"data", `{"zzz":1,"a":tru}`},
		{"data", `{"zzz":[` + strings.Repeat("[", events.MaxDepth) + strings.Repeat("]", events.MaxDepth) + `]}`},
		{"data", `{"zzz":[` + strings.Repeat("[", events.MaxDepth-4) + strings.Repeat("]", events.MaxDepth-4) + `]}`},
		{"data", `{"zzz":1,"attempt":"a"} `}, {"data", `{"zzz":1}x`}, {"data", `{"attempt":"a","error":"x"}`},
	} {
		seeds = append(seeds, env(c.field, c.value))
	}
	return seeds
}

// FuzzValidJSON holds the fast path's JSON validator to the general one
// and to the standard library's, on what it is given: valid UTF-8 nested
// at most MaxDepth deep.
func FuzzValidJSON(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	for _, s := range []string{
		``, ` `, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `-12.5e10`, `tru`, `true `, `nul`, `null`, `"`, `"\"`, `"\u12"`, `"\u12G4"`,
		`"\u00e9\/\b\f\n\r\t"`, `"\x"`, "\"a\tb\"", "\"12345678\x1f\"", `"0123456789abcdef"`, `"é0123456789"`, `[1,]`, `[,1]`, `[]`, `[ ]`, `{}`,
		`{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{1:2}`, `[1 2]`, `{"a":[{"b":null}]}`, `[1]]`, `{"a":1}}`, "\t[\n1\r]\n",
	} {
		f.Add([]byte(s))
	}
	// Long strings, which take the vectorized search.
	long := strings.Repeat("QUJDRA==", 40)
	for _, s := range []string{long, long + `
` + long, long + "	", long + "é" + long, long + `"` + long, `A` + long} {
		f.Add([]byte(`{"a":"` + s + `"}`))
		f.Add([]byte(`["` + s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) || bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) > events.MaxDepth {
			return
		}
		got, want, std := events.ValidJSON(b), segjson.Valid(b), json.Valid(b)
		if got != want || got != std {
			t.Fatalf("%q: validJSON %v, segmentio %v, encoding/json %v", b, got, want, std)
		}
	})
}
