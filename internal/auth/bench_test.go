package auth_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/auth"
)

// BenchmarkLookup is the per-request cost of authentication: one SHA-256 of
// the presented token and a constant-time compare against every known hash.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{4, 64} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			ts := make([]auth.Token, n)
			for i := range ts {
				ts[i] = auth.Token{Name: fmt.Sprintf("t%d", i), Token: fmt.Sprintf("%064d", i), Role: auth.Producer}
			}
			a, err := auth.New(ts)
			if err != nil {
				b.Fatal(err)
			}
			hit, miss := ts[n-1].Token, strings.Repeat("x", 64)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				tok := hit
				if i%2 == 1 {
					tok = miss
				}
				a.Lookup(tok)
			}
		})
	}
}
