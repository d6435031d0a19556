// Package explore is the run explorer: a read model of each run's facts
// joined to the projector's decisions, kept as records the projector
// writes with its state ([Writer]) and read by bounded lookups
// ([Snapshot]); JSON views of it served under /v1/explore/runs and
// /v1/runs/{run}/explore (through the same router, roles and run scopes
// as the rest of the API); and a browser front end embedded in the
// binary, served at /ui. A [Model] holds the same records in memory, for
// a run the projector has no records of; [WriteBundle] writes its views of
// an archived run as a static bundle that opens from disk.
package explore

import (
	"container/list"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

//go:embed ui
var uiFS embed.FS

// Assets is the front end: index.html, app.js, app.css.
func Assets() fs.FS {
	sub, err := fs.Sub(uiFS, "ui")
	if err != nil {
		panic(err)
	}
	return sub
}

// RunLister lists the runs a ledger holds (the projector does), newest
// first.
type RunLister interface {
	RunIDs() ([]string, error)
}

// RecordsFunc opens a consistent read of run's explorer records as the
// projector committed them; release ends it. A run without records reads
// as empty.
type RecordsFunc func(run string) (r Reader, release func(), err error)

// Defaults of the bounds on the runs whose models the service keeps.
const (
	DefaultMaxFollowers = 64
	DefaultFollowerIdle = 15 * time.Minute
)

// Service serves the explorer's views of the ledger's runs. A run's views
// are read from the records the projector keeps with its state (Records):
// each a few reads bounded by what it shows, whatever the run's length,
// and nothing to rebuild after a restart. A run without complete records
// (one folded before they were kept, or a service without Records) is
// read from Kafka instead: a model in memory kept current by reading what
// the run's partitions gained since the last request.
//
// Only runs the ledger knows (those [RunLister] lists) are read: a view
// of any other run id is a 404 that reads nothing and keeps nothing. The
// models kept in memory are bounded: at most MaxFollowers runs, the least
// recently read dropped first, and none read for FollowerIdle.
type Service struct {
	Kafka   kafkalog.Config
	Runs    RunLister
	Records RecordsFunc
	Logger  *slog.Logger
	// Now is the clock that says whether a run is live and when a model
	// has gone idle; nil means time.Now.
	Now func() time.Time
	// MaxFollowers bounds how many runs' models are kept between
	// requests; 0 (or less) means DefaultMaxFollowers.
	MaxFollowers int
	// FollowerIdle is how long a run's model is kept after it was last
	// read; 0 (or less) means DefaultFollowerIdle.
	FollowerIdle time.Duration

	mu    sync.Mutex
	runs  map[string]*list.Element // of lru, each a *follower
	lru   *list.List               // most recently read first
	sweep *time.Timer              // drops idle models while any is kept
	// kafkaReads counts the refreshes that read Kafka (tests read it).
	kafkaReads atomic.Int64
	vocabs     vocabCache
	logOnce    sync.Once
	log        *kafkaLog
}

// factLog is the facts log the records' token arrays are read back from.
func (s *Service) factLog() FactLog {
	s.logOnce.Do(func() { s.log = newKafkaLog(kafkalog.NewFetcher(s.Kafka), s.Kafka.FactsTopic(), logCacheBytes) })
	return s.log
}

// Routes is where the service registers its routes (an [auth.Router]).
type Routes interface {
	Handle(pattern string, h http.Handler)
}

// Register adds the explorer's routes to mux.
func (s *Service) Register(mux Routes) {
	mux.Handle("GET /ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	}))
	// The explorer's address is /ui/: the one path with a trailing slash
	// the server accepts (internal/httpx.Canonical).
	mux.Handle("GET /ui/{$}", http.HandlerFunc(serveAsset))
	mux.Handle("GET /ui/{file}", http.HandlerFunc(serveAsset))
	mux.Handle("GET /v1/explore/runs", http.HandlerFunc(s.runList))
	mux.Handle("GET /v1/runs/{run}/explore", s.view(func(m *Snapshot, _ *http.Request) (any, error) { return m.RunView(s.now()) }))
	mux.Handle("GET /v1/runs/{run}/explore/steps", s.view(paged((*Snapshot).Steps)))
	mux.Handle("GET /v1/runs/{run}/explore/steps/{seq}", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
		if err != nil || seq < 1 {
			return nil, badValue(fmt.Sprintf("step %q is not an integer >= 1", r.PathValue("seq")))
		}
		v, ok, err := m.StepView(seq)
		return found(v, ok, err, "batch "+strconv.FormatUint(seq, 10)+" is not sealed")
	}))
	mux.Handle("GET /v1/runs/{run}/explore/groups/{group...}", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		v, ok, err := m.GroupView(r.PathValue("group"))
		return found(v, ok, err, fmt.Sprintf("no group %q", r.PathValue("group")))
	}))
	mux.Handle("GET /v1/runs/{run}/explore/side-by-side/{group...}", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		v, ok, err := m.SideView(r.PathValue("group"))
		return found(v, ok, err, fmt.Sprintf("no group %q", r.PathValue("group")))
	}))
	mux.Handle("GET /v1/runs/{run}/explore/search", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		q := r.URL.Query()
		limit, err := ValidateSearch(q.Get("q"), q.Get("limit"))
		if err != nil {
			return nil, badValue(err.Error())
		}
		if _, err := parseCursor(q.Get("cursor"), int(m.sum.Attempts)); err != nil {
			return nil, badValue(err.Error())
		}
		return m.Search(q.Get("q"), q.Get("cursor"), limit)
	}))
	mux.Handle("GET /v1/runs/{run}/explore/attempts", s.view(paged((*Snapshot).Attempts)))
	mux.Handle("GET /v1/runs/{run}/explore/attempts/{attempt...}", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		v, ok, err := m.AttemptView(r.PathValue("attempt"))
		return found(v, ok, err, fmt.Sprintf("no attempt %q", r.PathValue("attempt")))
	}))
	mux.Handle("GET /v1/runs/{run}/explore/tasks", s.view(paged((*Snapshot).Tasks)))
	mux.Handle("GET /v1/runs/{run}/explore/tasks/{task...}", s.view(func(m *Snapshot, r *http.Request) (any, error) {
		v, ok, err := m.TaskView(r.PathValue("task"), r.URL.Query().Get("cursor"), TaskGroupPage)
		return found(v, ok, err, fmt.Sprintf("no task %q", r.PathValue("task")))
	}))
}

