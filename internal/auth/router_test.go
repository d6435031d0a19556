package auth_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/auth"
)

const (
	scopedSecret = "scoped-0123456789abcdef0123456789abcdef"
	adminSecret  = "admin-0123456789abcdef0123456789abcdef"
)

// testRouter serves two run-scoped routes and an unscoped one; each
// answers with the run it was routed.
func testRouter(t *testing.T) (*auth.Router, *bytes.Buffer) {
	t.Helper()
	a, err := auth.New([]auth.Token{
		{Name: "scoped", Token: scopedSecret, Role: auth.Reader, Runs: []string{"run-a*"}},
		{Name: "boss", Token: adminSecret, Role: auth.Admin},
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	rt := auth.NewRouter(a, slog.New(slog.NewJSONHandler(&logs, nil)))
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth.FromContext(r.Context()) == nil {
			t.Errorf("%s reached its handler without a principal", r.URL)
		}
		w.Write([]byte("run=" + r.PathValue("run")))
	})
	rt.Handle("GET /v1/runs/{run}/status", echo)
	rt.Handle("GET /v1/runs/{run}/tasks/{task...}", echo)
	rt.Handle("POST /v1/events", echo)
	rt.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	return rt, &logs
}

func serve(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://x/", nil)
	req.URL.Path, req.URL.RawPath = "", ""
	u, _ := req.URL.Parse(target)
	req.URL, req.RequestURI = u, target
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// The run the scope check holds against the token is the one the router
// routed, however the path spells it.
func TestRouterChecksTheRoutedRun(t *testing.T) {
	rt, logs := testRouter(t)
	for _, c := range []struct {
		target string
		want   int
	}{
		{"/v1/runs/run-a1/status", 200},
		{"/v1/%72uns/run-a1/status", 200},
		{"/v1/runs/run-b/status", 403},
		{"/v1/%72uns/run-b/status", 403},
		{"/%761/runs/run-b/status", 403},
		{"/v1/run%73/run-b/status", 403},
		{"/v1/runs/%72un-b/status", 403},
		{"/%76%31/%72%75%6E%73/%72%75%6E%2D%62/%73%74%61%74%75%73", 403},
		{"/v1/runs/run-a1%2F..%2Frun-b/status", 403},
		{"/v1/runs/run-a1;x/status", 200}, // run "run-a1;x" matches run-a*; the handler judges the id
		{"/v1/runs/run-b;run-a1/status", 403},
		{"/v1/%72uns/run-b/tasks/t%2F1", 403},
		{"/v1/%72uns/run-a1/tasks/t%2F1", 200},
	} {
		w := serve(rt, http.MethodGet, c.target, scopedSecret)
		if w.Code != c.want {
			t.Errorf("GET %s: got %d %s, want %d", c.target, w.Code, w.Body, c.want)
		}
		if w.Code == 200 && !strings.HasPrefix(w.Body.String(), "run=run-a") {
			t.Errorf("GET %s: routed %s", c.target, w.Body)
		}
		if w.Code == 403 && strings.Contains(w.Body.String(), "run=") {
			t.Errorf("GET %s: the handler ran on a refusal", c.target)
		}
	}
	// An admin reaches every run; nobody reaches anything without a token.
	if w := serve(rt, http.MethodGet, "/v1/%72uns/run-b/status", adminSecret); w.Code != 200 || w.Body.String() != "run=run-b" {
		t.Errorf("admin: got %d %s", w.Code, w.Body)
	}
	if w := serve(rt, http.MethodGet, "/v1/%72uns/run-a1/status", ""); w.Code != 401 {
		t.Errorf("no token: got %d", w.Code)
	}
	if w := serve(rt, http.MethodGet, "/healthz", ""); w.Code != 200 {
		t.Errorf("open route: got %d", w.Code)
	}
	// Refused reads are logged like refused writes: one line each, with
	// the token's name, the routed run and the path as sent.
	var refused int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "request refused" {
			continue
		}
		refused++
		if rec["status"] == float64(403) && (rec["token"] != "scoped" || rec["run"] == "" || rec["pattern"] == "" || rec["path"] == "" || rec["reason"] != "run scope") {
			t.Errorf("refusal logged as %s", line)
		}
		if strings.Contains(line, scopedSecret) || strings.Contains(line, adminSecret) {
			t.Errorf("the log holds a secret: %s", line)
		}
	}
	if refused != 10 {
		t.Errorf("got %d refusals logged, want 10:\n%s", refused, logs)
	}
}

