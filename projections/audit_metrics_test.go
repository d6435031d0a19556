package projections

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// auditOf audits recs twice, keeping its own index of ids and taking the
// fold's verdict (as replay does): both must report the same.
func auditOf(t *testing.T, recs []Record) AuditReport {
	t.Helper()
	f, s, a, folded := NewFold(testRun), NewMemStore(), NewAudit(testRun), NewAudit(testRun)
	for _, r := range recs {
		ds, err := f.Apply(s, r)
		if err != nil {
			t.Fatal(err)
		}
		a.Fact(r)
		folded.FactFolded(r, f.Repeat())
		for _, d := range ds {
			if err := a.Decision(d); err != nil {
				t.Fatal(err)
			}
			if err := folded.Decision(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want, got := a.Report(), folded.Report(); !reflect.DeepEqual(want, got) {
		t.Fatalf("the audit with the fold's verdicts differs from the audit's own:\n%+v\n%+v", got, want)
	}
	if folded.seen != nil {
		t.Errorf("the audit given the fold's verdicts kept %d ids", len(folded.seen))
	}
	return a.Report()
}

func TestAuditGoldenRun(t *testing.T) {
	r := auditOf(t, goldenRun(t).records())
	if len(r.Steps) != 2 {
		t.Fatalf("got %d steps, want 2", len(r.Steps))
	}
	s1 := r.Steps[0]
	if s1.Groups != 2 || s1.Dropped.Get(DropUnadmitted) != 1 || !approx(s1.UnadmittedRate, 1.0/3) {
		t.Errorf("step 1: got %d groups, dropped %v, unadmitted rate %v; want 2, one unadmitted, 1/3", s1.Groups, s1.Dropped, s1.UnadmittedRate)
	}
	// Solves: g-1/a (5 tokens), g-1/b2 (4), g-3/a (20) of six attempts.
	if s1.Attempts != 6 || s1.Solves != 3 || !approx(s1.PassRate, 0.5) || !approx(s1.TokensPerSolve, 29.0/3) {
		t.Errorf("step 1: got %d attempts, %d solves, pass rate %v, tokens per solve %v", s1.Attempts, s1.Solves, s1.PassRate, s1.TokensPerSolve)
	}
	if !s1.Trained || s1.DigestMatches {
		t.Errorf("step 1: trained %v, digest matches %v; want a report with the wrong digest", s1.Trained, s1.DigestMatches)
	}
	if r.Steps[1].Trained {
		t.Error("step 2 has no gradient.applied but is reported trained")
	}
	if got := r.FindingsByKind.Get(FindingBatchDigestMismatch); got != 1 || len(r.Findings) != 1 || r.Findings[0].Fact.Seq != 77 {
		t.Errorf("got findings %+v, want one batch_digest_mismatch caused by fact 77", r.Findings)
	}
	if r.Admitted != 1 || r.Rejected != 1 || r.GroupsUsed != 4 || r.GroupsDropped[DropUnadmitted] != 1 {
		t.Errorf("got admitted %d rejected %d used %d dropped %v", r.Admitted, r.Rejected, r.GroupsUsed, r.GroupsDropped)
	}
	if r.Compaction.Count != 1 || r.Compaction.TokensBefore != 9000 || !approx(r.Compaction.Savings, 1-2000.0/9000) {
		t.Errorf("got compaction %+v", r.Compaction)
	}
	if r.Facts != uint64(len(goldenRun(t).evs)) || r.Attempts.Started == 0 || r.ForkMS.P50 != 120 {
		t.Errorf("got facts %d, attempts %+v, fork %+v", r.Facts, r.Attempts, r.ForkMS)
	}
}

func TestAuditMaskedTokens(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.solved("g1/a", "g1", true, 4, 0, 3) // turn 1 at version 3: staleness −2 in batch 1, masked
	b.solved("g1/b", "g1", false, 1, 0)
	b.add("engine", &events.ToolCalled{Attempt: "g1/b", Turn: 0, Call: 0, Tool: "bash", ExitCode: 1, DurationMS: 30, ToFile: true})
	b.add("engine", &events.ToolCalled{Attempt: "g1/b", Turn: 0, Call: 1, Tool: "bash", TimedOut: true, DurationMS: 90, Background: true})
	r := auditOf(t, b.records())
	if len(r.Steps) != 1 {
		t.Fatalf("got %d steps", len(r.Steps))
	}
	st := r.Steps[0]
	if st.Turns != 3 || st.TrainedTurns != 2 || st.CompletionTokens != 30 || st.MaskedTokens != 10 || !approx(st.MaskedTokenFraction, 1.0/3) {
		t.Errorf("got %+v; want 3 turns, 2 trained, 10 of 30 tokens masked", st)
	}
	want := ToolStats{Calls: 2, Failures: 1, Timeouts: 1, ToFile: 1, Background: 1, DurationMS: 120, MeanMS: 60}
	if r.ToolTotals != want || len(r.Tools) != 1 || r.Tools[0].Tool != "bash" {
		t.Errorf("got tools %+v, totals %+v; want %+v", r.Tools, r.ToolTotals, want)
	}
	// The report is plain data: it encodes, the same way every time.
	a, _ := json.Marshal(r)
	b2, _ := json.Marshal(auditOf(t, b.records()))
	if string(a) != string(b2) {
		t.Error("two audits of one run encode differently")
	}
}

func TestViewState(t *testing.T) {
	recs := goldenRun(t).records()
	f, s := NewFold(testRun), NewMemStore()
	// Stop inside g-1: probes decided, g-1 collecting.
	for _, r := range recs[:45] {
		if _, err := f.Apply(s, r); err != nil {
			t.Fatal(err)
		}
	}
	v, err := ViewState(s)
	if err != nil {
		t.Fatal(err)
	}
	if v.Facts != 45 || v.Tree.Size != 45 || v.Tree.Root != referenceRoot(values(recs[:45])) {
		t.Errorf("got facts %d tree %+v", v.Facts, v.Tree)
	}
	if v.Config.GroupSize != 3 || !v.Configured {
		t.Errorf("got config %+v", v.Config)
	}
	if len(v.Tasks) != 2 || v.Tasks[0].Task != "t-easy" || v.Tasks[0].Decision != "rejected" || v.Tasks[1].Decision != "admitted" {
		t.Errorf("got tasks %+v", v.Tasks)
	}
	if len(v.InFlight) != 1 || v.InFlight[0].Group != "g-1" || v.InFlight[0].Attempts == 0 {
		t.Errorf("got in flight %+v, want g-1", v.InFlight)
	}
	if v.HeldTurnPayloads == 0 {
		t.Error("no held turn payloads while g-1 collects tokens")
	}
}

// A reward re-posted with its event id is one reward, in the audit as in the
// fold: the report counts what the fold applied, not what was delivered.
func TestAuditCountsRedeliveredFactsOnce(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.solved("g1/a", "g1", true, 4, 0)
	b.solved("g1/b", "g1", false, 1, 0)
	reward := b.evs[len(b.evs)-1]
	finish := b.evs[len(b.evs)-2]
	b.evs = append(b.evs, reward, reward, finish)
	r := auditOf(t, b.records())
	if r.Attempts.Rewarded != 2 || r.Attempts.Passed != 1 {
		t.Errorf("got %d rewarded, %d passed; want 2 and 1 after two re-posts of a reward", r.Attempts.Rewarded, r.Attempts.Passed)
	}
	if got := r.Attempts.Finished.Get(events.OutcomeSubmitted); got != 2 {
		t.Errorf("got %d attempts finished, want 2 after a re-post of attempt.finished", got)
	}
	if r.Facts != uint64(len(b.evs)) {
		t.Errorf("got %d facts, want every record counted: %d", r.Facts, len(b.evs))
	}
	for _, tc := range r.FactsByType {
		if tc.Type == events.TypeRewardComputed && tc.N != 2 {
			t.Errorf("got %d reward.computed facts, want 2", tc.N)
		}
	}
}
