// Package ingest is the HTTP front door of the ledger: POST /v1/events
// validates a request's events all-or-nothing, appends them to the facts
// topic, and answers only once Kafka acknowledged every one.
package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// Appender appends records durably and reports where they landed.
// [*kafkalog.Writer] is the production implementation. The records' bytes
// are the ingest's to reuse once Append returned without error: an
// Appender that keeps them copies them.
type Appender interface {
	Append(ctx context.Context, recs []kafkalog.Record) ([]kafkalog.Position, error)
}

// Service handles the ingest endpoints.
type Service struct {
	// Appender receives the canonical records of accepted requests.
	Appender Appender
	// Logger receives one line per refused or failed request; nil discards.
	Logger *slog.Logger
	// Bodies bound the request bodies: one (MaxBytes, default 64 MiB), all
	// being read or handled at once (Budget, default 256 MiB), one client's
	// (PerClient; a client is a token and the host it calls from), and the
	// floor rate below which a body is cut off (see [httpx.BodyLimits]). A
	// body is charged by the bytes that arrive and held until its request
	// is answered: decoding holds a body, its events and their canonical
	// records, about three times the budget at worst.
	Bodies httpx.BodyLimits
	// AppendTimeout bounds the wait for Kafka's acknowledgment; 0 means
	// 30 s. The append is detached from the client's connection, so a client
	// that goes away does not abandon a half-written request.
	AppendTimeout time.Duration
	// Telemetry counts requests and events; nil records nothing. The
	// request's trace context (see [telemetry.Telemetry.HTTPHandler])
	// reaches the Appender through the request context.
	Telemetry *telemetry.Telemetry

	bodies *httpx.BodyLimiter // made by Register
}

// Response is the body of a 200 answer: each event's position, in request
// order.
type Response struct {
	Events []Appended `json:"events"`
}

