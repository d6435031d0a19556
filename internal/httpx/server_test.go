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
		{"/ui/", http.StatusTeapot}, // the explorer's address, the one trailing slash
		{"/ui//", http.StatusBadRequest},
		{"/ui/x/", http.StatusBadRequest},
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
