package explore

import (
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

func feed(m *Model, facts ...events.Fact) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, f := range facts {
		ev := events.New(m.Run(), "test", at.Add(time.Duration(i)*time.Second), f)
		m.Fact(0, int64(i), nil, ev)
	}
}

// A retry takes the slot of the attempt it retries, in either log order;
// other attempts take slots in the order they start.
func TestSlots(t *testing.T) {
	for _, retryFirst := range []bool{false, true} {
		m := NewModel("r")
		orig := &events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"}
		retry := &events.AttemptStarted{Attempt: "g/a-r1", Group: "g", Task: "t", Engine: "e", VM: "v", RetryOf: "g/a"}
		other := &events.AttemptStarted{Attempt: "g/b", Group: "g", Task: "t", Engine: "e", VM: "v"}
		facts := []events.Fact{&events.GroupStarted{Group: "g", Task: "t", Size: 2, Purpose: events.PurposeTrain}}
		if retryFirst {
			facts = append(facts, retry, other, orig)
		} else {
			facts = append(facts, orig, other, retry)
		}
		feed(m, facts...)
		g, ok := m.GroupView("g")
		if !ok {
			t.Fatal("group g unknown")
		}
		slots := map[string]int{}
		for _, a := range g.Attempts {
			slots[a.Attempt] = a.Slot
		}
		if g.Slots != 2 || slots["g/a"] != slots["g/a-r1"] || slots["g/b"] == slots["g/a"] {
			t.Errorf("retry first %v: got %d slots %v, want 2 with g/a and its retry sharing one", retryFirst, g.Slots, slots)
		}
		a, _ := m.AttemptView("g/a")
		if a.RetriedBy != "g/a-r1" {
			t.Errorf("retry first %v: g/a retried by %q, want g/a-r1", retryFirst, a.RetriedBy)
		}
	}
}

// A turn's lineage before its group is in a batch says why, and the run
// summary counts what it was fed.
func TestLineagePending(t *testing.T) {
	m := NewModel("r")
	feed(m, &events.GroupStarted{Group: "g", Task: "t", Size: 2, Purpose: events.PurposeProbe},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, CompletionTokens: 3, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop})
	a, ok := m.AttemptView("g/a")
	if !ok || len(a.TurnList) != 1 {
		t.Fatalf("attempt view: ok %v, %d turns", ok, len(a.TurnList))
	}
	if l := a.TurnList[0].Lineage; l.State != "not_for_training" {
		t.Errorf("a probe group's turn: got lineage %+v, want not_for_training", l)
	}
	if s := m.Summary(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)); s.Facts != 3 || s.Status != "live" {
		t.Errorf("summary: got %d facts, %s; want 3, live", s.Facts, s.Status)
	}
}
