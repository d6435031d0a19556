package httpx

import (
	"net/http/httptest"
	"testing"
)

func TestNegotiate(t *testing.T) {
	const nd, arrow = "application/x-ndjson", "application/vnd.apache.arrow.stream"
	for _, tc := range []struct {
		accept []string
		want   string // "" for 406
	}{
		{nil, nd},
		{[]string{""}, nd},
		{[]string{"*/*"}, nd},
		{[]string{"application/*"}, nd},
		{[]string{arrow}, arrow},
		{[]string{"Application/Vnd.Apache.Arrow.Stream"}, arrow},
		{[]string{nd}, nd},
		{[]string{arrow + ", " + nd}, nd},               // equal weight and match: the server's order
		{[]string{arrow + ", " + nd + ";q=0.5"}, arrow}, // the client's weights
		{[]string{arrow + ";q=0.9, */*;q=0.1"}, arrow},  // the exact range outweighs the wildcard
		{[]string{"*/*;q=0.8, " + arrow}, arrow},        // a specific range beats */*
		{[]string{arrow + ", */*"}, arrow},              // equal weights: the exact match wins
		{[]string{"application/json"}, ""},              // nothing offered
		{[]string{"text/*, image/png"}, ""},
		{[]string{"*/*, " + nd + ";q=0, " + arrow + ";q=0"}, ""}, // q=0 excludes, the wildcard does not bring them back
		{[]string{"*/*;q=0"}, ""},
		{[]string{nd + ";q=0", "*/*"}, arrow}, // several header lines
		{[]string{nd + ";charset=utf-8;q=0.4, " + arrow + ";q=0.3"}, nd},
		{[]string{"bogus, " + arrow}, arrow},                // a malformed range is skipped
		{[]string{arrow + ";q=2, " + nd}, nd},               // a q out of range drops its range
		{[]string{arrow + ";q=0.0001, " + nd + ";q=0"}, ""}, // more than three decimals
		{[]string{"*/json"}, nd},                            // */subtype is malformed: as if absent
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, v := range tc.accept {
			r.Header.Add("Accept", v)
		}
		got, ok := Negotiate(r, nd, arrow)
		if tc.want == "" {
			if ok {
				t.Errorf("Accept %q: got %s, want not acceptable", tc.accept, got)
			}
			continue
		}
		if !ok || got != tc.want {
			t.Errorf("Accept %q: got %q (ok %v), want %s", tc.accept, got, ok, tc.want)
		}
	}
}
