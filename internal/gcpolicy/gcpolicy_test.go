package gcpolicy

import (
	"runtime/debug"
	"testing"
)

// A pass sets the collector's percent and restores it after; a GOGC or
// GOMEMLIMIT the user set is left in force.
func TestPass(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)

	restore := Pass()
	if got := debug.SetGCPercent(PassPercent); got != PassPercent {
		t.Errorf("during a pass GOGC is %d, want %d", got, PassPercent)
	}
	restore()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("after the pass GOGC is %d, want the 150 before it", got)
	}

	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "300")
			restore := Pass()
			if got := debug.SetGCPercent(150); got != 150 {
				t.Errorf("with %s set, a pass changed GOGC to %d", env, got)
			}
			restore()
		})
	}
}
