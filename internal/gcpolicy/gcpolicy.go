// Package gcpolicy sets the garbage collector's pacing for `replay
// --verify`, which folds a whole run in one pass (docs/design.md §14.2).
//
// A verify keeps its fold state off the Go heap (on disk, and in arrays
// mapped apart from it), so its live heap is small — tens of megabytes,
// the facts in flight and a seal's manifest — while it allocates several
// objects a fact while decoding. At the runtime's default pacing (a heap
// goal of twice the live heap) it collected every few thousand facts, and
// the collector's work was a tenth of a replay's CPU. A heap goal of five
// times the live heap cost a verify of 1 M or 10 M facts about 100 MiB
// more at its peak and saved a ninth of its time (BENCHMARKS.md).
//
// Passes whose state is on the heap (--as-of-step and --reorder fold into
// memory) keep the default: five times their live heap could be gigabytes.
// A library does not choose this for the process it runs in: the command
// does, and a user's GOGC or GOMEMLIMIT wins.
package gcpolicy

import (
	"os"
	"runtime/debug"
)

// PassPercent is the collector's GOGC during a pass.
const PassPercent = 400

// Pass sets the collector's pacing for a pass over a run, unless the
// environment sets GOGC or GOMEMLIMIT, and returns what restores the
// pacing before it.
func Pass() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	before := debug.SetGCPercent(PassPercent)
	return func() { debug.SetGCPercent(before) }
}
