package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/proxy"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// ledger is a real ledger (ingest, projector, api) on real Kafka.
type ledger struct {
	kc  kafkalog.Config
	url string
	s   *stack.Stack
}

func startLedger(t testing.TB) *ledger {
	t.Helper()
	kc := testenv.RealKafka(t)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &ledger{kc: kc, url: s.URL(), s: s}
}

// recorder is a proxy in front of an engine, served by httptest.
type recorder struct {
	s   *proxy.Server
	url string
}

func startProxy(t testing.TB, o proxy.Options) *recorder {
	t.Helper()
	if o.SpoolDir == "" {
		o.SpoolDir = t.TempDir()
	}
	s, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		_ = s.Close()
	})
	return &recorder{s: s, url: hs.URL}
}

// waitDelivered waits until the proxy's spool is empty.
func (r *recorder) waitDelivered(t testing.TB) {
	t.Helper()
	testenv.CheckFor(t, 3*time.Minute, "the proxy's spooled facts reach the ledger", func() bool {
		waiting, dead := r.s.Pending()
		if dead > 0 {
			t.Fatalf("%d facts were refused by the ledger", dead)
		}
		return waiting == 0
	})
}

// metricCount reads a counter of the proxy's /metrics with one label,
// outcome (0 when absent).
func metricCount(t *testing.T, proxyURL, name, outcome string) int {
	t.Helper()
	resp, err := http.Get(proxyURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{outcome="` + regexp.QuoteMeta(outcome) + `"\} (\d+)$`).FindSubmatch(raw)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// jsonRequest is a POST of body as JSON with the given header pairs.
func jsonRequest(t *testing.T, url string, body any, header ...string) *http.Request {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

func postJSON(t *testing.T, url string, body any, header ...string) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(jsonRequest(t, url, body, header...))
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

// runFacts are a run's facts of one type in the ledger, in log order, as
// the fold applies them: a record repeating an event id is dropped (a
// proxy restarted before the ledger's answer reached it sends its spooled
// facts again; the log holds both, docs/design.md §5.4). A repeat with
// other bytes fails the test: the proxy spools a fact's bytes once.
func runFacts[T events.Fact](t *testing.T, kc kafkalog.Config, run string) ([]T, []events.Event) {
	t.Helper()
	var out []T
	var evs []events.Event
	seen := map[string][]byte{}
	for _, r := range ledgertest.Facts(t, kc)[run] {
		if prev, ok := seen[r.Event.ID]; ok {
			if !bytes.Equal(prev, r.Value) {
				t.Fatalf("%s: event %s is in the ledger twice with different bytes", run, r.Event.ID)
			}
			continue
		}
		seen[r.Event.ID] = r.Value
		if d, ok := r.Event.Data.(T); ok {
			out = append(out, d)
			evs = append(evs, r.Event)
		}
	}
	return out, evs
}

// wholeSequence rebuilds a turn's prompt from the ledger alone: its
// parent's whole sequence up to prefix_tokens, then its new tokens.
func wholeSequence(t *testing.T, turns []*events.TurnGenerated, i int) []int32 {
	t.Helper()
	tg := turns[i]
	var prompt []int32
	if tg.Parent != nil {
		p := wholeSequence(t, turns, *tg.Parent)
		p = append(p, turns[*tg.Parent].TokenIDs...)
		if int64(len(p)) < tg.PrefixTokens {
			t.Fatalf("turn %d: parent %d's sequence has %d tokens, fewer than prefix_tokens %d", tg.Turn, *tg.Parent, len(p), tg.PrefixTokens)
		}
		prompt = slices.Clone(p[:tg.PrefixTokens])
	}
	return append(prompt, tg.ObservationTokenIDs...)
}
