package ingest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// recorder is an Appender that keeps what it was given: inside a fuzz
// target it stands in for Kafka, whose side of the contract the stack's
// tests check against a real broker.
type recorder struct {
	mu   sync.Mutex
	recs []kafkalog.Record
}

func (r *recorder) Append(_ context.Context, recs []kafkalog.Record) ([]kafkalog.Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pos := make([]kafkalog.Position, len(recs))
	for i := range recs {
		pos[i] = kafkalog.Position{Partition: 0, Offset: int64(len(r.recs) + i)}
	}
	// The ingest reuses the values' memory once Append returned.
	for _, rec := range recs {
		rec.Value = bytes.Clone(rec.Value)
		r.recs = append(r.recs, rec)
	}
	return pos, nil
}

// vectorBodies are the request bodies of the shared test vectors.
func vectorBodies(f *testing.F) [][]byte {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors", "events.json"))
	if err != nil {
		f.Fatal(err)
	}
	var vs []struct {
		Body       *string `json:"body"`
		BodyBase64 string  `json:"body_base64"`
	}
	if err := json.Unmarshal(raw, &vs); err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, v := range vs {
		if v.Body != nil {
			out = append(out, []byte(*v.Body))
		} else if b, err := base64.StdEncoding.DecodeString(v.BodyBase64); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// FuzzPostEvents sends arbitrary bodies, content types and trace headers
// to POST /v1/events. The answer is 200, 400, 413 or 415 (the appender
// never fails here); any refusal has the contract's error shape and
// appended nothing; an acceptance appended exactly the canonical records
// of the body's events, with only well-formed headers.
func FuzzPostEvents(f *testing.F) {
	const tp = "00-4bf92f3577b34ca3a2b9e0d0f2b1c3d4-00f067aa0ba902b7-01"
	for i, b := range vectorBodies(f) {
		ct := []string{"application/json", "application/json; charset=utf-8", "text/plain", ""}[i%4]
		f.Add(b, ct, []string{tp, "", "00-xyz", tp + "\r\nX: 1"}[i%4])
	}
	rec := &recorder{}
	mux := http.NewServeMux()
	(&Service{Appender: rec, Bodies: httpx.BodyLimits{MaxBytes: 4 << 20}}).Register(mux)
	f.Fuzz(func(t *testing.T, body []byte, contentType, traceparent string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if contentType == "" {
			req.Header.Del("Content-Type")
		}
		req.Header.Set("Traceparent", traceparent)
		w := httptest.NewRecorder()
		rec.mu.Lock()
		before := len(rec.recs)
		rec.mu.Unlock()
		mux.ServeHTTP(w, req)
		rec.mu.Lock()
		appended := rec.recs[before:]
		rec.recs = rec.recs[:0]
		rec.mu.Unlock()

		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			if len(appended) > 0 {
				t.Fatalf("%d, yet %d records appended", w.Code, len(appended))
			}
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			var eb struct {
				Error struct {
					Code, Message, Field string
					Index                *int
				}
			}
			if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("%d with body %q: want the contract's error shape (%v)", w.Code, w.Body.String(), err)
			}
			return
		default:
			t.Fatalf("status %d (%s), want 200, 400, 413 or 415", w.Code, w.Body.String())
		}
		evs, err := events.DecodeBatch(body)
		if err != nil {
			t.Fatalf("200 for a body DecodeBatch refuses: %v", err)
		}
		var resp Response
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || len(resp.Events) != len(evs) || len(appended) != len(evs) {
			t.Fatalf("200 with %d acknowledgments and %d records for %d events (%v)", len(resp.Events), len(appended), len(evs), err)
		}
		for i, r := range appended {
			want, err := events.Encode(evs[i])
			if err != nil || !bytes.Equal(r.Value, want) || string(r.Key) != evs[i].Run || resp.Events[i].ID != evs[i].ID {
				t.Fatalf("record %d is not event %d's canonical form keyed by its run", i, i)
			}
			for _, h := range r.Headers {
				switch {
				case h.Key == "type" && string(h.Value) == string(evs[i].Type):
				case h.Key == "v" && string(h.Value) == strconv.Itoa(evs[i].V):
				default:
					t.Fatalf("record %d carries header %s=%q", i, h.Key, h.Value)
				}
				if strings.ContainsAny(string(h.Value), "\r\n\x00") {
					t.Fatalf("header %s carries a control character", h.Key)
				}
			}
		}
	})
}
