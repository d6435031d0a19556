package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
)

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext is the principal of the request ctx belongs to, nil when the
// ledger runs without authentication.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}

// Classify says which class of access a route pattern needs. It is decided
// once, when the route is registered on a [Router]; a pattern it does not
// name is [Read] for GET and [Other] (admins only) for every other method,
// so a new route is closed until someone decides who uses it.
func Classify(pattern string) Access {
	switch pattern {
	case "GET /healthz", "GET /metrics":
		return Open
	case "GET /ui", "GET /ui/{$}", "GET /ui/{file}":
		// The explorer's page and assets: no data, which its views read
		// from the scoped routes with the reader's token.
		return Open
	case "POST /v1/events":
		return Append
	case "GET /v1/runs/{run}/batches/next", "GET /v1/runs/{run}/batches/{seq}", "GET /v1/runs/{run}/batches/{seq}/samples":
		return ReadBatches
	case "GET /v1/runs/{run}/tasks/{task...}", "GET /v1/runs/{run}/tasks", "GET /v1/runs/{run}/attempts/{attempt...}":
		return ReadAdmission
	}
	if strings.HasPrefix(pattern, "GET ") {
		return Read
	}
	return Other
}

// Route is one entry of a [Router]'s table.
type Route struct {
	// Pattern is the route's http.ServeMux pattern, "METHOD /path".
	Pattern string
	// Access is the class of access the route needs ([Classify]).
	Access Access
	// Scoped is true for a route that names a run ({run} in its path):
	// a token limited to some runs may use it only for those.
	Scoped bool
}

// Router is the ledger's HTTP routing table with authorization inside it.
// Every route is registered through it, and every route's handler is
// wrapped in the check: there is no way to add a route that skips it.
//
// The check runs after the router matched the request, on what it matched:
// the route's pattern decides the access needed, and the routed value of
// {run} — the very value the handler reads with r.PathValue("run") — is
// held against the token's run scope. Nothing parses the request's path a
// second time, so no encoding of the path ("/v1/%72uns/...", "/%761/...")
// can make the check and the route see different runs.
//
// A request no route matches is authenticated too (with tokens
// configured), then answered 405 with Allow when the path is served for
// other methods, else 404, in the contract's error shape.
type Router struct {
	mux     *http.ServeMux
	auth    *Authenticator
	log     *slog.Logger
	routes  []Route
	methods []string // every method some route serves
}

// NewRouter returns an empty table. a checks every request's bearer token;
// nil serves without authentication (dev, demo, serve --insecure). log
// receives one line per refusal ([LogRefused]); nil discards.
func NewRouter(a *Authenticator, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &Router{mux: http.NewServeMux(), auth: a, log: log}
	rt.mux.HandleFunc("/", rt.unrouted)
	return rt
}

// Handle registers h for pattern behind the route's authorization. It
// panics, as http.ServeMux does for a bad pattern, when the pattern names
// no method or names a run other than as {run} (see [Router.HandleAround]).
func (rt *Router) Handle(pattern string, h http.Handler) { rt.HandleAround(pattern, h, nil) }

// HandleFunc registers the function h for pattern, like [Router.Handle].
func (rt *Router) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	rt.HandleAround(pattern, http.HandlerFunc(h), nil)
}

// HandleAround registers h for pattern like [Router.Handle], with around,
// when not nil, wrapped around the route's authorization and h together:
// what around observes (the ingest's request counter) sees the route's
// 401s and 403s too.
//
// Routes that name a run must do so as the wildcard {run}, in the segment
// after "runs": the check reads that wildcard, so a route that names its
// run otherwise ({id}, /run/{run}) would escape the scope, and registering
// one panics.
func (rt *Router) HandleAround(pattern string, h http.Handler, around func(http.Handler) http.Handler) {
	route, err := newRoute(pattern)
	if err != nil {
		panic(err)
	}
	guarded := rt.guard(route, h)
	if around != nil {
		guarded = around(guarded)
	}
	rt.mux.Handle(pattern, guarded)
	rt.routes = append(rt.routes, route)
	method, _, _ := strings.Cut(pattern, " ")
	rt.methods = append(rt.methods, method)
	if method == http.MethodGet {
		rt.methods = append(rt.methods, http.MethodHead)
	}
	slices.Sort(rt.methods)
	rt.methods = slices.Compact(rt.methods)
}

