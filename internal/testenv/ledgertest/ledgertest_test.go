package ledgertest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
)

// recorder collects what a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestSameDecisions(t *testing.T) {
	want := map[string][]byte{"a": []byte(`{"id":"a"}`), "b": []byte(`{"id":"b"}`)}
	for _, tc := range []struct {
		name string
		got  map[string][]byte
		says []string
	}{
		{"same", map[string][]byte{"a": []byte(`{"id":"a"}`), "b": []byte(`{"id":"b"}`)}, nil},
		{"missing", map[string][]byte{"a": []byte(`{"id":"a"}`)}, []string{"decision b missing"}},
		{"differs", map[string][]byte{"a": []byte(`{"id":"a"}`), "b": []byte(`{"id":"b" }`)}, []string{"decision b differs"}},
		{"unexpected", map[string][]byte{"a": []byte(`{"id":"a"}`), "b": []byte(`{"id":"b"}`), "c": nil}, []string{"unexpected decision c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			ledgertest.SameDecisions(r, tc.got, want)
			if len(tc.says) == 0 && len(r.errs) != 0 {
				t.Errorf("got %q, want no complaint", r.errs)
			}
			for _, s := range tc.says {
				if !strings.Contains(strings.Join(r.errs, "\n"), s) {
					t.Errorf("got %q, want it to say %q", r.errs, s)
				}
			}
		})
	}
}
