package explore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// seal folds batch seq's batch.sealed decision, made at the model's last
// fact, into m.
func seal(t *testing.T, m *Model, man projections.Manifest) {
	t.Helper()
	data, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	env, err := json.Marshal(projections.Envelope{ID: fmt.Sprintf("seal-%d", man.Seq), Run: m.Run(), Type: projections.KindBatchSealed,
		Fact: projections.FactPosition{Seq: m.Facts()}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Decision(env); err != nil {
		t.Fatal(err)
	}
}

// A long run's view stays the same size: its newest steps each and the
// older ones evenly spaced, each as the steps list shows it, with the
// drops of every step counted, from records that keep that count and from
// records made before they did. The steps list pages through every step.
func TestRunViewBoundedSteps(t *testing.T) {
	const steps = 40
	m := NewModel("r")
	wantDrops := map[string]int{}
	for seq := 1; seq <= steps; seq++ {
		g, task := fmt.Sprintf("g%d", seq), fmt.Sprintf("t%d", seq%4)
		facts := []events.Fact{
			&events.TaskRegistered{Task: task, Prompt: "p"},
			&events.GroupStarted{Group: g, Task: task, Size: 1, Purpose: events.PurposeTrain},
			&events.AttemptStarted{Attempt: g + "/a", Group: g, Task: task, Engine: "e", VM: "v"},
			&events.TurnGenerated{Attempt: g + "/a", Turn: 0, CompletionTokens: int64(seq), VersionSegments: events.SingleVersion(0), Finish: events.FinishStop},
		}
		if seq%2 == 0 {
			facts = append(facts, &events.GradientApplied{Step: int64(seq), Batch: int64(seq), BatchDigest: "d", FromVersion: 0, ToVersion: 1,
				GradNorm: float64(seq) / 8, LogprobGap: map[string]float64{}})
		}
		feed(m, facts...)
		man := projections.Manifest{Seq: uint64(seq), Digest: "d", Groups: []projections.BatchGroup{{Group: g, Task: task,
			Attempts: []projections.BatchAttempt{{Attempt: g + "/a", Reward: float64(seq % 2), Turns: []projections.BatchTurn{{Turn: 0, Trained: true}}}}}}}
		if seq%3 == 0 {
			man.Dropped = []projections.DroppedGroup{{Group: g + "-z", Task: task, Reason: projections.DropZeroSignal}}
			wantDrops[projections.DropZeroSignal]++
		}
		if seq%7 == 0 {
			man.Dropped = append(man.Dropped, projections.DroppedGroup{Group: g + "-i", Task: task, Reason: projections.DropInfraLost})
			wantDrops[projections.DropInfraLost]++
		}
		seal(t, m, man)
	}
	s, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Steps("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Steps) != steps || all.Total != steps || all.Next != "" {
		t.Fatalf("steps list: %d steps of %d, next %q; want all %d", len(all.Steps), all.Total, all.Next, steps)
	}
	for i, st := range all.Steps {
		if st.Step != uint64(i+1) {
			t.Fatalf("steps list row %d is step %d", i, st.Step)
		}
		if (st.GradNorm != nil) != (st.Step%2 == 0) {
			t.Errorf("step %d: grad norm %v, want one only for even steps", st.Step, st.GradNorm)
		}
		// The funnel counts the tasks registered before the seal: one more
		// each step until the four tasks are.
		if want := min(int(st.Step), 4); st.Funnel.Registered != want {
			t.Errorf("step %d: funnel registered %d, want %d", st.Step, st.Funnel.Registered, want)
		}
	}

	whole, err := s.RunView(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if whole.StepsSampled || whole.StepsTotal != steps || !reflect.DeepEqual(whole.Steps, all.Steps) {
		t.Fatalf("a run of %d steps: sampled %v, total %d, %d steps; want every step", steps, whole.StepsSampled, whole.StepsTotal, len(whole.Steps))
	}
	if !reflect.DeepEqual(whole.Drops, wantDrops) {
		t.Errorf("drops %v, want %v", whole.Drops, wantDrops)
	}

	rv, err := s.runView(time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, st := range rv.Steps {
		got = append(got, st.Step)
		if !reflect.DeepEqual(st, all.Steps[st.Step-1]) {
			t.Errorf("step %d in the bounded view differs from the steps list's", st.Step)
		}
	}
	// Of 40 steps, the 5 newest (36–40) and 5 of steps 1–35 from the first,
	// 35/5 = 7 apart.
	if want := []uint64{1, 8, 15, 22, 29, 36, 37, 38, 39, 40}; !reflect.DeepEqual(got, want) {
		t.Errorf("bounded view shows steps %v, want %v", got, want)
	}
	if !rv.StepsSampled || rv.StepsTotal != steps {
		t.Errorf("bounded view: sampled %v, total %d; want sampled of %d", rv.StepsSampled, rv.StepsTotal, steps)
	}
	if !reflect.DeepEqual(rv.Drops, wantDrops) {
		t.Errorf("bounded view drops %v, want every step's %v", rv.Drops, wantDrops)
	}

	// Records made before the summary kept the drops count them from the
	// steps.
	s.sum.DropsKept, s.sum.Drops = false, nil
	old, err := s.runView(time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(old.Drops, wantDrops) {
		t.Errorf("drops from records without the count %v, want %v", old.Drops, wantDrops)
	}

	var paged []Step
	cursor := ""
	for range steps {
		p, err := s.Steps(cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Steps...)
		if p.Next == "" {
			break
		}
		if want := fmt.Sprint(p.Steps[len(p.Steps)-1].Step); p.Next != want {
			t.Fatalf("next %q after a page ending at step %s", p.Next, want)
		}
		cursor = p.Next
	}
	if !reflect.DeepEqual(paged, all.Steps) {
		t.Errorf("pages of 7 hold %d steps, not the list's %d", len(paged), len(all.Steps))
	}
}

// A task's groups are listed in the order they started, a page at a time,
// whether its record keeps them as keys of their own or (written before
// those keys) as a list, and once the writer has moved such a list to keys.
func TestTaskGroupsListed(t *testing.T) {
	m := NewModel("r")
	start := func(from, to int) {
		for i := from; i < to; i++ {
			g := fmt.Sprintf("g%02d", i)
			feed(m, &events.GroupStarted{Group: g, Task: "t", Size: 1, Purpose: events.PurposeTrain},
				&events.AttemptStarted{Attempt: g + "/a", Group: g, Task: "t", Engine: "e", VM: "v"})
		}
	}
	want := func(n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("g%02d", i))
		}
		return ids
	}
	check := func(stage string, n int) {
		t.Helper()
		s, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		cursor := ""
		for range n + 1 {
			v, ok, err := s.TaskView("t", cursor, 3)
			if err != nil || !ok {
				t.Fatalf("%s: task view at cursor %q: ok %v, %v", stage, cursor, ok, err)
			}
			if v.Groups != n || v.Attempts != n {
				t.Errorf("%s: task counts %d groups and %d attempts, want %d each", stage, v.Groups, v.Attempts, n)
			}
			for _, g := range v.GroupList {
				got = append(got, g.Group)
			}
			if cursor = v.GroupsNext; cursor == "" {
				break
			}
		}
		if !reflect.DeepEqual(got, want(n)) {
			t.Errorf("%s: groups paged %v, want %v", stage, got, want(n))
		}
		if _, _, err := s.TaskView("t", strconv.Itoa(n+1), 3); err == nil {
			t.Errorf("%s: a cursor past the task's %d groups was accepted", stage, n)
		}
	}

	feed(m, &events.TaskRegistered{Task: "t", Prompt: "p"})
	start(0, 7)
	check("keyed", 7)

	// Rewrite the record as one written before the keys: the list inside.
	if err := m.w.Flush(m.kv); err != nil {
		t.Fatal(err)
	}
	v, _, _ := m.kv.Get(idKey(kTask, "t"))
	var rec taskRec
	if err := json.Unmarshal(v, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Groups, rec.NGroups = want(7), 0
	for i := range 7 {
		if err := m.kv.Delete(taskGroupKey("t", uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	v, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.kv.Set(idKey(kTask, "t"), v); err != nil {
		t.Fatal(err)
	}
	m.w.tasks = map[string]*entry[taskRec]{}
	check("listed", 7)

	start(7, 11)
	check("moved to keys", 11)
	v, _, _ = m.kv.Get(idKey(kTask, "t"))
	rec = taskRec{}
	if err := json.Unmarshal(v, &rec); err != nil || len(rec.Groups) != 0 || rec.NGroups != 11 {
		t.Errorf("record after a group was added: %d groups listed, %d keyed (%v); want the list moved to 11 keys", len(rec.Groups), rec.NGroups, err)
	}
}

// fakeLog is a facts log in memory, by offset; held says which offsets it
// still holds.
type fakeLog struct {
	values map[int64][]byte
	err    error
}

func (l fakeLog) Records(_ context.Context, at []projections.FactPosition) ([][]byte, error) {
	out := make([][]byte, len(at))
	for i, p := range at {
		out[i] = l.values[p.Offset]
	}
	return out, l.err
}

// Records that leave token arrays in the facts log keep a turn's text and
// counts, and an attempt's view reads the arrays back by the turn's
// position: the same view as records that keep them, from a log that
// holds the record; without the arrays, saying why, from one that no
// longer does; and a clear 503 when the log cannot be read or holds
// another record there.
func TestTokensReadBackFromTheLog(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	facts := []events.Fact{
		&events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, PromptTokens: 9, CompletionTokens: 3, VersionSegments: events.SingleVersion(0),
			TokenIDs: []int32{5, 6, 7}, Logprobs: []float32{-0.5, -0.25, -1}, Text: "abc", Finish: events.FinishToolCall},
		&events.TurnGenerated{Attempt: "g/a", Turn: 1, PromptTokens: 14, CompletionTokens: 2, VersionSegments: events.SingleVersion(0), Parent: events.TurnRef(0), PrefixTokens: 12,
			ObservationTokenIDs: []int32{40, 41}, TokenIDs: []int32{8, 9}, Logprobs: []float32{-0.125, -2}, Text: "de", Finish: events.FinishStop},
		&events.TurnGenerated{Attempt: "g/a", Turn: 2, PromptTokens: 16, CompletionTokens: 1, VersionSegments: events.SingleVersion(0),
			Text: "no tokens", Finish: events.FinishStop},
	}
	whole, stripped := NewModel("r"), NewModel("r")
	stripped.w.TokensInLog = true
	log := fakeLog{values: map[int64][]byte{}}
	for i, f := range facts {
		ev := events.New("r", "test", at.Add(time.Duration(i)*time.Second), f)
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		log.values[int64(i)] = v
		whole.Fact(0, int64(i), v, ev)
		stripped.Fact(0, int64(i), v, ev)
	}
	ws, err := whole.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, ok, err := ws.AttemptView("g/a")
	if err != nil || !ok || len(want.TurnList) != 3 || len(want.TurnList[1].ObservationIDs) != 2 {
		t.Fatalf("the whole records' view: ok %v, %v, %+v", ok, err, want.TurnList)
	}
	s, err := stripped.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	u, _, _ := stripped.kv.Get(turnKey(kTurn, "g/a", 0))
	if w, _, _ := whole.kv.Get(turnKey(kTurn, "g/a", 0)); len(u) >= len(w) || bytes.Contains(u, []byte("token_ids")) {
		t.Errorf("a stored turn with tokens left in the log is %d bytes (whole %d): %q", len(u), len(w), u)
	}
	got, ok, err := s.WithLog(context.Background(), log).AttemptView("g/a")
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("view with tokens read back (ok %v, %v):\n got  %+v\n want %+v", ok, err, got.TurnList, want.TurnList)
	}

	// Search and the side-by-side view need no log.
	side, _, err := s.WithLog(context.Background(), nil).SideView("g")
	if wantSide, _ := whole.SideView("g"); err != nil || !reflect.DeepEqual(side, wantSide) {
		t.Errorf("side by side from records without arrays: %v, %+v; want %+v", err, side, wantSide)
	}

	gone := fakeLog{values: map[int64][]byte{3: log.values[3]}}
	got, _, err = s.WithLog(context.Background(), gone).AttemptView("g/a")
	if err != nil {
		t.Fatal(err)
	}
	if t0 := got.TurnList[0]; len(t0.TokenIDs) != 0 || len(t0.Logprobs) != 0 || !strings.Contains(t0.TokensGone, "no longer holds") ||
		t0.Text != "abc" || t0.CompletionTokens != 3 {
		t.Errorf("a turn whose record the log lost: %+v; want its text and counts, no arrays, and why", t0)
	}
	if t1 := got.TurnList[1]; !reflect.DeepEqual(t1, want.TurnList[1]) {
		t.Errorf("a turn the log still holds: %+v, want %+v", t1, want.TurnList[1])
	}

	for name, l := range map[string]FactLog{
		"no log":      nil,
		"log fails":   fakeLog{values: log.values, err: errors.New("broker unreachable")},
		"wrong facts": fakeLog{values: map[int64][]byte{2: log.values[1], 3: log.values[3]}},
	} {
		_, _, err := s.WithLog(context.Background(), l).AttemptView("g/a")
		var he *httpError
		if err == nil || (name != "wrong facts" && (!errors.As(err, &he) || he.status != 503 || !strings.Contains(he.msg, "partition 0 offset 2"))) {
			t.Errorf("%s: %v; want an error naming the turn's place in the facts log", name, err)
		}
	}
}
