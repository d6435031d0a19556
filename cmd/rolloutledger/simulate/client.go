package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// Errors returned by [Run], matched with errors.Is.
var (
	// ErrRefused: the ledger answered 4xx (or 500). The simulator sent
	// something the contract forbids: a bug, never retried.
	ErrRefused = errors.New("simulate: the ledger refused the events")
	// ErrUnavailable: the ledger kept answering 503 (or the connection kept
	// failing) for giveUpAfter.
	ErrUnavailable = errors.New("simulate: the ledger stayed unavailable")
)

const (
	// maxRequestBytes bounds one request body whatever EventsPerRequest
	// says: turns with inline tokens run to tens of kilobytes each.
	maxRequestBytes = 4 << 20
	backoffStart    = 50 * time.Millisecond
	backoffCap      = 2 * time.Second
	giveUpAfter     = 60 * time.Second
	maxResponse     = 4 << 20
)

// sendUnit posts a stream piece in order, in requests of at most
// EventsPerRequest events and maxRequestBytes bytes, each after the
// previous one was acknowledged.
func (p *pusher) sendUnit(ctx context.Context, u unit) error {
	epr := p.o.EventsPerRequest
	for lo := 0; lo < len(u.events); lo += epr {
		evs := p.capVersions(u.events[lo:min(lo+epr, len(u.events))])
		recs, err := events.EncodeBatch(evs)
		if err != nil {
			return fmt.Errorf("simulate: encode %s's events: %w", u.stream, err)
		}
		for first := 0; first < len(recs); {
			body, n := joinRecords(recs[first:])
			if err := p.post(ctx, body, evs[first:first+n]); err != nil {
				return err
			}
			first += n
		}
	}
	return nil
}

// capVersions lowers each turn's policy versions to the newest version the
// live trainer has published, as an engine that has not received newer
// weights would report. Without a live trainer it changes nothing.
func (p *pusher) capVersions(evs []events.Event) []events.Event {
	if p.published == nil {
		return evs
	}
	limit := p.published.Load()
	var out []events.Event
	for i, ev := range evs {
		t, ok := ev.Data.(*events.TurnGenerated)
		if !ok || t.VersionSegments[len(t.VersionSegments)-1].PolicyVersion <= limit {
			continue
		}
		if out == nil {
			out = slices.Clone(evs)
		}
		capped := *t
		// Segments at or past the limit become one, at the limit.
		capped.VersionSegments = nil
		for _, s := range t.VersionSegments {
			if s.PolicyVersion >= limit {
				capped.VersionSegments = append(capped.VersionSegments, events.VersionSegment{Start: s.Start, PolicyVersion: limit})
				break
			}
			capped.VersionSegments = append(capped.VersionSegments, s)
		}
		out[i].Data = &capped
	}
	if out == nil {
		return evs
	}
	return out
}

// joinRecords makes a JSON array of the leading records that fit in
// maxRequestBytes (at least one), and says how many it took. Each body is
// a fresh slice: the transport may still read one after a response.
func joinRecords(recs [][]byte) ([]byte, int) {
	size, n := 1, 0
	for n < len(recs) && (n == 0 || size+len(recs[n])+1 <= maxRequestBytes) {
		size += len(recs[n]) + 1
		n++
	}
	body := make([]byte, 0, size)
	body = append(body, '[')
	for i, r := range recs[:n] {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, r...)
	}
	return append(body, ']'), n
}

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// post sends one body until the ledger acknowledges it, retrying the same
// bytes (the same ids: duplicates are dropped) with exponential backoff
// while the ledger is unavailable.
func (p *pusher) post(ctx context.Context, body []byte, evs []events.Event) error {
	began := time.Now()
	backoff := backoffStart
	for try := 1; ; try++ {
		err := p.postOnce(ctx, body, evs)
		if err == nil {
			p.requests.Add(1)
			p.events.Add(int64(len(evs)))
			return nil
		}
		var re *retryableError
		if !errors.As(err, &re) {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if time.Since(began)+backoff > giveUpAfter {
			return fmt.Errorf("%w: %d tries over %s, the last: %v", ErrUnavailable, try, time.Since(began).Round(time.Millisecond), re.err)
		}
		p.retries.Add(1)
		p.o.Logger.Debug("simulate: retrying", "try", try, "events", len(evs), "source", evs[0].Source, "err", re.err)
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, backoffCap)
	}
}

type ackBody struct {
	Events []struct {
		ID        string `json:"id"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	} `json:"events"`
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Index   *int   `json:"index"`
		Field   string `json:"field"`
	} `json:"error"`
}

func (p *pusher) postOnce(ctx context.Context, body []byte, evs []events.Event) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", fmt.Sprintf("00-%s-%016x-01", p.trace, rand.Uint64()|1))
	if p.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.o.Token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return &retryableError{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return &retryableError{fmt.Errorf("reading the %s response: %w", resp.Status, err)}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var ack ackBody
		if err := json.Unmarshal(raw, &ack); err != nil {
			return fmt.Errorf("simulate: the 200 response is not an acknowledgement: %w", err)
		}
		if len(ack.Events) != len(evs) {
			return fmt.Errorf("simulate: the ledger acknowledged %d events of %d sent", len(ack.Events), len(evs))
		}
		if p.o.OnAck != nil {
			at := time.Now()
			acks := make([]Ack, len(ack.Events))
			for i, a := range ack.Events {
				acks[i] = Ack{ID: a.ID, Partition: a.Partition, Offset: a.Offset, At: at}
			}
			p.o.OnAck(acks)
		}
		return nil
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryableError{fmt.Errorf("HTTP %s: %s", resp.Status, clip(raw))}
	}
	var eb errorBody
	if json.Unmarshal(raw, &eb) != nil || eb.Error.Message == "" && eb.Error.Code == "" {
		return fmt.Errorf("%w: HTTP %s: %s", ErrRefused, resp.Status, clip(raw))
	}
	where := ""
	if i := eb.Error.Index; i != nil && *i >= 0 && *i < len(evs) {
		where = fmt.Sprintf(" at event %d (%s %s from %s)", *i, evs[*i].Type, evs[*i].ID, evs[*i].Source)
	}
	if eb.Error.Field != "" {
		where += " field " + eb.Error.Field
	}
	return fmt.Errorf("%w: HTTP %s%s: %s: %s", ErrRefused, resp.Status, where, eb.Error.Code, eb.Error.Message)
}

func clip(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