// Appended is one acknowledged event.
type Appended struct {
	ID        string `json:"id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Routes is where the service registers its routes: an [auth.Router] in
// the stack, which checks every request's token; a plain http.ServeMux
// serves without authentication.
type Routes interface {
	Handle(pattern string, h http.Handler)
}

// aroundRoutes is the ability of an [auth.Router] to wrap a route's
// authorization together with its handler, so that the request counter
// sees the route's 401s and 403s too.
type aroundRoutes interface {
	HandleAround(pattern string, h http.Handler, around func(http.Handler) http.Handler)
}

// Register adds the service's routes to mux.
func (s *Service) Register(mux Routes) {
	o := s.Bodies
	if o.Key == nil {
		o.Key = clientKey
	}
	s.bodies = httpx.NewBodyLimiter(o)
	h := http.HandlerFunc(s.postEvents)
	if a, ok := mux.(aroundRoutes); ok {
		a.HandleAround("POST /v1/events", h, s.counted)
		return
	}
	mux.Handle("POST /v1/events", s.counted(h))
}

// clientKey names the client of a request for its share of the body
// budget: the token it authenticated with, if any, and the host it calls
// from.
func clientKey(r *http.Request) string {
	host := httpx.RemoteHost(r)
	if p := auth.FromContext(r.Context()); p != nil {
		return p.Name + "@" + host
	}
	return host
}

// counted counts every request by the outcome its status code says; on an
// [auth.Router] it wraps the route's authorization too, so 401s and 403s
// count.
func (s *Service) counted(h http.Handler) http.Handler {
	m := telemetry.OrNop(s.Telemetry).Metrics
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.IngestRequest(r.Context(), outcome(sw.status))
	})
}

func outcome(status int) string {
	switch {
	case status < 300:
		return telemetry.OutcomeOK
	case status == http.StatusRequestEntityTooLarge:
		return telemetry.OutcomeTooLarge
	case status == http.StatusUnsupportedMediaType:
		return telemetry.OutcomeUnsupported
	case status == http.StatusUnauthorized:
		return telemetry.OutcomeUnauthorized
	case status == http.StatusForbidden:
		return telemetry.OutcomeForbidden
	case status >= 500:
		return telemetry.OutcomeUnavailable
	}
	return telemetry.OutcomeBadRequest
}

// statusWriter remembers the status code a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Service) postEvents(w http.ResponseWriter, r *http.Request) {
	if msg := checkContentType(r.Header.Values("Content-Type")); msg != "" {
		httpx.WriteError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", msg)
		return
	}
	// The body is charged by what arrives, and held until the answer.
	body, release, err := s.bodies.Read(w, r)
	defer release()
	if err != nil {
		s.log().InfoContext(r.Context(), "request body unread", "remote", r.RemoteAddr, "err", err)
		httpx.WriteBodyError(w, err)
		return
	}
	// The canonical records copy each v2 binary field's base64 as
	// received: strict decoding proved it the one encoding of its values.
	// They and the events are carved from a pooled Canonicalizer, given
	// back once the answer is written, unless an append that failed may
	// have left them with the writer.
	cz := canonicalizers.Get().(*events.Canonicalizer)
	reuse := true
	defer func() {
		if reuse {
			canonicalizers.Put(cz)
		}
	}()
	evs, values, err := cz.Batch(body)
	var recs []kafkalog.Record
	if err == nil {
		recs = records(evs, values)
	}
	m := telemetry.OrNop(s.Telemetry).Metrics
	if err != nil {
		countRefused(r.Context(), m, body)
		s.refuse(w, r, err)
		return
	}
	// Authorization is per event and all-or-nothing, like validation: the
	// token's role must write every event's type, its scope every run.
	if err := auth.FromContext(r.Context()).AuthorizeEvents(evs); err != nil {
		s.forbid(w, r, evs, err)
		return
	}
	timeout := s.AppendTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
	defer cancel()
	pos, err := s.Appender.Append(ctx, recs)
	if err != nil {
		// Records the writer may still send must not be overwritten.
		reuse = false
		countEvents(r.Context(), m, evs, telemetry.OutcomeUnavailable)
		s.log().WarnContext(r.Context(), "append failed", "events", len(evs), "run", evs[0].Run, "err", err)
		httpx.WriteError(w, http.StatusServiceUnavailable, "not_acknowledged",
			"Kafka did not acknowledge every event; some may have been appended, and retrying this request with the same ids is safe: "+err.Error())
		return
	}
	countEvents(r.Context(), m, evs, telemetry.OutcomeOK)
	resp := Response{Events: make([]Appended, len(evs))}
	for i, ev := range evs {
		resp.Events[i] = Appended{ID: ev.ID, Partition: pos[i].Partition, Offset: pos[i].Offset}
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// canonicalizers keep the memory of the events and records of requests
// already answered, for the next ones (see [events.Canonicalizer]).
var canonicalizers = sync.Pool{New: func() any { return new(events.Canonicalizer) }}

// checkContentType accepts exactly one Content-Type, application/json with
// no parameter but an optional charset=utf-8, and otherwise says what is
// wrong. A missing type is refused too: a browser page may send a request
// without one to any origin with no preflight, and the ledger takes facts
// only from clients that say they send JSON.
func checkContentType(values []string) string {
	if len(values) != 1 {
		return fmt.Sprintf("want one Content-Type, application/json, got %d", len(values))
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != "application/json" {
		return fmt.Sprintf("content type %q is not application/json", clip(values[0]))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Sprintf("content type %q: JSON is UTF-8, with no parameter but charset=utf-8", clip(values[0]))
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) <= 100 {
		return s
	}
	return s[:97] + "..."
}

// refuse answers a request whose events were not accepted: 413 when an event
// is too large, 400 otherwise, naming the event and field.
func (s *Service) refuse(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := http.StatusBadRequest, httpx.ErrorDetail{Code: "invalid", Message: err.Error()}
	if fe, ok := events.AsFieldError(err); ok {
		detail.Code = fe.Code()
		detail.Field = fe.Field
		if !errors.Is(fe, events.ErrMalformed) && !errors.Is(fe, events.ErrEmpty) {
			idx := fe.Index
			detail.Index = &idx
		}
		if errors.Is(fe, events.ErrTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
	}
	s.log().InfoContext(r.Context(), "request refused", "remote", r.RemoteAddr, "code", detail.Code, "field", detail.Field, "err", err)
	httpx.WriteJSON(w, status, httpx.ErrorBody{Error: detail})
}

// forbid answers 403 to an append holding an event the caller may not
// write, naming the event and the field (type or run).
func (s *Service) forbid(w http.ResponseWriter, r *http.Request, evs []events.Event, err error) {
	detail := httpx.ErrorDetail{Code: "forbidden", Message: err.Error()}
	idx := -1
	var de *auth.DeniedError
	if errors.As(err, &de) {
		idx = de.Index
		detail.Index, detail.Field, detail.Message = &idx, de.Field, de.Detail
	}
	auth.LogRefused(r.Context(), s.log(), r, http.StatusForbidden, auth.FromContext(r.Context()), "event "+detail.Field,
		slog.Int("index", idx), slog.String("field", detail.Field), slog.String("run", deniedRun(evs, idx)))
	w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger", error="insufficient_scope"`)
	httpx.WriteJSON(w, http.StatusForbidden, httpx.ErrorBody{Error: detail})
}

// deniedRun is the run of the refused event, for the log.
func deniedRun(evs []events.Event, i int) string {
	if i < 0 || i >= len(evs) {
		return ""
	}
	return evs[i].Run
}

// records turns accepted events and their canonical values into Kafka
// records: the value, run as key, and the type and version as headers. The
// writer adds the trace context.
func records(evs []events.Event, values [][]byte) []kafkalog.Record {
	recs := make([]kafkalog.Record, len(evs))
	for i, ev := range evs {
		recs[i] = kafkalog.Record{Key: []byte(ev.Run), Value: values[i], Headers: kafkalog.TypeHeaders(string(ev.Type), ev.V)}
	}
	return recs
}

// countEvents counts a request's events by type, runs of one type at once.
func countEvents(ctx context.Context, m *telemetry.Metrics, evs []events.Event, outcome string) {
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Type == evs[i].Type {
			j++
		}
		m.IngestEvents(ctx, string(evs[i].Type), outcome, j-i)
		i = j
	}
}

// countRefused counts the events of a refused request as rejected, by the
// type each claims when the body is JSON at all; a type outside the
// catalogue counts as "unknown", keeping the label's values few.
func countRefused(ctx context.Context, m *telemetry.Metrics, body []byte) {
	type typed struct {
		Type events.Type `json:"type"`
	}
	var items []typed
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '{' {
		var one typed
		if json.Unmarshal(trimmed, &one) != nil {
			return
		}
		items = []typed{one}
	} else if json.Unmarshal(trimmed, &items) != nil {
		return
	}
	for _, it := range items {
		t := "unknown"
		if events.CurrentVersion(it.Type) != 0 {
			t = string(it.Type)
		}
		m.IngestEvents(ctx, t, telemetry.EventOutcomeRejected, 1)
	}
}
