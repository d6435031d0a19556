package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// A test run is built fact by fact; each fact becomes an event with a
// deterministic id and clock and goes through the real codec, so the fold
// sees exactly what the projector would.

const testRun = "run-1"

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type runBuilder struct {
	t      testing.TB
	n      int
	evs    []events.Event
	groups map[string]string // group → task, to fill attempt.started's task
}

func newRun(t testing.TB) *runBuilder {
	return &runBuilder{t: t, groups: map[string]string{}}
}

func ptr[T any](v T) *T { return &v }

// event makes the next event (without appending it).
func (b *runBuilder) event(source string, data events.Fact) events.Event {
	b.n++
	return events.Event{
		ID:  fmt.Sprintf("00000000-0000-7000-8000-%012x", b.n),
		Run: testRun, Type: data.FactType(), V: events.CurrentVersion(data.FactType()),
		At: epoch.Add(time.Duration(b.n) * time.Millisecond), Source: source, Data: data,
	}
}

func (b *runBuilder) add(source string, data events.Fact) *runBuilder {
	b.evs = append(b.evs, b.event(source, data))
	return b
}

func (b *runBuilder) start(rc events.RunConfig) *runBuilder {
	return b.add("scheduler", &events.RunStarted{Config: rc, Model: "m", Harness: "h"})
}

func (b *runBuilder) task(id string) *runBuilder {
	return b.add("scheduler", &events.TaskRegistered{Task: id, Source: "swe-smith", Kind: "swe", Tier: 1, Gates: []events.Gate{}})
}

func (b *runBuilder) group(id, task string, size int, purpose string) *runBuilder {
	b.groups[id] = task
	return b.add("scheduler", &events.GroupStarted{Group: id, Task: task, Size: size, Purpose: purpose})
}

func (b *runBuilder) attempt(id, group, retryOf string) *runBuilder {
	task := b.groups[group]
	if task == "" {
		task = "t-unknown"
	}
	return b.add("engine", &events.AttemptStarted{Attempt: id, Group: group, Task: task, Engine: "e1", VM: "vm-" + id, ForkMS: 120, RetryOf: retryOf})
}

// turns adds turns 0..len(versions)-1 of 10 completion tokens each,
// without inline tokens, at the given policy versions.
func (b *runBuilder) turns(attempt string, versions ...int64) *runBuilder {
	for i, v := range versions {
		b.turnAt(attempt, i, v, 10)
	}
	return b
}

func (b *runBuilder) turnAt(attempt string, turn int, version, completion int64) *runBuilder {
	return b.add("engine", &events.TurnGenerated{Attempt: attempt, Turn: turn, PolicyVersion: version,
		PromptTokens: 100, CompletionTokens: completion, Finish: events.FinishToolCall, LatencyMS: 900})
}

// tokenTurn adds a turn with inline observation and completion tokens; the
// completion's log-probs are lp(0), lp(1), ...
func (b *runBuilder) tokenTurn(attempt string, turn int, version int64, obs, completion []int32) *runBuilder {
	lps := make([]float32, len(completion))
	for i := range lps {
		lps[i] = lp(i)
	}
	return b.add("engine", &events.TurnGenerated{Attempt: attempt, Turn: turn, PolicyVersion: version,
		PromptTokens: 100, CompletionTokens: int64(len(completion)), ObservationTokenIDs: obs,
		TokenIDs: completion, Logprobs: lps, Finish: events.FinishToolCall, LatencyMS: 900})
}

// lp is the i-th completion log-prob of a test turn: -1/16, -2/16, ...,
// -8/16, repeating; each is exact in float32 and prints exactly.
func lp(i int) float32 { return -float32(i%8+1) / 16 }

func (b *runBuilder) compact(attempt string, turn int) *runBuilder {
	return b.add("engine", &events.ContextCompacted{Attempt: attempt, Turn: turn, TokensBefore: 9000, TokensAfter: 2000})
}

func (b *runBuilder) finished(attempt string) *runBuilder {
	return b.add("engine", &events.AttemptFinished{Attempt: attempt, Outcome: events.OutcomeSubmitted})
}

func (b *runBuilder) failed(attempt string) *runBuilder {
	return b.add("engine", &events.AttemptFailed{Attempt: attempt, Reason: "sandbox_lost"})
}

