package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCanonical(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Canonical(ok)
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/", http.StatusTeapot},
		{"/v1/runs/r/status", http.StatusTeapot},
		{"/v1/runs/%2e%2e/status", http.StatusTeapot}, // an escaped segment is the route's to judge
		{"/v1/runs/a%2fb/status", http.StatusTeapot},
		{"/v1/runs/../status", http.StatusBadRequest},
		{"/v1/runs/./status", http.StatusBadRequest},
		{"//v1/runs", http.StatusBadRequest},
		{"/v1/runs/", http.StatusBadRequest},
		{"/v1/runs/r/tasks/a/../b", http.StatusBadRequest},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://x"+tc.target, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s: got %d, want %d", tc.target, w.Code, tc.want)
			continue
		}
		if tc.want == http.StatusBadRequest {
			var eb ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error.Code != "invalid_path" {
				t.Errorf("%s: got body %s, want code invalid_path", tc.target, w.Body)
			}
		}
	}
}

func TestLimitBytes(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := LimitBytes(100, 80, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	send := func(length int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(""))
		req.ContentLength = length
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	// A chunked body is charged the per-request bound: 80 of 100.
	done := make(chan struct{})
	go func() { send(-1); close(done) }()
	<-entered
	// 30 more do not fit; 20 do.
	if w := send(30); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"overloaded"`) {
		t.Errorf("over budget: got %d %q Retry-After %q, want 503 overloaded with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	go send(20)
	<-entered
	close(release)
	<-done
	// Released: a request of the whole bound fits again.
	if w := send(80); w.Code != http.StatusOK {
		t.Errorf("after release: got %d, want 200", w.Code)
	}
}

func TestServerOptions(t *testing.T) {
	if err := (ServerOptions{ReadTimeout: -time.Second, MaxHeaderBytes: -1}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "read timeout") || !strings.Contains(err.Error(), "header bytes") {
		t.Errorf("got %v, want both problems named", err)
	}
	o := ServerOptions{}.withDefaults()
	if o.ReadHeaderTimeout != DefaultReadHeaderTimeout || o.ReadTimeout != DefaultReadTimeout || o.IdleTimeout != DefaultIdleTimeout ||
		o.MaxHeaderBytes != DefaultMaxHeaderBytes || o.MaxConns != DefaultMaxConns {
		t.Errorf("zero value: got %+v, want the defaults", o)
	}
}
