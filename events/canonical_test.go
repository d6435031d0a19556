package events_test

import (
	"math"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// The canonical encoding is what facts and decisions are hashed in: each
// property below is a byte a Merkle leaf or a batch digest depends on.
func TestCanonicalJSON(t *testing.T) {
	type inner struct {
		Z string `json:"z"`
		A string `json:"a,omitempty"`
	}
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"struct fields in declaration order, empty optional ones left out", inner{Z: "1"}, `{"z":"1"}`},
		{"map keys sorted", map[string]int{"b": 2, "10": 1, "a": 3, "2": 4}, `{"10":1,"2":4,"a":3,"b":2}`},
		{"HTML characters verbatim", "<a href=\"x\">&</a>", `"<a href=\"x\">&</a>"`},
		{"non-ASCII verbatim", "naïve 日本語", `"naïve 日本語"`},
		{"line and paragraph separators escaped", "\u2028\u2029", `"\u2028\u2029"`},
		{"shortest float that reads back", float32(0.1), `0.1`},
		{"float64 digits as needed", math.Nextafter(0.3, 1), `0.30000000000000004`},
		{"small floats in exponent form", 1e-7, `1e-7`},
		{"no trailing newline", []int{}, `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.CanonicalJSON(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := events.CanonicalJSON(math.NaN()); err == nil {
		t.Error("NaN encoded; it has no JSON form")
	}
}