// newRoute classifies pattern, and refuses one whose run would escape the
// scope check.
func newRoute(pattern string) (Route, error) {
	r := Route{Pattern: pattern, Access: Classify(pattern)}
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || method == "" || strings.HasPrefix(path, " ") {
		return r, fmt.Errorf("auth: route %q names no method", pattern)
	}
	if !strings.HasPrefix(path, "/") {
		return r, fmt.Errorf("auth: route %q: the path must start with /", pattern)
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, seg := range segs {
		name, wild := strings.CutPrefix(seg, "{")
		name = strings.TrimSuffix(strings.TrimSuffix(name, "}"), "...")
		switch {
		case wild && name == "run":
			r.Scoped = true
		case wild && strings.Contains(strings.ToLower(name), "run"):
			return r, fmt.Errorf("auth: route %q: a run is named {run}, so the run scope applies to it", pattern)
		}
		if seg == "runs" && i+1 < len(segs) && segs[i+1] != "{run}" {
			return r, fmt.Errorf("auth: route %q: the segment after /runs/ must be {run}, so the run scope applies to it", pattern)
		}
		if seg == "run" && i+1 < len(segs) {
			return r, fmt.Errorf("auth: route %q: runs are addressed as /runs/{run}, so the run scope applies to them", pattern)
		}
	}
	if r.Scoped && r.Access == Open {
		return r, fmt.Errorf("auth: route %q names a run and cannot be open", pattern)
	}
	return r, nil
}

// Routes lists the registered routes, in the order registered.
func (rt *Router) Routes() []Route { return slices.Clone(rt.routes) }

// ServeHTTP routes r to its handler, through the route's check.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) { rt.mux.ServeHTTP(w, r) }

// guard wraps the handler of route in its check: authentication, the
// role's access to the route, and, for a route that names a run, the run
// the router routed against the token's scope.
func (rt *Router) guard(route Route, h http.Handler) http.Handler {
	if route.Access == Open {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.auth == nil {
			h.ServeHTTP(w, r)
			return
		}
		p, ok := rt.authenticate(w, r)
		if !ok {
			return
		}
		if !p.Role.Allows(route.Access) {
			rt.forbid(w, r, p, "role", "", fmt.Sprintf("token %q (role %s) may not %s", p.Name, p.Role, route.Access))
			return
		}
		if route.Scoped {
			// The value the mux routed, which the handler reads too.
			if run := r.PathValue("run"); run == "" || !p.InScope(run) {
				rt.forbid(w, r, p, "run scope", run, fmt.Sprintf("token %q may not access run %q", p.Name, clip(run)))
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}

// unrouted answers a request no route matches: 401 without a known token
// (with tokens configured), else 405 with Allow when the path is served
// for other methods, else 404.
func (rt *Router) unrouted(w http.ResponseWriter, r *http.Request) {
	if rt.auth != nil {
		if _, ok := rt.authenticate(w, r); !ok {
			return
		}
	}
	if allow := rt.allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpx.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("%s is not served at %s; it serves %s", clip(r.Method), clip(r.URL.Path), strings.Join(allow, ", ")))
		return
	}
	httpx.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", clip(r.Method), clip(r.URL.Path)))
}

// allowed lists the methods some route serves r's path with, asking the
// mux itself so that the answer follows its matching exactly.
func (rt *Router) allowed(r *http.Request) []string {
	var out []string
	for _, m := range rt.methods {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := rt.mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// authenticate finds the principal of r's bearer token, or answers 401.
func (rt *Router) authenticate(w http.ResponseWriter, r *http.Request) (*Principal, bool) {
	token, present := bearer(r)
	if !present {
		LogRefused(r.Context(), rt.log, r, http.StatusUnauthorized, nil, "no bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger"`)
		httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "this route needs a bearer token: send Authorization: Bearer <token>")
		return nil, false
	}
	p, ok := rt.auth.Lookup(token)
	if !ok {
		LogRefused(r.Context(), rt.log, r, http.StatusUnauthorized, nil, "unknown token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger", error="invalid_token"`)
		httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "the bearer token is not known to this ledger")
		return nil, false
	}
	return p, true
}

func (rt *Router) forbid(w http.ResponseWriter, r *http.Request, p *Principal, reason, run, msg string) {
	var attrs []slog.Attr
	if run != "" {
		attrs = append(attrs, slog.String("run", clip(run)))
	}
	LogRefused(r.Context(), rt.log, r, http.StatusForbidden, p, reason, attrs...)
	w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger", error="insufficient_scope"`)
	httpx.WriteError(w, http.StatusForbidden, "forbidden", msg)
}

// LogRefused writes the one log line every refusal of the HTTP interface
// gets, reads and writes alike: "request refused" with the status, the
// reason, the token's name and role (never its secret), the method, the
// route's pattern, the path as sent (escaped, clipped) and the remote
// address, then attrs (the run, the event index and field).
func LogRefused(ctx context.Context, log *slog.Logger, r *http.Request, status int, p *Principal, reason string, attrs ...slog.Attr) {
	name, role := "", ""
	if p != nil {
		name, role = p.Name, string(p.Role)
	}
	all := append([]slog.Attr{
		slog.Int("status", status), slog.String("reason", reason), slog.String("token", name), slog.String("role", role),
		slog.String("method", clip(r.Method)), slog.String("pattern", r.Pattern), slog.String("path", clip(r.URL.EscapedPath())),
		slog.String("remote", r.RemoteAddr),
	}, attrs...)
	log.LogAttrs(ctx, slog.LevelInfo, "request refused", all...)
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:197] + "..."
}
