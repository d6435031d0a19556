package simulate

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/projections"
)

// behindLedger answers the trainer as a ledger whose projector is behind:
// it has folded 40 of the run's facts, and folds none until catchUp is
// closed; then it has folded all 100 and batch 1 is sealed.
func behindLedger(t *testing.T, catchUp <-chan struct{}) *httptest.Server {
	t.Helper()
	caught := func() bool {
		select {
		case <-catchUp:
			return true
		default:
			return false
		}
	}
	var reported atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/events":
			var evs []json.RawMessage
			_ = json.NewDecoder(r.Body).Decode(&evs)
			reported.Add(int64(len(evs)))
			ack := `{"events":[` + strings.TrimSuffix(strings.Repeat(`{"id":"x","partition":0,"offset":0},`, len(evs)), ",") + `]}`
			_, _ = w.Write([]byte(ack))
		case strings.HasSuffix(r.URL.Path, "/status"):
			folded := 40
			if caught() {
				folded = 100 + int(reported.Load())
			}
			_ = json.NewEncoder(w).Encode(map[string]int{"facts_folded": folded})
		case strings.HasSuffix(r.URL.Path, "/batches/next"):
			if !caught() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			_ = json.NewEncoder(w).Encode(projections.Manifest{Seq: 1, Digest: "sha256:00"})
		case strings.HasSuffix(r.URL.Path, "/batches/1/samples"):
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A trainer whose rollouts are all acknowledged waits for a projector
// that is behind, however long it folds nothing, and takes the step once
// the batch is sealed: a loaded machine slows the ledger, it does not end
// the training. Before, the trainer stopped with no step once the
// projector had folded nothing for Idle.
func TestTrainerWaitsForABehindProjector(t *testing.T) {
	catchUp := make(chan struct{})
	srv := behindLedger(t, catchUp)
	pushed := make(chan struct{})
	close(pushed)
	var acked atomic.Int64
	acked.Store(100)
	// The projector catches up well after Idle.
	time.AfterFunc(time.Second, func() { close(catchUp) })
	steps, err := Train(context.Background(), TrainerOptions{
		URL: srv.URL, Run: "behind", Steps: 1, Idle: 100 * time.Millisecond, Pushed: pushed, Acknowledged: &acked,
	})
	if err != nil || len(steps) != 1 {
		t.Fatalf("got %d steps (%v), want 1", len(steps), err)
	}
}

// A projector that folds nothing for Stalled fails the trainer with how
// far it got, rather than the trainer reporting no steps as if the run
// had sealed no batch.
func TestTrainerFailsOnAStalledProjector(t *testing.T) {
	srv := behindLedger(t, make(chan struct{}))
	pushed := make(chan struct{})
	close(pushed)
	var acked atomic.Int64
	acked.Store(100)
	steps, err := Train(context.Background(), TrainerOptions{
		URL: srv.URL, Run: "stalled", Steps: 1, Idle: 50 * time.Millisecond, Stalled: 300 * time.Millisecond,
		Pushed: pushed, Acknowledged: &acked,
	})
	if err == nil || !strings.Contains(err.Error(), "folded 40 of the run's 100 acknowledged facts") {
		t.Fatalf("got %d steps and error %v, want the error naming 40 of 100 facts folded", len(steps), err)
	}
}
