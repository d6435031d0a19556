package projections

import (
	"bytes"
	"slices"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// v3Turn adds a turn.generated version 3: newTokens are its new prompt
// tokens (the whole prompt without a parent), prefix the prompt tokens
// shared with its parent.
func (b *runBuilder) v3Turn(attempt string, turn int, parent *int, prefix int64, newTokens, completion []int32, temp *float64, tags ...string) *runBuilder {
	lps := make([]float32, len(completion))
	for i := range lps {
		lps[i] = lp(i)
	}
	d := &events.TurnGenerated{Attempt: attempt, Turn: turn, VersionSegments: events.SingleVersion(0),
		PromptTokens: prefix + int64(len(newTokens)), CompletionTokens: int64(len(completion)), ObservationTokenIDs: newTokens,
		TokenIDs: completion, Logprobs: lps, Finish: events.FinishToolCall, LatencyMS: 900,
		Parent: parent, PrefixTokens: prefix, Tags: tags}
	if temp != nil {
		d.Sampling = &events.Sampling{Temperature: temp}
	}
	if parent != nil && *parent != turn-1 {
		d.Diverged = &events.Divergence{Turn: turn - 1, At: prefix}
	}
	ev := b.event("proxy", d)
	ev.V = 3
	b.evs = append(b.evs, ev)
	return b
}

// wholeSequenceRun is one group of two attempts of version 3 turns: a
// passes, and branches and rewrites its context; b has a refused turn.
func wholeSequenceRun(t *testing.T) *runBuilder {
	b := newRun(t).start(openConfig()).task("t1").group("g1", "t1", 2, events.PurposeTrain)
	warm := ptr(0.7)
	b.attempt("g1/a", "g1", "").
		v3Turn("g1/a", 0, nil, 0, []int32{1, 2, 3}, []int32{4, 5}, warm).            // seq [1 2 3 4 5]
		v3Turn("g1/a", 1, events.TurnRef(0), 5, []int32{6}, []int32{7, 8}, nil).     // extends turn 0
		v3Turn("g1/a", 2, events.TurnRef(0), 4, []int32{9}, []int32{10}, ptr(0.25)). // branches off turn 0 at 4
		v3Turn("g1/a", 3, nil, 0, []int32{20, 21}, []int32{22}, nil).                // context rewritten
		v3Turn("g1/a", 4, events.TurnRef(3), 3, []int32{23}, []int32{24}, nil).      // extends turn 3
		v3Turn("g1/a", 5, events.TurnRef(4), 4, []int32{25}, []int32{26}, ptr(0.5)). // diverges from turn 4 at 4
		finished("g1/a").reward("g1/a", true, 4, 4)
	b.attempt("g1/b", "g1", "").
		v3Turn("g1/b", 0, nil, 0, []int32{1}, []int32{2}, nil).
		v3Turn("g1/b", 1, events.TurnRef(0), 2, []int32{3}, []int32{4}, nil, events.TagRefused).
		finished("g1/b").reward("g1/b", false, 0, 4)
	return b
}

func sealedSamples(t *testing.T, ds []Decision) (Manifest, []Sample) {
	t.Helper()
	for _, d := range ds {
		if d.Kind == KindBatchSealed {
			m, err := ManifestOf(d.Value)
			if err != nil {
				t.Fatal(err)
			}
			s, err := DecodeSamples(d.Samples)
			if err != nil {
				t.Fatal(err)
			}
			return m, s
		}
	}
	t.Fatal("no batch sealed")
	return Manifest{}, nil
}

func TestWholeSequenceSamples(t *testing.T) {
	m, samples := sealedSamples(t, wholeSequenceRun(t).fold())
	if m.RuleVersion != RuleVersion || RuleVersion != 4 {
		t.Fatalf("rule version %d", m.RuleVersion)
	}
	f32 := func(xs ...float64) []float32 {
		out := make([]float32, len(xs))
		for i, x := range xs {
			out[i] = float32(x)
		}
		return out
	}
	type want struct {
		segment int64
		ids     []int32
		mask    []uint8
		lps     []float32
		temps   []float32
	}
	l0, l1 := lp(0), lp(1)
	wants := []want{
		// The first turn's whole prompt, then turn 1's new token and completion.
		{0, []int32{1, 2, 3, 4, 5, 6, 7, 8}, []uint8{0, 0, 0, 1, 1, 0, 1, 1},
			[]float32{0, 0, 0, l0, l1, 0, l0, l1}, f32(0.7, 0.7, 0.7, 0.7, 0.7, 1, 1, 1)},
		// A branch: turn 0's first 4 tokens, masked, with their log-probs
		// and temperature, then turn 2's own.
		{1, []int32{1, 2, 3, 4, 9, 10}, []uint8{0, 0, 0, 0, 0, 1},
			[]float32{0, 0, 0, l0, 0, l0}, f32(0.7, 0.7, 0.7, 0.7, 0.25, 0.25)},
		// A rewritten context starts over from its first prompt token.
		{2, []int32{20, 21, 22, 23, 24}, []uint8{0, 0, 1, 0, 1},
			[]float32{0, 0, l0, 0, l0}, f32(1, 1, 1, 1, 1)},
		// A divergence from the previous turn: the prefix along the
		// chain 4 → 3, masked.
		{3, []int32{20, 21, 22, 23, 25, 26}, []uint8{0, 0, 0, 0, 0, 1},
			[]float32{0, 0, l0, 0, 0, l0}, f32(1, 1, 1, 1, 0.5, 0.5)},
	}
	var a, b []Sample
	for _, s := range samples {
		if s.Attempt == "g1/a" {
			a = append(a, s)
		} else {
			b = append(b, s)
		}
	}
	if len(a) != len(wants) {
		t.Fatalf("got %d samples of g1/a, want %d", len(a), len(wants))
	}
	for i, w := range wants {
		s := a[i]
		if s.Segment != w.segment || !slices.Equal(s.TokenIDs, w.ids) || !slices.Equal(s.LossMask, w.mask) ||
			!slices.Equal(s.RolloutLogprobs, w.lps) || !slices.Equal(s.Temperatures, w.temps) {
			t.Errorf("sample %d:\n got segment %d ids %v mask %v lps %v temps %v\nwant segment %d ids %v mask %v lps %v temps %v",
				i, s.Segment, s.TokenIDs, s.LossMask, s.RolloutLogprobs, s.Temperatures, w.segment, w.ids, w.mask, w.lps, w.temps)
		}
		if len(s.PolicyVersions) != len(s.TokenIDs) {
			t.Errorf("sample %d: %d versions", i, len(s.PolicyVersions))
		}
	}
	// The refused attempt trains nothing, and stays in the baseline.
	if len(b) != 1 || !slices.Equal(b[0].TokenIDs, []int32{1, 2, 3, 4}) || slices.Contains(b[0].LossMask, 1) {
		t.Errorf("refused attempt: %+v", b)
	}
	atts := m.Groups[0].Attempts
	if atts[1].Attempt != "g1/b" || atts[1].Masked != MaskRefused || atts[0].Masked != "" || atts[1].Advantage >= 0 {
		t.Errorf("attempts %+v", atts)
	}
	for _, bt := range atts[1].Turns {
		if bt.Trained {
			t.Errorf("refused attempt's turn %d trains", bt.Turn)
		}
	}
}

// The same log twice gives the same bytes; folded under rule version 3 (a
// replay of a run sealed then), the samples keep the form without
// temperatures and the segments of that rule.
func TestWholeSequenceDeterministicAndOldRules(t *testing.T) {
	b := wholeSequenceRun(t)
	one, two := b.fold(), b.fold()
	if len(one) != len(two) {
		t.Fatalf("%d and %d decisions", len(one), len(two))
	}
	for i := range one {
		if !bytes.Equal(one[i].Value, two[i].Value) || !bytes.Equal(one[i].Samples, two[i].Samples) {
			t.Fatalf("decision %d differs", i)
		}
	}
	f, s := NewFoldWith(testRun, FoldOptions{RuleVersion: 3}), NewMemStore()
	var old []Decision
	for _, r := range b.records() {
		ds, err := f.Apply(s, r)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, ds...)
	}
	m, samples := sealedSamples(t, old)
	if m.RuleVersion != 3 || envelopeOf(t, old[len(old)-1]).RuleVersion != 3 {
		t.Errorf("rule version %d", m.RuleVersion)
	}
	for _, s := range samples {
		if s.Temperatures != nil || s.Segment != 0 {
			t.Errorf("rule 3 sample of %s segment %d has temperatures %v", s.Attempt, s.Segment, s.Temperatures)
		}
	}
	if m.Groups[0].Attempts[1].Masked != "" {
		t.Errorf("rule 3 masks refused attempts")
	}
	if _, err := NewFoldWith(testRun, FoldOptions{RuleVersion: 2}).Apply(NewMemStore(), b.records()[0]); err == nil {
		t.Error("rule version 2 folded")
	}
}

