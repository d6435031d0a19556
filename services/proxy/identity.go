package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rolloutledger/rolloutledger/events"
)

// The headers that name a request's run and attempt when its base URL
// does not. They never reach the engine.
const (
	HeaderRun     = "X-Rolloutledger-Run"
	HeaderAttempt = "X-Rolloutledger-Attempt"
)

// identity is the run and attempt a request belongs to.
type identity struct {
	Run     string
	Attempt string
}

// key is the identity as one map and spool key: run and attempt joined by
// NUL, which neither may contain.
func (id identity) key() string { return id.Run + "\x00" + id.Attempt }

// requestError is a 4xx answer the proxy gives itself, before the engine
// sees anything.
type requestError struct {
	status int
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(code, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, code: code, msg: fmt.Sprintf(format, args...)}
}

// splitIdentity splits a request's escaped path into the identity its base
// URL carries, /r/{run}/a/{attempt}/..., and the engine route after it.
// Each id is one path segment, percent-decoded, so an attempt id may hold
// '/' written as %2F. A path without the /r/ prefix has no identity.
func splitIdentity(escaped string) (identity, string, error) {
	var id identity
	if !strings.HasPrefix(escaped, "/r/") {
		return id, escaped, nil
	}
	segs := strings.SplitN(escaped[len("/r/"):], "/", 2)
	run, err := url.PathUnescape(segs[0])
	if err != nil {
		return id, "", badRequest("bad_run", "the run segment of the path is not valid percent-encoding: %v", err)
	}
	if !events.ValidRunID(run) {
		return id, "", badRequest("bad_run", "%q is not a run id ([A-Za-z0-9._-]{1,128}, not . or ..)", clip(run))
	}
	id.Run = run
	rest := "/"
	if len(segs) == 2 {
		rest += segs[1]
	}
	if strings.HasPrefix(rest, "/a/") {
		segs = strings.SplitN(rest[len("/a/"):], "/", 2)
		att, err := url.PathUnescape(segs[0])
		if err != nil {
			return id, "", badRequest("bad_attempt", "the attempt segment of the path is not valid percent-encoding: %v", err)
		}
		if !events.ValidEntityID(att) {
			return id, "", badRequest("bad_attempt", "%q is not an attempt id ([A-Za-z0-9._:/-]{1,200})", clip(att))
		}
		id.Attempt = att
		rest = "/"
		if len(segs) == 2 {
			rest += segs[1]
		}
	}
	return id, rest, nil
}

// requestIdentity is the identity of r: its path's, else its headers'. Both
// given and different is an error, as is an attempt without a run.
func requestIdentity(r *http.Request) (identity, string, error) {
	id, route, err := splitIdentity(r.URL.EscapedPath())
	if err != nil {
		return id, "", err
	}
	hrun, hatt := r.Header.Get(HeaderRun), r.Header.Get(HeaderAttempt)
	if hrun != "" {
		if !events.ValidRunID(hrun) {
			return id, "", badRequest("bad_run", "header %s: %q is not a run id ([A-Za-z0-9._-]{1,128}, not . or ..)", HeaderRun, clip(hrun))
		}
		if id.Run != "" && id.Run != hrun {
			return id, "", badRequest("bad_run", "the path names run %q and header %s names %q", id.Run, HeaderRun, clip(hrun))
		}
		id.Run = hrun
	}
	if hatt != "" {
		if !events.ValidEntityID(hatt) {
			return id, "", badRequest("bad_attempt", "header %s: %q is not an attempt id ([A-Za-z0-9._:/-]{1,200})", HeaderAttempt, clip(hatt))
		}
		if id.Attempt != "" && id.Attempt != hatt {
			return id, "", badRequest("bad_attempt", "the path names attempt %q and header %s names %q", id.Attempt, HeaderAttempt, clip(hatt))
		}
		id.Attempt = hatt
	}
	if id.Attempt != "" && id.Run == "" {
		return id, "", badRequest("bad_run", "header %s names an attempt but no run: add %s or use the base URL /r/{run}/a/{attempt}/v1", HeaderAttempt, HeaderRun)
	}
	return id, route, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