// A route that names a run other than as {run} would escape the scope
// check: registering it panics.
func TestRouterRefusesRoutesThatEscapeTheScope(t *testing.T) {
	for _, pattern := range []string{
		"GET /v1/runs/{id}/status",
		"GET /v1/runs/{runID}/status",
		"GET /v1/run/{name}",
		"GET /v1/things/{run_id}",
		"GET /v1/runs/fixed/status",
		"/v1/events",
		"GET v1/events",
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %q did not panic", pattern)
				}
			}()
			auth.NewRouter(nil, nil).Handle(pattern, http.NotFoundHandler())
		}()
	}
	rt := auth.NewRouter(nil, nil)
	rt.Handle("GET /v1/runs/{run}/batches/{seq}", http.NotFoundHandler())
	rt.Handle("GET /v1/runs", http.NotFoundHandler())
	rt.Handle("GET /metrics", http.NotFoundHandler())
	want := []auth.Route{
		{Pattern: "GET /v1/runs/{run}/batches/{seq}", Access: auth.ReadBatches, Scoped: true},
		{Pattern: "GET /v1/runs", Access: auth.Read},
		{Pattern: "GET /metrics", Access: auth.Open},
	}
	got := rt.Routes()
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("route %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A method a known path is not served with is 405 with Allow, after
// authentication; an unknown path is 404.
func TestRouterMethodNotAllowed(t *testing.T) {
	rt, _ := testRouter(t)
	for _, c := range []struct {
		method, target, token string
		want                  int
		allow                 string
	}{
		{http.MethodPut, "/v1/events", adminSecret, 405, "POST"},
		{http.MethodGet, "/v1/events", adminSecret, 405, "POST"},
		{http.MethodHead, "/v1/events", adminSecret, 405, "POST"},
		{http.MethodPost, "/v1/runs/r/status", adminSecret, 405, "GET, HEAD"},
		{http.MethodDelete, "/v1/%72uns/r/tasks/a/b", adminSecret, 405, "GET, HEAD"},
		{http.MethodPost, "/healthz", adminSecret, 405, "GET, HEAD"},
		{http.MethodPut, "/v1/events", "", 401, ""},
		{http.MethodGet, "/v1/nothing", adminSecret, 404, ""},
		{http.MethodGet, "/v1/nothing", "", 401, ""},
		{http.MethodHead, "/v1/runs/r/status", scopedSecret, 403, ""},
		{http.MethodHead, "/v1/runs/run-a/status", scopedSecret, 200, ""},
	} {
		w := serve(rt, c.method, c.target, c.token)
		if w.Code != c.want || w.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: got %d Allow %q, want %d Allow %q", c.method, c.target, w.Code, w.Header().Get("Allow"), c.want, c.allow)
		}
	}
	// Without authentication the same answers, and no 401.
	open := auth.NewRouter(nil, nil)
	open.Handle("POST /v1/events", http.NotFoundHandler())
	if w := serve(open, http.MethodPut, "/v1/events", ""); w.Code != 405 || w.Header().Get("Allow") != "POST" || !strings.Contains(w.Body.String(), `"method_not_allowed"`) {
		t.Errorf("without tokens: got %d Allow %q %s", w.Code, w.Header().Get("Allow"), w.Body)
	}
}