// paged is the view of a paged list: the request's cursor and page size
// checked ([ValidatePage]), then page's answer.
func paged[T any](page func(m *Snapshot, cursor string, limit int) (T, error)) func(*Snapshot, *http.Request) (any, error) {
	return func(m *Snapshot, r *http.Request) (any, error) {
		q := r.URL.Query()
		limit, err := ValidatePage(q.Get("cursor"), q.Get("limit"))
		if err != nil {
			return nil, badValue(err.Error())
		}
		return page(m, q.Get("cursor"), limit)
	}
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badValue(msg string) error { return &httpError{http.StatusBadRequest, "invalid_value", msg} }

func found(v any, ok bool, err error, msg string) (any, error) {
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &httpError{http.StatusNotFound, "not_found", msg}
	}
	return v, nil
}

// view answers with fn's view of the {run}'s records.
func (s *Service) view(fn func(*Snapshot, *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run := r.PathValue("run")
		if !events.ValidRunID(run) {
			httpx.WriteError(w, http.StatusBadRequest, "invalid_value", fmt.Sprintf("%q is not a run id", run))
			return
		}
		known, err := s.known(run)
		if err != nil {
			s.answer(w, nil, err)
			return
		}
		if !known {
			// Nothing is read and nothing kept for a run the ledger has
			// never seen: any valid id may be asked for.
			httpx.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no run %s", run))
			return
		}
		var out any
		err = s.snapshot(r.Context(), run, func(m *Snapshot) error {
			if m.Facts() == 0 {
				return &httpError{http.StatusNotFound, "not_found", fmt.Sprintf("run %s has no facts", run)}
			}
			var err error
			out, err = fn(m, r)
			return err
		})
		s.answer(w, out, err)
	})
}

