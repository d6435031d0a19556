// Package api is the trainer's and the operator's HTTP interface to what
// the projector concluded: sealed batches (long-polled), their samples, task
// admission and run status.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// MaxWait bounds a long poll.
const MaxWait = 5 * time.Minute

// Service serves the query endpoints from a projector's state.
type Service struct {
	Projector *projector.Projector
	Logger    *slog.Logger
	// Streams bound the samples responses: the bytes all of them hold at
	// once, how many one token (one address without authentication) may
	// have open, and how slowly a client may read ([httpx.StreamLimits];
	// zero: its defaults).
	Streams httpx.StreamLimits

	streams *httpx.StreamLimiter
}

// Routes is where the service registers its routes: an [auth.Router] in
// the stack, which checks every request's token and holds each route's
// {run} to the token's run scope; a plain http.ServeMux serves without
// authentication.
type Routes interface {
	Handle(pattern string, h http.Handler)
}

// Register adds the routes to mux. Every route that concerns one run names
// it as {run}, the wildcard the router's scope check reads.
func (s *Service) Register(mux Routes) {
	s.streams = httpx.NewStreamLimiter(s.Streams)
	mux.Handle("GET /v1/runs", http.HandlerFunc(s.runs))
	mux.Handle("GET /v1/runs/{run}/batches/next", http.HandlerFunc(s.nextBatch))
	mux.Handle("GET /v1/runs/{run}/batches/{seq}", http.HandlerFunc(s.batch))
	mux.Handle("GET /v1/runs/{run}/batches/{seq}/samples", http.HandlerFunc(s.samples))
	// Task ids may contain "/", so the task is the rest of the path.
	mux.Handle("GET /v1/runs/{run}/tasks/{task...}", http.HandlerFunc(s.task))
	// Without this route ServeMux would redirect .../tasks to .../tasks/,
	// the pattern above with an empty task.
	mux.Handle("GET /v1/runs/{run}/tasks", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, http.StatusNotFound, "not_found", "name a task: /v1/runs/{run}/tasks/{task}")
	}))
	mux.Handle("GET /v1/runs/{run}/status", http.HandlerFunc(s.status))
	// Attempt ids may contain "/", as task ids may.
	mux.Handle("GET /v1/runs/{run}/attempts/{attempt...}", http.HandlerFunc(s.attempt))
}

func (s *Service) fail(w http.ResponseWriter, err error) {
	if s.Logger != nil {
		s.Logger.Error("query failed", "err", err)
	}
	httpx.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
}

func runParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	run := r.PathValue("run")
	if !events.ValidRunID(run) {
		httpx.WriteError(w, http.StatusBadRequest, "invalid_value", fmt.Sprintf("%q is not a run id", run))
		return "", false
	}
	return run, true
}

// seqParam reads a sequence number between lo and hi, answering 400
// naming the parameter when s is not one.
func seqParam(w http.ResponseWriter, s string, name string, lo, hi uint64) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < lo || n > hi {
		httpx.WriteError(w, http.StatusBadRequest, "invalid_value", fmt.Sprintf("%s %q is not an integer between %d and %d", name, s, lo, hi))
		return 0, false
	}
	return n, true
}

// entityParam reads the entity id a route names as {name} (a task, an
// attempt), answering 400 "... is not <what>" when it is not one.
func entityParam(w http.ResponseWriter, r *http.Request, name, what string) (string, bool) {
	id := r.PathValue(name)
	if !events.ValidEntityID(id) {
		httpx.WriteError(w, http.StatusBadRequest, "invalid_value", fmt.Sprintf("%q is not %s", id, what))
		return "", false
	}
	return id, true
}

// waitParam reads a long poll's wait, def when absent, answering 400
// naming it when it is not a duration between 0 and MaxWait.
func waitParam(w http.ResponseWriter, ws string, def time.Duration) (time.Duration, bool) {
	if ws == "" {
		return def, true
	}
	d, err := time.ParseDuration(ws)
	if err != nil || d < 0 || d > MaxWait {
		httpx.WriteError(w, http.StatusBadRequest, "invalid_value", fmt.Sprintf("wait %q is not a duration between 0 and %s", ws, MaxWait))
		return 0, false
	}
	return d, true
}

