package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The sender's bounds: a request carries facts of one run, at most
// sendEvents of them and sendBytes of records (turns with tokens run to
// tens of kilobytes); backoff doubles from backoffStart to backoffCap
// while the ledger is away.
const (
	sendEvents   = 256
	sendBytes    = 4 << 20
	backoffStart = 100 * time.Millisecond
	backoffCap   = 5 * time.Second
	maxAnswer    = 4 << 20
)

// sender delivers the spool's facts to the ledger's ingest in spool order,
// one request at a time, retrying the same records until the ledger
// acknowledges them. A fact the ledger refuses (4xx) is buried with the
// ledger's reason, never dropped and never resent.
type sender struct {
	sp       *spool
	endpoint string
	token    string
	client   *http.Client
	log      *slog.Logger
	m        *metrics

	mu      sync.Mutex
	lastErr string
	lastOK  time.Time
	refused map[string]string // run -> the ledger's 401/403 message
}

func newSender(sp *spool, ledger, token string, client *http.Client, log *slog.Logger, m *metrics) *sender {
	return &sender{sp: sp, endpoint: strings.TrimRight(ledger, "/") + "/v1/events", token: token, client: client, log: log, m: m, refused: map[string]string{}}
}

// runRefused says why the ledger refuses the proxy's writes to run, "" when
// it does not (or has not yet).
func (s *sender) runRefused(run string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[run]
}

// state is what /healthz says of the ledger link.
func (s *sender) state() (lastErr string, lastOK time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr, s.lastOK
}

// run delivers until ctx ends.
func (s *sender) run(ctx context.Context) {
	backoff := backoffStart
	for {
		facts, err := s.sp.head(sendEvents, sendBytes)
		if err != nil {
			s.log.Error("proxy: read spool", "err", err)
		}
		if len(facts) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-s.sp.notify:
			case <-time.After(time.Second):
			}
			continue
		}
		err = s.send(ctx, facts)
		if err == nil {
			backoff = backoffStart
			continue
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.lastErr = err.Error()
		s.mu.Unlock()
		s.m.sendErrors.Inc()
		s.log.Warn("proxy: ledger unavailable, keeping facts in the spool", "facts", len(facts), "err", err)
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, backoffCap)
	}
}

type ledgerError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Index   *int   `json:"index"`
		Field   string `json:"field"`
	} `json:"error"`
}

// send posts facts once. nil: they were acknowledged and removed, or the
// ledger refused some and they were buried (and the rest will be sent
// again); an error: try the same again later.
func (s *sender) send(ctx context.Context, facts []queuedFact) error {
	n := len(facts) + 1
	for _, f := range facts {
		n += len(f.record)
	}
	body := make([]byte, 0, n)
	body = append(body, '[')
	for i, f := range facts {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, f.record...)
	}
	body = append(body, ']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("reading the ledger's %s: %w", resp.Status, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := s.sp.done(facts); err != nil {
			return err
		}
		s.m.sent.Add(float64(len(facts)))
		s.mu.Lock()
		s.lastErr, s.lastOK = "", time.Now()
		s.mu.Unlock()
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("ledger answered %s", resp.Status)
	}
	var le ledgerError
	_ = json.Unmarshal(raw, &le)
	why := fmt.Sprintf("ledger answered %s: %s: %s", resp.Status, le.Error.Code, le.Error.Message)
	if le.Error.Field != "" {
		why += " (field " + le.Error.Field + ")"
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		// The token may not write this run: every fact of it would be
		// refused the same way. Bury the batch, and refuse the run's
		// requests from now on rather than spend the engine on them.
		s.mu.Lock()
		s.refused[facts[0].run] = why
		s.mu.Unlock()
		for _, f := range facts {
			if err := s.sp.bury(f, why); err != nil {
				return err
			}
		}
		s.m.refused.Add(float64(len(facts)))
		s.log.Error("proxy: the ledger refuses this run's facts; they are kept as dead letters", "run", facts[0].run, "facts", len(facts), "why", why)
		return nil
	}
	// A 4xx about one event: bury it, send the others again. Without an
	// index, the first is taken as the culprit, so the queue always moves.
	i := 0
	if le.Error.Index != nil && *le.Error.Index >= 0 && *le.Error.Index < len(facts) {
		i = *le.Error.Index
	}
	if err := s.sp.bury(facts[i], why); err != nil {
		return err
	}
	s.m.refused.Inc()
	s.log.Error("proxy: the ledger refused a fact; it is kept as a dead letter", "run", facts[i].run, "why", why)
	if i > 0 {
		return s.send(ctx, facts[:i])
	}
	return nil
}
