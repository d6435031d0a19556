package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// Callers of the authenticated stack: one token per role, two limited to
// run-a, and the ways of having no valid token.
const (
	asNone    = "none"
	asUnknown = "unknown"
)

var testTokens = []auth.Token{
	{Name: "admin", Token: "adm-" + strings.Repeat("a", 40), Role: auth.Admin},
	{Name: "producer", Token: "pro-" + strings.Repeat("p", 40), Role: auth.Producer},
	{Name: "trainer", Token: "tra-" + strings.Repeat("t", 40), Role: auth.Trainer},
	{Name: "reader", SHA256: auth.Hash("rea-" + strings.Repeat("r", 40)), Role: auth.Reader},
	{Name: "producer-a", Token: "pra-" + strings.Repeat("q", 40), Role: auth.Producer, Runs: []string{"run-a*"}},
	{Name: "reader-a", Token: "rda-" + strings.Repeat("s", 40), Role: auth.Reader, Runs: []string{"run-a*"}},
	{Name: "trainer-a", Token: "tra-" + strings.Repeat("v", 40), Role: auth.Trainer, Runs: []string{"run-a*"}},
}

// secrets maps a caller to the bearer token it sends.
var secrets = map[string]string{
	"admin": testTokens[0].Token, "producer": testTokens[1].Token, "trainer": testTokens[2].Token,
	"reader": "rea-" + strings.Repeat("r", 40), "producer-a": testTokens[4].Token, "reader-a": testTokens[5].Token,
	"trainer-a": testTokens[6].Token,
	asUnknown:   "unk-" + strings.Repeat("u", 40),
}

type authStack struct {
	*stack.Stack
	kc  kafkalog.Config
	log *testenv.LogBuffer
}

func startAuthStack(t testing.TB, kc kafkalog.Config, o stack.Options) *authStack {
	t.Helper()
	a, err := auth.New(testTokens)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	o.Addr, o.Kafka, o.Auth = "127.0.0.1:0", kc, a
	o.Only = []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}
	o.DataDir = t.TempDir()
	o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := stack.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if t.Failed() {
			t.Logf("stack log:\n%s", logs.String())
		}
	})
	return &authStack{Stack: s, kc: kc, log: &logs}
}

