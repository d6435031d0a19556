package faults_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// A serve running the projector outlives its Kafka cluster: with every
// broker stopped it stays up, its open /healthz answers 503 with a stable
// code that names no broker (the addresses and the client's error text are
// for the log), and once the brokers are back it reports healthy again and
// folds what is written after their return (RELIABILITY.md).
func TestServeOutlivesKafka(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartKafkaCluster(t)
	kc := cluster.Config(t, 3)
	ctx := context.Background()
	logs := &testenv.LogBuffer{}
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
		Only:   []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("stack log:\n%s", tail(logs.String(), 8000))
		}
		_ = s.Shutdown(context.Background())
	}()
	up := func(what string) {
		t.Helper()
		select {
		case err := <-s.Done():
			t.Fatalf("%s: a service stopped: %v", what, err)
		default:
		}
	}
	folded := func() bool {
		ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
		if err != nil {
			return false
		}
		for part, end := range ends {
			if next, err := s.Projector().Offset(part); err != nil || next < end {
				return false
			}
		}
		return true
	}

	before := generate(t, "before-outage", 31)
	if _, err := push(ctx, s.URL(), before, 64, 0, http.DefaultClient, nil); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 2*time.Minute, "the projector folds the run written before the outage", func() bool { up("folding"); return folded() })
	if status, body := healthz(t, s.URL()); status != http.StatusOK {
		t.Fatalf("healthz with every broker up: HTTP %d %s", status, body)
	}

	for i := range 3 {
		cluster.Kill(i)
	}
	// Unhealthy, saying so without internals, and still up: the projector
	// has met the outage and is waiting for the brokers.
	testenv.CheckFor(t, 2*time.Minute, "healthz answers 503 and the projector waits for Kafka", func() bool {
		up("with every broker stopped")
		status, body := healthz(t, s.URL())
		if status == http.StatusOK {
			return false
		}
		checkOpaque(t, status, body, cluster.Brokers())
		return s.Projector().Health() != nil
	})
	up("after the projector met the outage")

	for i := range 3 {
		cluster.Start(i)
	}
	for i := range 3 {
		cluster.WaitReady(i)
	}
	after := generate(t, "after-outage", 32)
	testenv.CheckFor(t, 2*time.Minute, "ingest acknowledges again", func() bool {
		up("with the brokers back")
		_, err := push(ctx, s.URL(), after, 64, 0, &http.Client{Timeout: 30 * time.Second}, nil)
		return err == nil
	})
	testenv.CheckFor(t, 2*time.Minute, "the projector folds the run written after the outage, and healthz is 200", func() bool {
		up("resuming")
		status, _ := healthz(t, s.URL())
		return folded() && status == http.StatusOK && s.Projector().Health() == nil
	})
	if !strings.Contains(logs.String(), cluster.Brokers()[0]) {
		t.Error("the log does not name the brokers the stack could not reach")
	}
}

// checkOpaque fails unless an unhealthy /healthz answer is the stable
// code alone: no broker address, no network error text.
func checkOpaque(t *testing.T, status int, body []byte, brokers []string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusServiceUnavailable || e.Error.Code == "" {
		t.Fatalf("healthz: HTTP %d %s, want 503 with an error code", status, body)
	}
	for _, leak := range append([]string{"127.0.0.1", "dial", "connection refused", "context deadline", "kafkalog", "kgo"}, brokers...) {
		if strings.Contains(string(body), leak) {
			t.Fatalf("healthz answers %s: it shows %q", body, leak)
		}
	}
}

func healthz(t *testing.T, base string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get(base + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
