package simulate

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// The streamed generator yields the events of the held plan, in its order,
// byte for byte but for the random ids, over seeds, sizes and the options
// that change content (tokens, text, catalogue version 1, failures).
func TestSourceEqualsPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"small", Options{Seed: 1, Tasks: 8, Steps: 2, BatchGroups: 2, MaxTurns: 20}},
		{"golden", Options{Seed: 2026, Tasks: 24, Steps: 3, BatchGroups: 4, MaxTurns: 40, MaxStaleness: -1, Text: true}},
		{"tokens", Options{Seed: 7, Tasks: 16, Steps: 3, BatchGroups: 4, MaxTurns: 30, Tokens: true}},
		{"v1-failures", Options{Seed: 11, Tasks: 32, Steps: 4, BatchGroups: 4, FactVersion: 1, InfraFailureRate: 0.3}},
		{"default-scale", Options{Seed: 3, Tasks: 64, Steps: 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Generate(tc.o, "eq-run")
			if err != nil {
				t.Fatal(err)
			}
			src, err := NewSource(tc.o, "eq-run")
			if err != nil {
				t.Fatal(err)
			}
			want := plan.All()
			i := 0
			for ev := range src.Events() {
				if i >= len(want) {
					t.Fatalf("the source yields more than the plan's %d events", len(want))
				}
				if got, w := canonical(t, ev), canonical(t, want[i]); !bytes.Equal(got, w) {
					t.Fatalf("event %d: got %s, want %s", i, got, w)
				}
				i++
			}
			if i != len(want) {
				t.Fatalf("the source yields %d events, the plan %d", i, len(want))
			}
			if src.Streams() != len(plan.Streams) || src.Engines != plan.Engines || len(src.Groups) != len(plan.Groups) || len(src.Tasks) != len(plan.Tasks) {
				t.Errorf("got %d streams %d engines %d groups %d tasks, want %d %d %d %d", src.Streams(), src.Engines, len(src.Groups), len(src.Tasks),
					len(plan.Streams), plan.Engines, len(plan.Groups), len(plan.Tasks))
			}
		})
	}
}

// canonical is ev's record with the id left out.
func canonical(t *testing.T, ev events.Event) []byte {
	t.Helper()
	ev.ID = "00000000-0000-7000-8000-000000000000"
	b, err := events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Windows cut from the stream are the windows cut from the held plan: the
// same units, producers and events, in the same order.
func TestStreamWindowsEqualPlanWindows(t *testing.T) {
	o := Options{Seed: 5, Tasks: 24, Steps: 4, BatchGroups: 4, MaxTurns: 30}
	plan, err := Generate(o, "win-run")
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(o, "win-run")
	if err != nil {
		t.Fatal(err)
	}
	for _, byVersion := range []bool{false, true} {
		for _, size := range []int{7, 500} {
			want := windows(plan, size, byVersion)
			i := 0
			for w := range streamWindows(src.Events(), size, byVersion, nil) {
				if i >= len(want) {
					t.Fatalf("byVersion %v size %d: more than the plan's %d windows", byVersion, size, len(want))
				}
				if len(w) != len(want[i]) {
					t.Fatalf("byVersion %v size %d window %d: got %d units, want %d", byVersion, size, i, len(w), len(want[i]))
				}
				for u := range w {
					if w[u].stream != want[i][u].stream || len(w[u].events) != len(want[i][u].events) {
						t.Fatalf("byVersion %v size %d window %d unit %d: got %s×%d, want %s×%d", byVersion, size, i, u,
							w[u].stream, len(w[u].events), want[i][u].stream, len(want[i][u].events))
					}
					for e := range w[u].events {
						if !bytes.Equal(canonical(t, w[u].events[e]), canonical(t, want[i][u].events[e])) {
							t.Fatalf("byVersion %v size %d window %d unit %d event %d differs", byVersion, size, i, u, e)
						}
					}
				}
				i++
			}
			if i != len(want) {
				t.Fatalf("byVersion %v size %d: got %d windows, want %d", byVersion, size, i, len(want))
			}
		}
	}
}

// Reading a source holds the attempts in flight, not the run: the live
// heap's peak while reading a run eight times as long, in one shape, stays
// within 1.2 times the short run's, but for a [GroupInfo] and a serial for
// every group (Source.Groups), at most groupBytes each. Holding something
// for every attempt or every event makes it grow with the run.
func TestSourceMemoryFlat(t *testing.T) {
	const groupBytes = 256
	peak := func(steps int) (facts, groups int, live uint64) {
		// Few engines, so both runs spend most of their time with every
		// engine busy.
		o := Options{Seed: 42, Tasks: 8, Steps: steps, BatchGroups: 2, GroupSize: 4, MaxTurns: 100}
		runtime.GC()
		src, err := NewSource(o, "flat-run")
		if err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		for range src.Events() {
			if facts++; facts%2000 == 0 {
				runtime.GC()
				runtime.ReadMemStats(&ms)
				live = max(live, ms.HeapAlloc)
			}
		}
		return facts, len(src.Groups), live
	}
	shortFacts, shortGroups, short := peak(20)
	longFacts, longGroups, long := peak(160)
	t.Logf("peak live heap: %d KiB at %d facts, %d KiB at %d facts", short>>10, shortFacts, long>>10, longFacts)
	if longFacts < 6*shortFacts {
		t.Fatalf("got runs of %d and %d facts, want the second at least 6 times as long", shortFacts, longFacts)
	}
	if limit := short + short/5 + uint64(groupBytes*(longGroups-shortGroups)); long > limit {
		t.Errorf("got a peak live heap of %d KiB at %d facts, want at most %d KiB (1.2 times the %d KiB at %d facts, and %d groups more)",
			long>>10, longFacts, limit>>10, short>>10, shortFacts, longGroups-shortGroups)
	}
}