func (s *authStack) do(t testing.TB, client *http.Client, method, path, as string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if as != asNone {
		req.Header.Set("Authorization", "Bearer "+secrets[as])
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// goldenFacts returns one valid fact of every catalogue type, for run.
func goldenFacts(t testing.TB, run string) map[events.Type]events.Event {
	t.Helper()
	files, err := filepath.Glob("../../events/testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("golden facts: %v (%d files)", err, len(files))
	}
	out := map[events.Type]events.Event{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[ev.Type] = events.New(run, ev.Source, ev.At, ev.Data)
	}
	for _, typ := range events.FactTypes() {
		if _, ok := out[typ]; !ok {
			t.Fatalf("no golden fact of type %s", typ)
		}
	}
	return out
}

func errorOf(t *testing.T, b []byte) httpx.ErrorDetail {
	t.Helper()
	var e httpx.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e.Error
}

// TestAuthorization runs every role against every fact type and every
// route of a stack on real Kafka, and checks that refusals leave the log
// untouched and that no secret reaches the logs.
func TestAuthorization(t *testing.T) {
	kc := testenv.RealKafka(t)
	s := startAuthStack(t, kc, stack.Options{})
	facts := goldenFacts(t, "run-b")

	t.Run("append by fact type", func(t *testing.T) {
		for _, typ := range events.FactTypes() {
			for _, as := range []string{"admin", "producer", "trainer", "reader", asNone, asUnknown} {
				t.Run(string(typ)+"/"+as, func(t *testing.T) {
					want := http.StatusForbidden
					switch {
					case as == asNone || as == asUnknown:
						want = http.StatusUnauthorized
					case as == "admin", auth.FactRoles[typ] == auth.Role(as):
						want = http.StatusOK
					}
					ev := facts[typ]
					ev.ID = events.NewID()
					before := endOffsetsSum(t, kc)
					resp, b := s.do(t, nil, http.MethodPost, "/v1/events", as, body(t, []events.Event{ev}))
					if resp.StatusCode != want {
						t.Fatalf("%s posting %s: got %d %s, want %d", as, typ, resp.StatusCode, b, want)
					}
					if want == http.StatusOK {
						return
					}
					if after := endOffsetsSum(t, kc); after != before {
						t.Errorf("refused request moved the facts topic's end offsets from %d to %d", before, after)
					}
					e := errorOf(t, b)
					switch {
					case want == http.StatusUnauthorized:
						if e.Code != "unauthorized" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
							t.Errorf("got code %q and WWW-Authenticate %q, want unauthorized and a Bearer challenge", e.Code, resp.Header.Get("WWW-Authenticate"))
						}
					case as == "reader":
						if e.Code != "forbidden" || e.Index != nil {
							t.Errorf("got %+v, want forbidden for the whole route", e)
						}
					default:
						if e.Code != "forbidden" || e.Index == nil || *e.Index != 0 || e.Field != "type" || !strings.Contains(e.Message, string(typ)) {
							t.Errorf("got %+v, want forbidden at index 0 field type naming %s", e, typ)
						}
					}
				})
			}
		}
	})

	t.Run("a producer cannot publish gradient.applied or policy.published", func(t *testing.T) {
		for _, typ := range []events.Type{events.TypeGradientApplied, events.TypePolicyPublished} {
			ev := facts[typ]
			ev.ID = events.NewID()
			resp, b := s.do(t, nil, http.MethodPost, "/v1/events", "producer", body(t, []events.Event{ev}))
			if e := errorOf(t, b); resp.StatusCode != http.StatusForbidden || e.Field != "type" {
				t.Errorf("producer posting %s: got %d %s, want 403 on field type", typ, resp.StatusCode, b)
			}
		}
	})

	t.Run("one forbidden event refuses the whole request", func(t *testing.T) {
		evs := runEvents("run-b", 3)
		ga := facts[events.TypeGradientApplied]
		ga.ID = events.NewID()
		evs = append(evs, ga)
		before := endOffsetsSum(t, kc)
		resp, b := s.do(t, nil, http.MethodPost, "/v1/events", "producer", body(t, evs))
		e := errorOf(t, b)
		if resp.StatusCode != http.StatusForbidden || e.Index == nil || *e.Index != 3 || e.Field != "type" {
			t.Fatalf("got %d %+v, want 403 at index 3 field type", resp.StatusCode, e)
		}
		if after := endOffsetsSum(t, kc); after != before {
			t.Errorf("end offsets moved from %d to %d: the allowed events of a refused request were appended", before, after)
		}
	})

	t.Run("a token for run A cannot write run B", func(t *testing.T) {
		resp, b := s.do(t, nil, http.MethodPost, "/v1/events", "producer-a", body(t, runEvents("run-a1", 2)))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("producer-a writing run-a1: got %d %s, want 200", resp.StatusCode, b)
		}
		mixed := append(runEvents("run-a1", 2), runEvents("run-b", 1)...)
		before := endOffsetsSum(t, kc)
		resp, b = s.do(t, nil, http.MethodPost, "/v1/events", "producer-a", body(t, mixed))
		e := errorOf(t, b)
		if resp.StatusCode != http.StatusForbidden || e.Index == nil || *e.Index != 2 || e.Field != "run" || !strings.Contains(e.Message, "run-b") {
			t.Fatalf("producer-a writing run-b: got %d %+v, want 403 at index 2 field run", resp.StatusCode, e)
		}
		if after := endOffsetsSum(t, kc); after != before {
			t.Errorf("end offsets moved from %d to %d", before, after)
		}
		// Reads are scoped the same way, and the list of runs shows only
		// the runs in scope.
		testenv.CheckFor(t, 30*time.Second, "the projector sees run-a1 and run-b", func() bool {
			_, b := s.do(t, nil, http.MethodGet, "/v1/runs", "reader", nil)
			return strings.Contains(string(b), `"run-a1"`) && strings.Contains(string(b), `"run-b"`)
		})
		_, b = s.do(t, nil, http.MethodGet, "/v1/runs", "reader-a", nil)
		if !strings.Contains(string(b), `"run-a1"`) || strings.Contains(string(b), `"run-b"`) {
			t.Errorf("reader-a listing runs: got %s, want run-a1 and not run-b", b)
		}
		if resp, _ := s.do(t, nil, http.MethodGet, "/v1/runs/run-b/status", "reader-a", nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("reader-a reading run-b: got %d, want 403", resp.StatusCode)
		}
		if resp, _ := s.do(t, nil, http.MethodGet, "/v1/runs/run-a1/status", "reader-a", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("reader-a reading run-a1: got %d, want 200", resp.StatusCode)
		}
	})

	t.Run("reads by route", func(t *testing.T) {
		routes := []struct {
			path    string
			allowed []string
		}{
			{"/v1/runs", []string{"reader", "admin"}},
			{"/v1/runs/run-b/status", []string{"reader", "admin"}},
			{"/v1/runs/run-b/tasks/t-1", []string{"producer", "reader", "admin"}},
			{"/v1/runs/run-b/batches/1", []string{"trainer", "reader", "admin"}},
			{"/v1/runs/run-b/batches/1/samples", []string{"trainer", "reader", "admin"}},
			{"/v1/runs/run-b/batches/next?after=0&wait=0s", []string{"trainer", "reader", "admin"}},
			{"/healthz", []string{"admin", "producer", "trainer", "reader", asNone, asUnknown}},
		}
		for _, r := range routes {
			for _, as := range []string{"admin", "producer", "trainer", "reader", asNone, asUnknown} {
				t.Run(r.path+"/"+as, func(t *testing.T) {
					resp, b := s.do(t, nil, http.MethodGet, r.path, as, nil)
					allowed := false
					for _, a := range r.allowed {
						allowed = allowed || a == as
					}
					switch {
					case allowed:
						if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
							t.Errorf("got %d %s, want the route's own answer", resp.StatusCode, b)
						}
					case as == asNone || as == asUnknown:
						if resp.StatusCode != http.StatusUnauthorized {
							t.Errorf("got %d, want 401", resp.StatusCode)
						}
					default:
						if resp.StatusCode != http.StatusForbidden || errorOf(t, b).Code != "forbidden" {
							t.Errorf("got %d %s, want 403", resp.StatusCode, b)
						}
					}
				})
			}
		}
	})

	t.Run("no secret in the logs", func(t *testing.T) {
		logs := s.log.String()
		for as, secret := range secrets {
			if strings.Contains(logs, secret) {
				t.Errorf("the log holds the secret of %s", as)
			}
		}
		if !strings.Contains(logs, `"token":"producer"`) {
			t.Errorf("the log does not name the refused token producer:\n%s", logs)
		}
	})
}