// The canonical form of a sample with temperatures roundtrips, and one
// without reads as temperature 1.
func TestSampleTemperaturesForm(t *testing.T) {
	s := Sample{Group: "g", Attempt: "a", Segment: 1, TokenIDs: []int32{1, 2}, LossMask: []uint8{0, 1},
		RolloutLogprobs: []float32{0, -1}, PolicyVersions: []int64{3, 3}, Temperatures: []float32{0.5, 0.5}, Advantage: 0.25}
	b, err := AppendSample(nil, &s)
	if err != nil {
		t.Fatal(err)
	}
	old := s
	old.Temperatures = nil
	b, err = AppendSample(b, &old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSamples(b)
	if err != nil || len(got) != 2 || !slices.Equal(got[0].Temperatures, s.Temperatures) || got[1].Temperatures != nil {
		t.Fatalf("got %+v, %v", got, err)
	}
	r := NewSampleReader(b)
	r.Next()
	r.Next()
	if v := r.Sample(); v.Temperature(0) != 1 {
		t.Errorf("old form temperature %v", v.Temperature(0))
	}
	nd, err := SamplesNDJSON(b)
	if err != nil || !bytes.Contains(nd, []byte(`"policy_versions":[3,3],"temperatures":[0.5,0.5],"advantage"`)) ||
		bytes.Count(nd, []byte("temperatures")) != 1 {
		t.Errorf("NDJSON %s %v", nd, err)
	}
	bad := s
	bad.Temperatures = []float32{1}
	if _, err := AppendSample(nil, &bad); err == nil {
		t.Error("AppendSample took 1 temperature for 2 tokens")
	}
}

// A run keeps the rule version it started under: a build of newer rules
// that takes over its state (a projector upgraded mid-run) goes on folding
// it under the old ones, while a new run gets the new ones.
func TestRunKeepsItsRuleVersion(t *testing.T) {
	recs := wholeSequenceRun(t).records()
	s := NewMemStore()
	if _, err := NewFoldWith(testRun, FoldOptions{RuleVersion: 3}).Apply(s, recs[0]); err != nil {
		t.Fatal(err)
	}
	f := NewFold(testRun)
	var ds []Decision
	for _, r := range recs[1:] {
		out, err := f.Apply(s, r)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, out...)
	}
	m, samples := sealedSamples(t, ds)
	if m.RuleVersion != 3 || samples[0].Temperatures != nil {
		t.Errorf("an upgraded fold sealed under rules v%d (temperatures %v), want the run's v3", m.RuleVersion, samples[0].Temperatures)
	}
	if m, _ := sealedSamples(t, foldAllMust(t, recs)); m.RuleVersion != RuleVersion {
		t.Errorf("a new run sealed under rules v%d", m.RuleVersion)
	}
}

func foldAllMust(t *testing.T, recs []Record) []Decision {
	t.Helper()
	ds, err := FoldAll(testRun, recs)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