// snapshot calls fn with the run's records: the projector's when it holds
// all of the run's, else a model read from Kafka.
func (s *Service) snapshot(ctx context.Context, run string, fn func(*Snapshot) error) error {
	if s.Records != nil {
		r, release, err := s.Records(run)
		if err != nil {
			return err
		}
		snap, ok, err := openSnapshot(run, r, &s.vocabs)
		if err == nil && ok && !snap.Partial() {
			err = fn(snap.WithLog(ctx, s.factLog()))
			release()
			return err
		}
		release()
		if err != nil {
			return err
		}
	}
	return s.follower(run).current(ctx, s.now(), func(m *Model) error {
		snap, err := m.Snapshot()
		if err != nil {
			return err
		}
		return fn(snap)
	})
}

func (s *Service) answer(w http.ResponseWriter, out any, err error) {
	var he *httpError
	switch {
	case err == nil:
		w.Header().Set("Cache-Control", "no-store")
		httpx.WriteJSON(w, http.StatusOK, out)
	case asHTTP(err, &he):
		httpx.WriteError(w, he.status, he.code, he.msg)
	default:
		if s.Logger != nil {
			s.Logger.Error("explore query failed", "err", err)
		}
		httpx.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func asHTTP(err error, he **httpError) bool {
	e, ok := err.(*httpError)
	*he = e
	return ok
}

// known reports whether the ledger has seen a fact of run.
func (s *Service) known(run string) (bool, error) {
	infos, err := s.Runs.RunIDs()
	if err != nil {
		return false, err
	}
	return slices.Contains(infos, run), nil
}

func (s *Service) maxFollowers() int {
	if s.MaxFollowers > 0 {
		return s.MaxFollowers
	}
	return DefaultMaxFollowers
}

func (s *Service) followerIdle() time.Duration {
	if s.FollowerIdle > 0 {
		return s.FollowerIdle
	}
	return DefaultFollowerIdle
}

// follower returns run's follower, made when none is kept; it drops the
// idle ones and the least recently read past the bound.
func (s *Service) follower(run string) *follower {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs, s.lru = map[string]*list.Element{}, list.New()
	}
	s.dropIdle(now)
	if e := s.runs[run]; e != nil {
		f := e.Value.(*follower)
		f.used = now
		s.lru.MoveToFront(e)
		return f
	}
	f := &follower{kc: s.Kafka, run: run, used: now, reads: &s.kafkaReads}
	s.runs[run] = s.lru.PushFront(f)
	for s.lru.Len() > s.maxFollowers() {
		s.drop(s.lru.Back())
	}
	if s.sweep == nil {
		s.sweep = time.AfterFunc(s.followerIdle(), s.sweepIdle)
	}
	return f
}

// sweepIdle drops the idle followers, and comes back while any is kept.
func (s *Service) sweepIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropIdle(s.now())
	if s.lru.Len() == 0 {
		s.sweep = nil
		return
	}
	s.sweep.Reset(s.followerIdle())
}

// dropIdle drops the followers not read for followerIdle; s.mu is held.
func (s *Service) dropIdle(now time.Time) {
	for e := s.lru.Back(); e != nil && now.Sub(e.Value.(*follower).used) >= s.followerIdle(); e = s.lru.Back() {
		s.drop(e)
	}
}

// drop forgets a follower; a request reading it still finishes with it.
func (s *Service) drop(e *list.Element) {
	delete(s.runs, e.Value.(*follower).run)
	s.lru.Remove(e)
}

// followers is how many runs' models are kept.
func (s *Service) followers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs)
}

// runList answers the runs list, limited to the token's run scope.
func (s *Service) runList(w http.ResponseWriter, r *http.Request) {
	infos, err := s.Runs.RunIDs()
	if err != nil {
		s.answer(w, nil, err)
		return
	}
	if p := auth.FromContext(r.Context()); p != nil {
		infos = slices.DeleteFunc(infos, func(run string) bool { return !p.InScope(run) })
	}
	out := []RunSummary{}
	for _, run := range infos {
		err := s.snapshot(r.Context(), run, func(m *Snapshot) error {
			out = append(out, m.Summary(s.now()))
			return nil
		})
		if err != nil {
			s.answer(w, nil, err)
			return
		}
	}
	s.answer(w, map[string]any{"runs": out}, nil)
}

func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "" {
		name = "index.html"
	}
	b, err := fs.ReadFile(Assets(), name)
	if err != nil {
		httpx.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no asset %q", name))
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Nothing the page loads may come from elsewhere.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'")
	_, _ = w.Write(b)
}
