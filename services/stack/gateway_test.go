package stack_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func TestGatewayOptions(t *testing.T) {
	kc := kafkalog.Config{Brokers: []string{"127.0.0.1:9092"}}
	for _, tc := range []struct {
		name string
		o    stack.Options
		says string
	}{
		{"alone, no Kafka or data needed", stack.Options{Addr: ":0", Only: []string{stack.ServiceGateway}, Upstreams: []string{"http://a:7070"}}, ""},
		{"with other services", stack.Options{Addr: ":0", Kafka: kc, DataDir: "d", Only: []string{stack.ServiceGateway, stack.ServiceAPI, stack.ServiceProjector}, Upstreams: []string{"http://a:7070"}}, "the gateway runs alone"},
		{"no upstream", stack.Options{Addr: ":0", Only: []string{stack.ServiceGateway}}, "gateway: no upstreams"},
		{"bad upstream", stack.Options{Addr: ":0", Only: []string{stack.ServiceGateway}, Upstreams: []string{"a:7070"}}, `upstream "a:7070" is not a base URL`},
		{"upstreams without gateway", stack.Options{Addr: ":0", Kafka: kc, Only: []string{stack.ServiceIngest}, Upstreams: []string{"http://a:7070"}}, "upstreams are for the gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			switch {
			case tc.says == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

// The gateway routes POST /v1/events to ingest and the api's routes to the
// api, each in another process's stack, and passes bearer tokens on: the
// upstream decides who may do what.
func TestGatewayRoutesAndPassesTokens(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	a, err := auth.New(testTokens)
	if err != nil {
		t.Fatal(err)
	}
	start := func(o stack.Options) *stack.Stack {
		o.Addr, o.Kafka, o.Auth = "127.0.0.1:0", kc, a
		s, err := stack.Start(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s
	}
	ing := start(stack.Options{Only: []string{stack.ServiceIngest}})
	api := start(stack.Options{Only: []string{stack.ServiceProjector, stack.ServiceAPI}, DataDir: t.TempDir()})
	gw, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Only: []string{stack.ServiceGateway}, Upstreams: []string{ing.URL(), api.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(context.Background())

	plan, err := simulate.Generate(simulate.Options{Seed: 3, Tasks: 2, Steps: 1, BatchGroups: 1, MaxTurns: 5}, "gw-run")
	if err != nil {
		t.Fatal(err)
	}
	body, err := events.Encode(plan.All()[0])
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, token string, body []byte) (int, string) {
		req, _ := http.NewRequest(method, gw.URL()+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, token string
		body                []byte
		status              int
		says                string
	}{
		{http.MethodPost, "/v1/events", "", body, http.StatusUnauthorized, "unauthorized"},
		{http.MethodPost, "/v1/events", secrets["reader"], body, http.StatusForbidden, "forbidden"},
		{http.MethodPost, "/v1/events", secrets["producer"], body, http.StatusOK, `"offset"`},
		{http.MethodGet, "/v1/runs", "", nil, http.StatusUnauthorized, "unauthorized"},
		{http.MethodGet, "/v1/runs/gw-run/batches/1", secrets["reader"], nil, http.StatusNotFound, "no sealed batch 1"},
		{http.MethodGet, "/healthz", "", nil, http.StatusOK, `"services":["gateway"]`},
	} {
		status, got := do(tc.method, tc.path, tc.token, tc.body)
		if status != tc.status || !strings.Contains(got, tc.says) {
			t.Errorf("%s %s: HTTP %d %.200s; want %d saying %q", tc.method, tc.path, status, got, tc.status, tc.says)
		}
	}
	testenv.CheckFor(t, 30*time.Second, "the api, through the gateway, lists the run", func() bool {
		_, got := do(http.MethodGet, "/v1/runs", secrets["reader"], nil)
		return strings.Contains(got, `"gw-run"`)
	})
}
