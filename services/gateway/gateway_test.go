package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/gateway"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    gateway.Options
		says []string
	}{
		{"ok", gateway.Options{Upstreams: []string{"http://ingest:7070", "https://projector-2:7070/"}}, nil},
		{"none", gateway.Options{}, []string{"no upstreams"}},
		{"not a base URL", gateway.Options{Upstreams: []string{"projector:7070", "http://a:1/v1", "ftp://a:1", "http://a:1?x=1"}},
			[]string{`"projector:7070" is not a base URL`, `"http://a:1/v1" is not`, `"ftp://a:1" is not`, `"http://a:1?x=1" is not`}},
		{"twice", gateway.Options{Upstreams: []string{"http://a:1", "http://a:1/"}}, []string{"named twice"}},
		{"negative", gateway.Options{Upstreams: []string{"http://a:1"}, BatchWait: -time.Second}, []string{"batch wait -1s is negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.says) == 0 {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one saying %q", tc.says)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("got %q, want it to say %q", err, s)
				}
			}
		})
	}
}

// replica is one ledger process behind the gateway: ingest and the api
// over its own topics.
type replica struct {
	kc kafkalog.Config
	s  *stack.Stack
	// stop shuts the stack down, once.
	stop func()
}

func startReplica(t *testing.T) replica {
	t.Helper()
	kc := testenv.RealKafka(t)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
		Only: []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI}})
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() { _ = s.Shutdown(context.Background()) })
	t.Cleanup(stop)
	return replica{kc: kc, s: s, stop: stop}
}

// A replica that takes over from one that served batch k, but has not
// folded that far yet, does not answer "no such batch" through the
// gateway: the gateway holds the read until the replica seals it, or
// answers 503 (retry) when it does not within BatchWait. A batch no
// replica served is still 404 at once.
//
// The replicas fold separate topics holding the same records at the same
// positions, so the test decides when the second one gets them; the
// decisions do not depend on the topic's name.
func TestLaggingReplicaServesBatchesAlreadyServed(t *testing.T) {
	t.Parallel()
	a, b := startReplica(t), startReplica(t)
	var logs testenv.LogBuffer
	g, err := gateway.New(gateway.Options{Upstreams: []string{a.s.URL(), b.s.URL()}, CheckInterval: 50 * time.Millisecond,
		BatchWait: 15 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g.Start(context.Background())
	defer g.Close()
	front := httptest.NewServer(g)
	defer front.Close()
	defer func() {
		if t.Failed() {
			t.Logf("gateway:\n%s", logs.String())
		}
	}()

	plan, err := simulate.Generate(simulate.Options{Seed: 5, Tasks: 16, Steps: 2, BatchGroups: 3, MaxTurns: 20}, "lag-run")
	if err != nil {
		t.Fatal(err)
	}
	values, err := events.EncodeBatch(plan.All())
	if err != nil {
		t.Fatal(err)
	}
	// Straight to a: through the gateway they would be spread over both
	// ingests, that is over both logs.
	post(t, a.s.URL(), values)
	base := front.URL + "/v1/runs/" + plan.Run
	var served []byte
	for k := 1; ; k++ {
		status, body := get(t, fmt.Sprintf("%s/batches/next?after=%d&wait=20s", base, k-1))
		if status == http.StatusNoContent {
			if k < 3 {
				t.Fatalf("only %d batches sealed; the test needs 2", k-1)
			}
			break
		}
		if status != http.StatusOK {
			t.Fatalf("batch %d: HTTP %d: %s", k, status, body)
		}
		_, served = get(t, fmt.Sprintf("%s/batches/%d/samples", base, k))
	}
	var m struct {
		BatchesSealed int `json:"batches_sealed"`
	}
	_, st := get(t, base+"/status")
	if err := json.Unmarshal(st, &m); err != nil {
		t.Fatal(err)
	}
	n := m.BatchesSealed

	// a goes away; b has nothing yet.
	a.stop()
	testenv.CheckFor(t, 10*time.Second, "the gateway fails over to b", func() bool {
		h, _ := g.Health()
		return h.Upstreams[1].Primary
	})
	t0 := time.Now()
	status, body := get(t, fmt.Sprintf("%s/batches/%d/samples", base, n))
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "served before") || time.Since(t0) < 15*time.Second {
		t.Errorf("a batch served before, on a replica that never seals it: HTTP %d after %v: %s; want 503 after the 15 s batch wait", status, time.Since(t0), body)
	}
	if status, body := get(t, fmt.Sprintf("%s/batches/%d/samples", base, n+1)); status != http.StatusNotFound {
		t.Errorf("a batch never served: HTTP %d: %s; want 404 at once", status, body)
	}

	// b gets the same records a second after the read starts.
	go func() {
		time.Sleep(time.Second)
		post(t, b.s.URL(), values)
	}()
	t0 = time.Now()
	status, body = get(t, fmt.Sprintf("%s/batches/%d/samples", base, n))
	if status != http.StatusOK || !bytes.Equal(body, served) {
		t.Fatalf("batch %d's samples through the gateway from the lagging replica: HTTP %d, %d bytes, want 200 and the %d bytes a served: %.200s", n, status, len(body), len(served), body)
	}
	if time.Since(t0) < time.Second {
		t.Errorf("answered after %v, before b had the records", time.Since(t0))
	}
	if !strings.Contains(logs.String(), "waiting for a replica to seal a batch already served") {
		t.Error("the gateway did not say it waited for the lagging replica")
	}
}

// Requests are refused in the contract's shape when nothing can serve
// them: an unknown path 404, no healthy upstream 503 (retry).
func TestGatewayRefusals(t *testing.T) {
	g, err := gateway.New(gateway.Options{Upstreams: []string{"http://127.0.0.1:1"}, CheckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g.Start(context.Background())
	defer g.Close()
	front := httptest.NewServer(g)
	defer front.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/v1/runs", http.StatusServiceUnavailable, "unavailable"},
		{http.MethodPost, "/v1/events", http.StatusServiceUnavailable, "unavailable"},
		{http.MethodGet, "/admin", http.StatusNotFound, "not_found"},
	} {
		req, _ := http.NewRequest(tc.method, front.URL+tc.path, strings.NewReader("[]"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || e.Error.Code != tc.code {
			t.Errorf("%s %s: HTTP %d %q (%s), want %d %q", tc.method, tc.path, resp.StatusCode, e.Error.Code, e.Error.Message, tc.status, tc.code)
		}
	}
	if h, ok := g.Health(); ok || h.Upstreams[0].Healthy || h.Upstreams[0].Error == "" {
		t.Errorf("health with the only upstream unreachable: %+v, ok %v; want unavailable, naming the error", h, ok)
	}
}

func post(t *testing.T, url string, values [][]byte) {
	t.Helper()
	for lo := 0; lo < len(values); lo += 128 {
		body := append([]byte{'['}, bytes.Join(values[lo:min(lo+128, len(values))], []byte{','})...)
		body = append(body, ']')
		resp, err := http.Post(url+"/v1/events", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP %d: %s", resp.StatusCode, raw)
			return
		}
	}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