func (b *runBuilder) reward(attempt string, passed bool, testsPassed, testsTotal int) *runBuilder {
	return b.add("verifier", &events.RewardComputed{Attempt: attempt, Passed: passed, TestsPassed: testsPassed, TestsTotal: testsTotal, Verifier: "pytest"})
}

func (b *runBuilder) closed(group string) *runBuilder {
	return b.add("scheduler", &events.GroupClosed{Group: group, Reason: "retries_exhausted"})
}

func (b *runBuilder) gradient(batch int64, digest string) *runBuilder {
	return b.add("trainer", &events.GradientApplied{Step: batch, Batch: batch, BatchDigest: digest, FromVersion: batch - 1, ToVersion: batch,
		Loss: 0.5, TrainedTokens: 1000, LogprobGap: map[string]float64{"0": 0.06}, GradNorm: 1})
}

// solved adds a complete attempt: started, turns at the versions, finished,
// and rewarded as passed (score 1) or failed with testsPassed of 4 tests.
func (b *runBuilder) solved(attempt, group string, passed bool, testsPassed int, versions ...int64) *runBuilder {
	b.attempt(attempt, group, "").turns(attempt, versions...).finished(attempt)
	return b.reward(attempt, passed, testsPassed, 4)
}

// records encodes evs and places them at partition 3 from offset 1000 in
// steps of 3, so that offsets never equal sequence numbers.
func records(t testing.TB, evs []events.Event) []Record {
	t.Helper()
	out := make([]Record, len(evs))
	for i, ev := range evs {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatalf("encode %s: %v", ev.Type, err)
		}
		dec, err := events.Decode(v)
		if err != nil {
			t.Fatalf("decode %s: %v", ev.Type, err)
		}
		out[i] = Record{Value: v, Event: dec, Partition: 3, Offset: 1000 + 3*int64(i)}
	}
	return out
}

func (b *runBuilder) records() []Record { return records(b.t, b.evs) }

// fold folds the run and fails the test on error.
func (b *runBuilder) fold() []Decision {
	b.t.Helper()
	ds, err := FoldAll(testRun, b.records())
	if err != nil {
		b.t.Fatalf("fold: %v", err)
	}
	return ds
}

func envelopeOf(t testing.TB, d Decision) Envelope {
	t.Helper()
	var env Envelope
	if err := json.Unmarshal(d.Value, &env); err != nil {
		t.Fatalf("decision %s: %v", d.ID, err)
	}
	return env
}

func findingsOf(t testing.TB, ds []Decision) []Finding {
	t.Helper()
	var out []Finding
	for _, d := range ds {
		if d.Kind != KindAuditFinding {
			continue
		}
		var f Finding
		if err := json.Unmarshal(envelopeOf(t, d).Data, &f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func findingKinds(t testing.TB, ds []Decision) []string {
	var out []string
	for _, f := range findingsOf(t, ds) {
		out = append(out, f.Kind)
	}
	return out
}

func manifestsOf(t testing.TB, ds []Decision) []Manifest {
	t.Helper()
	var out []Manifest
	for _, d := range ds {
		if d.Kind != KindBatchSealed {
			continue
		}
		m, err := ManifestOf(d.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

type admissionOf struct {
	Kind events.Type
	Admission
}

func admissionsOf(t testing.TB, ds []Decision) []admissionOf {
	t.Helper()
	var out []admissionOf
	for _, d := range ds {
		if d.Kind != KindTaskAdmitted && d.Kind != KindTaskRejected {
			continue
		}
		var a Admission
		if err := json.Unmarshal(envelopeOf(t, d).Data, &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, admissionOf{d.Kind, a})
	}
	return out
}

// attemptIDs lists a batch group's attempts.
func attemptIDs(g BatchGroup) []string {
	var out []string
	for _, a := range g.Attempts {
		out = append(out, a.Attempt)
	}
	return out
}

func groupIDs(m Manifest) []string {
	var out []string
	for _, g := range m.Groups {
		out = append(out, g.Group)
	}
	return out
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

// openConfig is a config without admission, one group per batch.
func openConfig() events.RunConfig {
	return events.RunConfig{GroupSize: ptr(2), BatchGroups: ptr(1), EnforceAdmission: ptr(false)}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func jsonIndent(dst *bytes.Buffer, src []byte) error { return json.Indent(dst, src, "", "  ") }
