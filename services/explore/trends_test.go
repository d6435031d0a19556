package explore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A step's trend: the mean and spread of its attempts' rewards, the
// trainer's grad norm, and the tokens it trains by staleness (a segment's
// tokens run to the next segment's start, the last to the turn's end).
func TestStepTrend(t *testing.T) {
	m := NewModel("r")
	feed(m, &events.GroupStarted{Group: "g", Task: "t", Size: 2, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.AttemptStarted{Attempt: "g/b", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, CompletionTokens: 10, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop},
		&events.TurnGenerated{Attempt: "g/b", Turn: 0, CompletionTokens: 8, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop},
		&events.TurnGenerated{Attempt: "g/b", Turn: 1, CompletionTokens: 5, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop},
		&events.GradientApplied{Step: 1, Batch: 1, BatchDigest: "d", FromVersion: 0, ToVersion: 1, GradNorm: 0.75, LogprobGap: map[string]float64{}})
	man := projections.Manifest{Seq: 1, Digest: "d", Groups: []projections.BatchGroup{{Group: "g", Task: "t", Attempts: []projections.BatchAttempt{
		{Attempt: "g/a", Reward: 1, Turns: []projections.BatchTurn{{Turn: 0, Staleness: 0, Trained: true}}},
		{Attempt: "g/b", Reward: 0, Turns: []projections.BatchTurn{
			{Turn: 0, Staleness: 2, Trained: false},
			{Turn: 1, Segments: []projections.TurnSegment{{Start: 0, Staleness: 1, Trained: true}, {Start: 2, Staleness: 0, Trained: true}}}}},
	}}}}
	data, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	env, err := json.Marshal(projections.Envelope{ID: "seal-1", Run: "r", Type: projections.KindBatchSealed, Fact: projections.FactPosition{Seq: 7}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Decision(env); err != nil {
		t.Fatal(err)
	}
	rv := m.RunView(time.Now())
	if len(rv.Steps) != 1 {
		t.Fatalf("%d steps in the run view, want 1", len(rv.Steps))
	}
	s := rv.Steps[0]
	if s.MeanReward == nil || *s.MeanReward != 0.5 || s.Reward == nil || s.Reward.Min != 0 || s.Reward.Max != 1 {
		t.Errorf("rewards: mean %v, spread %+v; want 0.5 from 0 to 1", s.MeanReward, s.Reward)
	}
	if s.GradNorm == nil || *s.GradNorm != 0.75 {
		t.Errorf("grad norm %v, want 0.75", s.GradNorm)
	}
	want := []projections.Count{{Value: 0, N: 13}, {Value: 1, N: 2}}
	if len(s.TrainedStaleness) != len(want) || s.TrainedStaleness[0] != want[0] || s.TrainedStaleness[1] != want[1] {
		t.Errorf("trained tokens by staleness %v, want %v", s.TrainedStaleness, want)
	}
}
