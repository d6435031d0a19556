package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// Every event reaches ingest twice and a third of them three times: after
// each acknowledged request, its events are delivered again in shuffled
// order, split into requests of their own and sent at random moments
// while the run goes on, as retries of a client that never saw its
// answers would be. The projector's decisions and the Postgres tables say
// what a clean delivery of the same run says; every fact has one row.
func TestDuplicateStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	const epr = 32
	plan := generate(t, "storm-run", 61)

	type ledger struct {
		kc     kafkalog.Config
		schema string
		s      *stack.Stack
	}
	start := func() ledger {
		l := ledger{kc: testenv.RealKafka(t), schema: testenv.Schema(t, url)}
		s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: l.kc, DataDir: t.TempDir(), DatabaseURL: url, PostgresSchema: l.schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		l.s = s
		return l
	}
	clean, storm := start(), start()
	// Both ledgers get the facts in the order one producer worker delivers
	// them, in requests of up to 128; the storm's are then delivered again.
	want, order := undisturbedLog(t, plan, epr)
	deliver(t, clean.s.URL(), order, http.DefaultClient)
	st := &stormTransport{base: http.DefaultTransport, url: storm.s.URL() + "/v1/events", rng: rand.New(rand.NewPCG(61, 1))}
	deliver(t, storm.s.URL(), order, &http.Client{Transport: st, Timeout: 30 * time.Second})
	st.wg.Wait()
	if err := errors.Join(st.errs...); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if st.twice.Load() != int64(plan.Len()) || st.thrice.Load() < int64(plan.Len()/4) {
		t.Fatalf("%d events delivered twice and %d three times, want all %d and a third", st.twice.Load(), st.thrice.Load(), plan.Len())
	}

	var decided [2]map[string][]byte
	for i, l := range []ledger{clean, storm} {
		decided[i] = ledgertest.WaitDecisions(t, l.kc, ledgertest.Reference(t, l.kc), 2*time.Minute)
		waitStored(t, url, l.schema, l.kc)
	}
	sameMeaning(t, meaning(t, decided[0], plan.Run), meaning(t, want, plan.Run))
	sameMeaning(t, meaning(t, decided[1], plan.Run), meaning(t, decided[0], plan.Run))
	conn := connect(t, url)
	ledgertest.SameTables(t, conn, storm.schema, clean.schema, true)
	everyFactOnce(t, conn, clean.schema, plan)
	everyFactOnce(t, conn, storm.schema, plan)
	recs := readFacts(t, storm.kc)
	t.Logf("%d events, %d records in the storm's facts topic (%d deliveries in %d extra requests); %s",
		plan.Len(), len(recs), int64(plan.Len())+st.twice.Load()+st.thrice.Load(), st.requests.Load(), countKinds(decided[1]))
}

// deliver posts values in order, in requests of up to 128, each after the
// previous one was acknowledged.
func deliver(t *testing.T, url string, values [][]byte, client *http.Client) {
	t.Helper()
	for lo := 0; lo < len(values); lo += 128 {
		body := append([]byte{'['}, bytes.Join(values[lo:min(lo+128, len(values))], []byte{','})...)
		body = append(body, ']')
		resp, err := client.Do(mustRequest(url+"/v1/events", body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d: %s", resp.StatusCode, raw)
		}
	}
}

// stormTransport delivers every acknowledged request's events again.
type stormTransport struct {
	base http.RoundTripper
	url  string
	mu   sync.Mutex
	rng  *rand.Rand
	wg   sync.WaitGroup

	errMu                   sync.Mutex
	errs                    []error
	twice, thrice, requests atomic.Int64
}

func (s *stormTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := s.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		s.redeliver(body)
	}
	return resp, err
}

// redeliver sends each event of body once more, shuffled, in one to three
// requests at random moments within a second, and a third of them once
// more after that.
func (s *stormTransport) redeliver(body []byte) {
	var evs []json.RawMessage
	if err := json.Unmarshal(body, &evs); err != nil {
		s.fail(err)
		return
	}
	s.mu.Lock()
	s.rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	var third []json.RawMessage
	for _, ev := range evs {
		if s.rng.IntN(3) == 0 {
			third = append(third, ev)
		}
	}
	s.rng.Shuffle(len(third), func(i, j int) { third[i], third[j] = third[j], third[i] })
	parts := 1 + s.rng.IntN(3)
	delays := make([]time.Duration, parts+1)
	for i := range delays {
		delays[i] = time.Duration(s.rng.IntN(1000)) * time.Millisecond
	}
	s.mu.Unlock()
	s.twice.Add(int64(len(evs)))
	s.thrice.Add(int64(len(third)))
	for i := range parts {
		lo, hi := i*len(evs)/parts, (i+1)*len(evs)/parts
		if lo < hi {
			s.send(evs[lo:hi], delays[i])
		}
	}
	if len(third) > 0 {
		s.send(third, time.Second+delays[parts])
	}
}

func (s *stormTransport) send(evs []json.RawMessage, after time.Duration) {
	body, err := json.Marshal(evs)
	if err != nil {
		s.fail(err)
		return
	}
	s.wg.Go(func() {
		time.Sleep(after)
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := s.base.RoundTrip(mustRequest(s.url, body))
			if err == nil {
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.requests.Add(1)
					return
				}
				err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
				if resp.StatusCode != http.StatusServiceUnavailable {
					s.fail(err)
					return
				}
			}
			if time.Now().After(deadline) {
				s.fail(err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func (s *stormTransport) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	s.errs = append(s.errs, err)
}

func mustRequest(url string, body []byte) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}
