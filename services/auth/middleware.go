package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/rolloutledger/rolloutledger/services/httpx"
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

// Classify says which class of access the route pattern of a request
// needs; known is false for requests no route matches (answered 404 or 405
// by the mux once the caller is authenticated).
func Classify(method, pattern, urlPath string) (a Access, known bool) {
	if (method == http.MethodGet || method == http.MethodHead) && (urlPath == "/healthz" || urlPath == "/metrics") {
		return Open, true
	}
	if pattern == "" || pattern == "/" {
		return Other, false
	}
	switch pattern {
	case "POST /v1/events":
		return Append, true
	case "GET /v1/runs/{run}/batches/next", "GET /v1/runs/{run}/batches/{seq}", "GET /v1/runs/{run}/batches/{seq}/samples":
		return ReadBatches, true
	case "GET /v1/runs/{run}/tasks/{task...}":
		return ReadAdmission, true
	}
	if strings.HasPrefix(pattern, "GET ") {
		return Read, true
	}
	return Other, true
}

// runOf is the {run} segment of a /v1/runs/{run}/... path, "" for other
// paths.
func runOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/runs/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(rest, "/")
	run, err := url.PathUnescape(seg)
	if err != nil {
		return seg
	}
	return run
}

// Middleware authenticates every request to routes except the open ones,
// refuses those the caller's role or run scope do not allow, and hands the
// rest to routes with the [Principal] in the request's context. log receives
// one line per refusal, naming the token (never its secret); nil discards.
func (a *Authenticator) Middleware(routes *http.ServeMux, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := routes.Handler(r)
		access, known := Classify(r.Method, pattern, r.URL.Path)
		if access == Open {
			routes.ServeHTTP(w, r)
			return
		}
		token, present := bearer(r)
		if !present {
			log.Info("request refused", "status", http.StatusUnauthorized, "reason", "no bearer token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger"`)
			httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "this route needs a bearer token: send Authorization: Bearer <token>")
			return
		}
		p, ok := a.Lookup(token)
		if !ok {
			log.Info("request refused", "status", http.StatusUnauthorized, "reason", "unknown token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger", error="invalid_token"`)
			httpx.WriteError(w, http.StatusUnauthorized, "unauthorized", "the bearer token is not known to this ledger")
			return
		}
		if known && !p.Role.Allows(access) {
			forbid(w, r, log, p, fmt.Sprintf("token %q (role %s) may not %s", p.Name, p.Role, access))
			return
		}
		if run := runOf(r); run != "" && !p.InScope(run) {
			forbid(w, r, log, p, fmt.Sprintf("token %q may not access run %q", p.Name, run))
			return
		}
		routes.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}

func forbid(w http.ResponseWriter, r *http.Request, log *slog.Logger, p *Principal, msg string) {
	log.Info("request refused", "status", http.StatusForbidden, "token", p.Name, "role", string(p.Role), "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", `Bearer realm="rolloutledger", error="insufficient_scope"`)
	httpx.WriteError(w, http.StatusForbidden, "forbidden", msg)
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
