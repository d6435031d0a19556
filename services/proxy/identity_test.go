package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequestIdentity(t *testing.T) {
	cases := []struct {
		path, hrun, hatt string
		want             identity
		wantRoute        string
		wantCode         string
	}{
		{path: "/r/run-1/a/att-1/v1/chat/completions", want: identity{"run-1", "att-1"}, wantRoute: "/v1/chat/completions"},
		{path: "/r/run-1/a/g%2F3%2Fa-1/v1/completions", want: identity{"run-1", "g/3/a-1"}, wantRoute: "/v1/completions"},
		{path: "/v1/chat/completions", hrun: "r2", hatt: "a:2", want: identity{"r2", "a:2"}, wantRoute: "/v1/chat/completions"},
		{path: "/r/run-1/v1/models", want: identity{Run: "run-1"}, wantRoute: "/v1/models"},
		{path: "/v1/models", wantRoute: "/v1/models"},
		{path: "/r/run%20x/a/a/v1/chat/completions", wantCode: "bad_run"},
		{path: "/r/..%2F/a/a/v1/chat/completions", wantCode: "bad_run"},
		{path: "/r/run/a/" + strings.Repeat("x", 201) + "/v1/chat/completions", wantCode: "bad_attempt"},
		{path: "/r/run/a/a%00b/v1/chat/completions", wantCode: "bad_attempt"},
		{path: "/r/run/a/a/v1/chat/completions", hrun: "other", wantCode: "bad_run"},
		{path: "/r/run/a/a/v1/chat/completions", hatt: "b", wantCode: "bad_attempt"},
		{path: "/v1/chat/completions", hatt: "a", wantCode: "bad_run"},
		{path: "/v1/chat/completions", hrun: "r", hatt: "a b", wantCode: "bad_attempt"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", c.path, nil)
		if c.hrun != "" {
			r.Header.Set(HeaderRun, c.hrun)
		}
		if c.hatt != "" {
			r.Header.Set(HeaderAttempt, c.hatt)
		}
		id, route, err := requestIdentity(r)
		if c.wantCode != "" {
			re, ok := err.(*requestError)
			if !ok || re.code != c.wantCode || re.status != 400 {
				t.Errorf("%s: got %v, want a 400 %s", c.path, err, c.wantCode)
			}
			continue
		}
		if err != nil || id != c.want || route != c.wantRoute {
			t.Errorf("%s: got %+v %q %v, want %+v %q", c.path, id, route, err, c.want, c.wantRoute)
		}
	}
}