// batchParams reads the {run} and {seq} of a batch route, answering 400
// when either is malformed.
func batchParams(w http.ResponseWriter, r *http.Request) (string, uint64, bool) {
	run, ok := runParam(w, r)
	if !ok {
		return "", 0, false
	}
	seq, ok := seqParam(w, r.PathValue("seq"), "batch", 1, math.MaxUint64)
	return run, seq, ok
}

func notSealed(w http.ResponseWriter, run string, seq uint64) {
	httpx.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("run %s has no sealed batch %d", run, seq))
}

// writeManifest answers with a sealed batch's manifest, stored as served.
func writeManifest(w http.ResponseWriter, manifest []byte) {
	writeRaw(w, "application/json", append(manifest[:len(manifest):len(manifest)], '\n'))
}

func writeRaw(w http.ResponseWriter, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Service) batch(w http.ResponseWriter, r *http.Request) {
	run, seq, ok := batchParams(w, r)
	if !ok {
		return
	}
	m, found, err := s.Projector.Manifest(run, seq)
	switch {
	case err != nil:
		s.fail(w, err)
	case !found:
		notSealed(w, run, seq)
	default:
		writeManifest(w, m)
	}
}

func (s *Service) nextBatch(w http.ResponseWriter, r *http.Request) {
	run, ok := runParam(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	// The batch waited for is after+1, so after stops one short of the
	// largest sequence number.
	after, ok := seqParam(w, q.Get("after"), "after", 0, math.MaxUint64-1)
	if !ok {
		return
	}
	wait, ok := waitParam(w, q.Get("wait"), 30*time.Second)
	if !ok {
		return
	}
	m, found, err := s.Projector.WaitManifest(r.Context(), run, after+1, wait)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // the request ended: no one is waiting for an answer
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	if !found {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeManifest(w, m)
}

func (s *Service) task(w http.ResponseWriter, r *http.Request) {
	run, ok := runParam(w, r)
	if !ok {
		return
	}
	task, ok := entityParam(w, r, "task", "a task id")
	if !ok {
		return
	}
	d, err := s.Projector.Task(run, task)
	if err != nil {
		s.fail(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, d)
}

func (s *Service) runs(w http.ResponseWriter, r *http.Request) {
	runs, err := s.Projector.Runs()
	if err != nil {
		s.fail(w, err)
		return
	}
	// A token limited to some runs sees only those.
	if p := auth.FromContext(r.Context()); p != nil {
		runs = slices.DeleteFunc(runs, func(ri projector.RunInfo) bool { return !p.InScope(ri.Run) })
	}
	if runs == nil {
		runs = []projector.RunInfo{}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"runs": runs})
}

// Status is a run's progress as the projector sees it.
type Status struct {
	Run string `json:"run"`
	// FactsFolded is how many of the run's facts the projector has folded
	// and committed: a trainer waiting for a batch sees it grow while the
	// projector catches up.
	FactsFolded   uint64 `json:"facts_folded"`
	BatchesSealed uint64 `json:"batches_sealed"`
	TasksAdmitted uint64 `json:"tasks_admitted"`
	TasksRejected uint64 `json:"tasks_rejected"`
	// Findings counts every audit.finding of the run: those its fold
	// numbered and the misrouted ones, which no fold numbers
	// (docs/design.md §11.2); replay --verify counts the latter as
	// misrouted.
	Findings uint64 `json:"findings"`
}

func (s *Service) status(w http.ResponseWriter, r *http.Request) {
	run, ok := runParam(w, r)
	if !ok {
		return
	}
	st := Status{Run: run}
	for _, f := range []struct {
		kind events.Type
		dst  *uint64
	}{
		{projections.KindBatchSealed, &st.BatchesSealed},
		{projections.KindTaskAdmitted, &st.TasksAdmitted},
		{projections.KindTaskRejected, &st.TasksRejected},
		{projections.KindAuditFinding, &st.Findings},
	} {
		n, err := s.Projector.LastSeq(run, f.kind)
		if err != nil {
			s.fail(w, err)
			return
		}
		*f.dst = n
	}
	m, err := s.Projector.Misrouted(run)
	if err != nil {
		s.fail(w, err)
		return
	}
	st.Findings += m
	n, err := s.Projector.Folded(run)
	if err != nil {
		s.fail(w, err)
		return
	}
	st.FactsFolded = n
	httpx.WriteJSON(w, http.StatusOK, st)
}
