package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// healthcheck is the containers' probe: 0 while the service is up and
// reaches Kafka, non-zero with the reason once Kafka is gone or the service
// is down.
func TestHealthcheckCommand(t *testing.T) {
	kc, broker := testenv.EmbeddedKafka(t, "")
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest}})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL() + "/healthz"
	code, out, errb := runMain("healthcheck", "--url", url)
	if code != 0 || !strings.Contains(out, `"status":"ok"`) {
		t.Fatalf("healthcheck of a healthy ingest: exit %d\n%s%s", code, out, errb)
	}
	broker.Close()
	code, _, errb = runMain("healthcheck", "--url", url, "--timeout", "30s")
	if code == 0 || !strings.Contains(errb, "503") || !strings.Contains(errb, "kafka_unreachable") {
		t.Errorf("healthcheck with Kafka gone: exit %d, %s; want non-zero naming the 503 and why", code, errb)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Log(err)
	}
	if code, _, errb = runMain("healthcheck", "--url", url); code == 0 || !strings.Contains(errb, "healthcheck:") {
		t.Errorf("healthcheck of a stopped service: exit %d, %s", code, errb)
	}
	if code, _, errb = runMain("healthcheck", "--url", "::not a url"); code == 0 || !strings.Contains(errb, "--url") {
		t.Errorf("healthcheck --url garbage: exit %d, %s", code, errb)
	}
}
