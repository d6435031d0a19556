package projections

import (
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func TestScore(t *testing.T) {
	cfg := events.DefaultConfig() // partial_credit_cap 0.5
	for _, tc := range []struct {
		name                    string
		passed                  bool
		testsPassed, testsTotal int64
		cap                     float64
		want                    float64
	}{
		{"a pass scores 1", true, 1, 4, 0.5, 1},
		{"a pass with no tests scores 1", true, 0, 0, 0.5, 1},
		// 0.5 × 4 / 4 = 0.5: every test passing without a pass stays at the cap.
		{"partial credit never reaches a full solve", false, 4, 4, 0.5, 0.5},
		// 0.5 × 1 / 4 = 0.125
		{"partial credit", false, 1, 4, 0.5, 0.125},
		{"no tests, no credit", false, 0, 0, 0.5, 0},
		// (0.3 × 1) / 3 in float64 is 0.09999999999999999, not the exact
		// 0.1 a constant expression would give: the order is part of the rule.
		{"cap times passed, over total", false, 1, 3, 0.3, 0.09999999999999999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.PartialCreditCap = tc.cap
			if got := score(tc.passed, tc.testsPassed, tc.testsTotal, c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestZeroSignal(t *testing.T) {
	for _, tc := range []struct {
		name string
		// outcomes: passed, and tests passed of 4 when failed.
		passed      []bool
		testsPassed []int
		dropped     bool
	}{
		// Scores 1, 1, 1: std 0.
		{"all pass", []bool{true, true, true}, []int{4, 4, 4}, true},
		// Scores 0, 0, 0: std 0.
		{"all fail", []bool{false, false, false}, []int{0, 0, 0}, true},
		// Scores 0.25, 0.25, 0.25 (0.5 × 2/4): equal partial credit is no signal.
		{"all fail with the same partial credit", []bool{false, false, false}, []int{2, 2, 2}, true},
		// Scores 0.125, 0.25, 0.25: mean 0.625/3, std ≈ 0.059 > 1e-6.
		{"all fail with different partial credit", []bool{false, false, false}, []int{1, 2, 2}, false},
		// Scores 1, 0: std 0.5.
		{"a pass and a fail", []bool{true, false}, []int{4, 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.passed)
			b := newRun(t).start(events.RunConfig{GroupSize: ptr(n), BatchGroups: ptr(1), EnforceAdmission: ptr(false)}).task("t1")
			b.group("g1", "t1", n, events.PurposeTrain)
			for i := range n {
				b.solved(string(rune('a'+i)), "g1", tc.passed[i], tc.testsPassed[i], 0)
			}
			filler(b, "g2")
			ms := manifestsOf(t, b.fold())
			if len(ms) == 0 {
				t.Fatal("no batch sealed")
			}
			wantDropped := []DroppedGroup{}
			wantGroup := "g1"
			if tc.dropped {
				wantDropped = []DroppedGroup{{Group: "g1", Task: "t1", Reason: DropZeroSignal}}
				wantGroup = "g2"
			}
			if got := ms[0].Groups[0].Group; got != wantGroup {
				t.Errorf("batch 1 holds %s, want %s", got, wantGroup)
			}
			if !slices.Equal(ms[0].Dropped, wantDropped) {
				t.Errorf("got dropped %v, want %v", ms[0].Dropped, wantDropped)
			}
		})
	}
}

func TestEfficiencyBonus(t *testing.T) {
	type att struct {
		passed      bool
		testsPassed int   // of 4, when failed
		tokens      int64 // L: total completion tokens
	}
	for _, tc := range []struct {
		name     string
		weight   float64
		cap      float64
		attempts []att
		// bonus and reward per attempt, in attempt id order (a, b, c, ...)
		bonus, reward []float64
	}{
		{
			name: "shorter solves earn more", weight: 0.1, cap: 0.5,
			// Lmin 100, Lmax 300: bonus = 0.1 × (0.5 − (L − 100)/200)
			//   L 100: 0.1 × 0.5 = 0.05;  L 200: 0.1 × 0 = 0;  L 300: 0.1 × −0.5 = −0.05.
			// The failure (4 of 4 tests) scores 0.5 × 4/4 = 0.5 and gets no bonus.
			attempts: []att{{true, 4, 100}, {true, 4, 200}, {true, 4, 300}, {false, 4, 50}},
			bonus:    []float64{0.05, 0, -0.05, 0},
			reward:   []float64{1.05, 1, 0.95, 0.5},
		},
		{
			name: "one pass earns no bonus", weight: 0.1, cap: 0.5,
			attempts: []att{{true, 4, 100}, {false, 2, 10}},
			bonus:    []float64{0, 0},
			reward:   []float64{1, 0.25}, // 0.5 × 2/4
		},
		{
			name: "equal lengths earn no bonus", weight: 0.1, cap: 0.5,
			attempts: []att{{true, 4, 100}, {true, 4, 100}, {false, 1, 10}},
			bonus:    []float64{0, 0, 0},
			reward:   []float64{1, 1, 0.125},
		},
		{
			name: "the largest weight validation allows never ranks a pass below a fail", weight: 1, cap: 0.49,
			// Validation needs cap < 1 − 1/2 = 0.5. Bonus = 1 × (0.5 − (L − 10)/20):
			//   L 10: +0.5 → reward 1.5;  L 30: −0.5 → reward 0.5.
			// The best failure scores 0.49 × 4/4 = 0.49 < 0.5.
			attempts: []att{{true, 4, 10}, {true, 4, 30}, {false, 4, 5}},
			bonus:    []float64{0.5, -0.5, 0},
			reward:   []float64{1.5, 0.5, 0.49},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.attempts)
			b := newRun(t).start(events.RunConfig{GroupSize: ptr(n), BatchGroups: ptr(1), EnforceAdmission: ptr(false),
				EfficiencyWeight: ptr(tc.weight), PartialCreditCap: ptr(tc.cap)}).task("t1")
			b.group("g1", "t1", n, events.PurposeTrain)
			for i, a := range tc.attempts {
				id := string(rune('a' + i))
				b.attempt(id, "g1", "").turnAt(id, 0, 0, a.tokens).finished(id).reward(id, a.passed, a.testsPassed, 4)
			}
			ms := manifestsOf(t, b.fold())
			if len(ms) != 1 {
				t.Fatalf("got %d batches, want 1 (findings?)", len(ms))
			}
			worstPass, bestFail := 1e9, -1e9
			for i, a := range ms[0].Groups[0].Attempts {
				if !approx(a.Bonus, tc.bonus[i]) || !approx(a.Reward, tc.reward[i]) {
					t.Errorf("%s: got bonus %v reward %v, want %v and %v", a.Attempt, a.Bonus, a.Reward, tc.bonus[i], tc.reward[i])
				}
				if a.CompletionTokens != tc.attempts[i].tokens {
					t.Errorf("%s: got completion_tokens %d, want %d", a.Attempt, a.CompletionTokens, tc.attempts[i].tokens)
				}
				if tc.attempts[i].passed {
					worstPass = min(worstPass, a.Reward)
				} else {
					bestFail = max(bestFail, a.Reward)
				}
			}
			if worstPass <= bestFail {
				t.Errorf("a passed attempt (reward %v) ranks at or below a failed one (%v)", worstPass, bestFail)
			}
		})
	}
}

func TestAdvantage(t *testing.T) {
	// Attempts a..d: a passes (score 1), b fails 0/4 (0), c and d fail 2/4
	// (0.5 × 2/4 = 0.25). One pass, so no bonus: rewards 1, 0, 0.25, 0.25.
	//   sum 1.5, mean 0.375
	//   deviations 0.625, −0.375, −0.125, −0.125
	//   population variance (0.390625 + 0.140625 + 0.015625 + 0.015625)/4 = 0.140625, std 0.375
	for _, tc := range []struct {
		estimator string
		want      []float64
	}{
		// r − mean
		{events.AdvantageGRPO, []float64{0.625, -0.375, -0.125, -0.125}},
		// (r − mean)/(0.375 + 1e-6)
		{events.AdvantageGRPOStd, []float64{0.625 / 0.375001, -0.375 / 0.375001, -0.125 / 0.375001, -0.125 / 0.375001}},
		// r − (sum − r)/3: 1 − 0.5/3, 0 − 1.5/3, 0.25 − 1.25/3 (twice)
		{events.AdvantageRLOO, []float64{1 - 0.5/3.0, -0.5, 0.25 - 1.25/3.0, 0.25 - 1.25/3.0}},
	} {
		t.Run(tc.estimator, func(t *testing.T) {
			b := newRun(t).start(events.RunConfig{GroupSize: ptr(4), BatchGroups: ptr(1), EnforceAdmission: ptr(false),
				Advantage: ptr(tc.estimator)}).task("t1")
			b.group("g1", "t1", 4, events.PurposeTrain)
			// Rewarded in an order other than the id order, which the sums use.
			b.solved("d", "g1", false, 2, 0)
			b.solved("b", "g1", false, 0, 0)
			b.solved("a", "g1", true, 4, 0)
			b.solved("c", "g1", false, 2, 0)
			ms := manifestsOf(t, b.fold())
			if len(ms) != 1 {
				t.Fatalf("got %d batches, want 1", len(ms))
			}
			atts := ms[0].Groups[0].Attempts
			if got := attemptIDs(ms[0].Groups[0]); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
				t.Fatalf("got attempts %v, want a..d", got)
			}
			for i, a := range atts {
				if !approx(a.Advantage, tc.want[i]) {
					t.Errorf("%s: got advantage %v, want %v", a.Attempt, a.Advantage, tc.want[i])
				}
			}
		})
	}
}
