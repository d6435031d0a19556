package events_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/rolloutledger/rolloutledger/events"
)

// vectorsPath is the file of request bodies and their verdicts shared with
// the SDKs, which must reach the same verdict for every body.
var vectorsPath = filepath.Join("..", "testdata", "vectors", "events.json")

// vector is one case of the shared file. The body is given as a JSON string
// in "body", or, when it is not valid UTF-8 and so cannot be one, as
// standard base64 in "body_base64". A body is refused when decoding or
// encoding it (DecodeBatch, then EncodeBatch) fails; "error" says how.
type vector struct {
	Name       string       `json:"name"`
	Body       *string      `json:"body,omitempty"`
	BodyBase64 string       `json:"body_base64,omitempty"`
	Valid      bool         `json:"valid"`
	Error      *vectorError `json:"error,omitempty"`
}

type vectorError struct {
	Code  string `json:"code"`
	Index int    `json:"index"`
	Field string `json:"field"`
}

func (v vector) body() ([]byte, error) {
	if v.Body != nil {
		return []byte(*v.Body), nil
	}
	return base64.StdEncoding.DecodeString(v.BodyBase64)
}

func newVector(name, body string) vector {
	if utf8.ValidString(body) {
		return vector{Name: name, Body: &body}
	}
	return vector{Name: name, BodyBase64: base64.StdEncoding.EncodeToString([]byte(body))}
}

// wantVectors builds the shared cases from this package's tests: every valid
// example and every bad input but the largest.
func wantVectors() []vector {
	var out []vector
	for _, ex := range examples {
		v := newVector("valid/"+ex.name, ex.body())
		v.Valid = true
		out = append(out, v)
	}
	for _, bad := range badInputs() {
		if bad.large {
			continue
		}
		v := newVector(bad.name, bad.body)
		v.Error = &vectorError{Code: wireCodes[bad.err], Index: bad.index, Field: bad.field}
		out = append(out, v)
	}
	return out
}

func encodeVectors(vs []vector) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(vs); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func TestVectors(t *testing.T) {
	want := wantVectors()
	if *update {
		b, err := encodeVectors(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(vectorsPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("%v (run go test ./events/ -run TestVectors -update to create it)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var got []vector
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%s: %v", vectorsPath, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s is stale: it differs from the cases in the tests (run go test ./events/ -run TestVectors -update)", vectorsPath)
	}

	names := map[string]bool{}
	types := map[events.Type]bool{}
	codes := map[string]bool{}
	for _, v := range got {
		if names[v.Name] {
			t.Errorf("two vectors named %q", v.Name)
		}
		names[v.Name] = true
		t.Run(v.Name, func(t *testing.T) {
			body, err := v.body()
			if err != nil {
				t.Fatalf("bad body_base64: %v", err)
			}
			if (v.Body == nil) == (v.BodyBase64 == "") {
				t.Fatalf("got body %v and body_base64 %q, want exactly one", v.Body, v.BodyBase64)
			}
			if v.Valid != (v.Error == nil) {
				t.Fatalf("got valid %v and error %+v, want an error exactly when invalid", v.Valid, v.Error)
			}
			evs, err := events.DecodeBatch(body)
			if err == nil {
				_, err = events.EncodeBatch(evs)
			}
			if v.Valid {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				for _, ev := range evs {
					types[ev.Type] = true
				}
				return
			}
			if err == nil {
				t.Fatalf("got valid, want %+v", *v.Error)
			}
			fe, ok := events.AsFieldError(err)
			if !ok {
				t.Fatalf("got %T %v, want a *events.FieldError", err, err)
			}
			codes[fe.Code()] = true
			if got := (vectorError{Code: fe.Code(), Index: fe.Index, Field: fe.Field}); got != *v.Error {
				t.Errorf("got %+v, want %+v (%v)", got, *v.Error, err)
			}
		})
	}
	for _, typ := range events.FactTypes() {
		if !types[typ] {
			t.Errorf("no valid vector of %s", typ)
		}
	}
	for _, code := range wireCodes {
		if !codes[code] && code != "too_large" {
			t.Errorf("no vector refused with %s", code)
		}
	}
}
