package stack_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/gateway"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// /healthz and the gateway's 503s answer anyone who reaches the port, so
// they say healthy or not with a stable code, and nothing of the
// deployment: no upstream URL, broker address or network error. Which
// upstream or broker failed, and why, is in the log and in /metrics.
func TestOpenAnswersShowNoInternals(t *testing.T) {
	t.Run("gateway", func(t *testing.T) {
		// One upstream refuses connections, one does not resolve.
		ups := []string{"http://127.0.0.1:1", "http://ledger-upstream.invalid:7070"}
		logs := &testenv.LogBuffer{}
		s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Only: []string{stack.ServiceGateway}, Upstreams: ups,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		leaks := append([]string{"127.0.0.1:1", "ledger-upstream", "dial", "refused", "lookup", "no such host", "tcp"}, ups...)
		for _, tc := range []struct {
			method, path, code string
		}{
			{http.MethodGet, "/healthz", gateway.CodeUpstreamsUnavailable},
			{http.MethodGet, "/v1/runs", "unavailable"},
			{http.MethodGet, "/v1/runs/r/batches/1/samples", "unavailable"},
			{http.MethodPost, "/v1/events", "unavailable"},
		} {
			req, _ := http.NewRequest(tc.method, s.URL()+tc.path, strings.NewReader("[]"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			body := readAll(resp)
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != tc.code {
				t.Errorf("%s %s: HTTP %d %s, want 503 %q", tc.method, tc.path, resp.StatusCode, body, tc.code)
			}
			for _, leak := range leaks {
				if strings.Contains(string(body), leak) {
					t.Errorf("%s %s answers %s: it shows %q", tc.method, tc.path, body, leak)
				}
			}
		}
		m := scrape(t, s.URL())
		for _, u := range ups {
			if got := sum(m, telemetry.NameUpstreamFailures, map[string]string{"upstream": u, "stage": telemetry.StageCheck}); got < 1 {
				t.Errorf("/metrics: %d failed checks of %s, want at least 1", int(got), u)
			}
			if n := len(series(m, telemetry.NameUpstreamUp, "upstream", map[string]string{"upstream": u})); n != 1 || sum(m, telemetry.NameUpstreamUp, map[string]string{"upstream": u}) != 0 {
				t.Errorf("/metrics: %s of %s is not 0", telemetry.NameUpstreamUp, u)
			}
		}
		if got := sum(m, telemetry.NameHealthy, map[string]string{"check": telemetry.CheckUpstreams}); got != 0 || m[telemetry.NameHealthy] == nil {
			t.Errorf("/metrics: %s{check=upstreams} missing or not 0", telemetry.NameHealthy)
		}
		for _, want := range []string{"127.0.0.1:1", "connection refused", "ledger-upstream.invalid"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q:\n%s", want, logs.String())
			}
		}
	})

	t.Run("serve", func(t *testing.T) {
		kc, broker := testenv.EmbeddedKafka(t, "")
		logs := &testenv.LogBuffer{}
		s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest},
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		if code, b := get(t, s.URL()+"/healthz"); code != http.StatusOK {
			t.Fatalf("healthz with Kafka up: %d %s", code, b)
		}
		broker.Close()
		var body []byte
		testenv.CheckFor(t, 30*time.Second, "healthz answers 503 once Kafka is gone", func() bool {
			var code int
			code, body = get(t, s.URL()+"/healthz")
			return code == http.StatusServiceUnavailable
		})
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != stack.CodeKafkaUnreachable {
			t.Errorf("healthz with Kafka gone: %s, want code %q", body, stack.CodeKafkaUnreachable)
		}
		for _, leak := range append([]string{"127.0.0.1", "dial", "refused", "kafkalog", "deadline"}, kc.Brokers...) {
			if strings.Contains(string(body), leak) {
				t.Errorf("healthz with Kafka gone answers %s: it shows %q", body, leak)
			}
		}
		m := scrape(t, s.URL())
		if m[telemetry.NameHealthy] == nil || sum(m, telemetry.NameHealthy, map[string]string{"check": telemetry.CheckKafka}) != 0 {
			t.Errorf("/metrics: %s{check=kafka} missing or not 0", telemetry.NameHealthy)
		}
		if !strings.Contains(logs.String(), kc.Brokers[0]) || !strings.Contains(logs.String(), "health check failing") {
			t.Errorf("the log does not say which brokers the check failed to reach:\n%s", logs.String())
		}
	})
}
