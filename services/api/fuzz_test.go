package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
)

// FuzzGet sends arbitrary request targets to the query routes, as the
// stack mounts them (on an auth.Router, behind httpx.Canonical). The
// answer is 200, 204, 400 or 404, and every 4xx has the contract's error
// shape. The projector's state is empty: the routes' parsing of runs,
// tasks, sequence numbers and waits is what is explored.
func FuzzGet(f *testing.F) {
	for _, s := range []string{
		"/v1/runs", "/v1/runs/r/status", "/v1/runs/r/batches/1", "/v1/runs/r/batches/1/samples",
		"/v1/runs/r/batches/next?after=0&wait=1ms", "/v1/runs/r/tasks/swe/t-1", "/v1/runs/%2e%2e/status",
		"/v1/runs/../status", "/v1/runs/r/tasks/a%2f..%2fb", "/v1/runs/r%00/status", "/healthz", "/v1/runs/r/batches/99999999999999999999",
	} {
		f.Add(s)
	}
	h := offlineService(f)
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || u.Scheme != "" {
			return // net/http refuses such a request line before any handler
		}
		// A long poll ends with the request; the fuzzer does not wait.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
		req.URL, req.RequestURI = u, target
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK, http.StatusNoContent:
			return
		case http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("GET %q: status %d (%s), want 200, 204, 400 or 404", target, w.Code, w.Body.String())
		}
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		var eb httpx.ErrorBody
		if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("GET %q: %d with body %q, want the contract's error shape (%v)", target, w.Code, w.Body.String(), err)
		}
	})
}
