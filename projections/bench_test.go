package projections

import (
	"fmt"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// benchRun is a run of train groups of 8 attempts with `turns` turns each,
// every turn carrying `tokens` inline completion tokens (0 for none), and a
// batch every 8 groups.
func benchRun(b *testing.B, groups, turns, tokens int) []Record {
	r := newRun(b).start(events.RunConfig{GroupSize: ptr(8), BatchGroups: ptr(8), EnforceAdmission: ptr(false)})
	r.task("t1")
	ids := make([]int32, tokens)
	lps := make([]float32, tokens)
	for i := range ids {
		ids[i], lps[i] = int32(i*7919%151936), lp(i)
	}
	for g := range groups {
		gid := fmt.Sprintf("g%05d", g)
		r.group(gid, "t1", 8, events.PurposeTrain)
		for a := range 8 {
			aid := fmt.Sprintf("%s/a%d", gid, a)
			r.attempt(aid, gid, "")
			for n := range turns {
				tg := &events.TurnGenerated{Attempt: aid, Turn: n, VersionSegments: events.SingleVersion(int64(g / 8)), PromptTokens: 4000,
					CompletionTokens: int64(max(tokens, 100+a)), Finish: events.FinishToolCall, LatencyMS: 900}
				if tokens > 0 {
					tg.TokenIDs, tg.Logprobs = ids, lps
				}
				r.add("engine", tg)
			}
			r.finished(aid).reward(aid, a%2 == 0, a%4, 4)
		}
	}
	return r.records()
}

func BenchmarkFold(b *testing.B) {
	for _, bc := range []struct {
		name                  string
		groups, turns, tokens int
	}{
		{"payload-free", 64, 20, 0},
		{"2K-token turns", 16, 5, 2048},
	} {
		b.Run(bc.name, func(b *testing.B) {
			recs := benchRun(b, bc.groups, bc.turns, bc.tokens)
			bytes := 0
			for _, r := range recs {
				bytes += len(r.Value)
			}
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			folds := 0
			for b.Loop() {
				ds, err := FoldAll(testRun, recs)
				if err != nil {
					b.Fatal(err)
				}
				if len(ds) == 0 {
					b.Fatal("no decisions")
				}
				folds++
			}
			b.ReportMetric(float64(folds*len(recs))/b.Elapsed().Seconds(), "facts/s")
		})
	}
}

// BenchmarkSeal times the record that seals a batch of 16 groups × 8
// attempts × 25 turns of 2,000 inline completion tokens (6.4 M tokens,
// ~7 M with the fold's observation-free turns): loading every turn's
// tokens, materializing the samples and hashing them. The state before
// the sealing record is cloned outside the timer.
func BenchmarkSeal(b *testing.B) {
	const groups, attempts, turns, tokens = 16, 8, 25, 2000
	r := newRun(b).start(events.RunConfig{GroupSize: ptr(attempts), BatchGroups: ptr(groups), EnforceAdmission: ptr(false)})
	r.task("t1")
	ids := make([]int32, tokens)
	lps := make([]float32, tokens)
	for i := range ids {
		ids[i], lps[i] = int32(i*7919%151936), lp(i)
	}
	for g := range groups {
		gid := fmt.Sprintf("g%05d", g)
		r.group(gid, "t1", attempts, events.PurposeTrain)
		for a := range attempts {
			aid := fmt.Sprintf("%s/a%d", gid, a)
			r.attempt(aid, gid, "")
			for n := range turns {
				r.add("engine", &events.TurnGenerated{Attempt: aid, Turn: n, VersionSegments: events.SingleVersion(0), PromptTokens: 4000,
					CompletionTokens: tokens, TokenIDs: ids, Logprobs: lps, Finish: events.FinishToolCall, LatencyMS: 900})
			}
			r.finished(aid).reward(aid, a%2 == 0, a%4, 4)
		}
	}
	recs := r.records()
	last := recs[len(recs)-1]
	before := NewMemStore()
	f := NewFold(testRun)
	for _, rec := range recs[:len(recs)-1] {
		if _, err := f.Apply(before, rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var samples int
	for b.Loop() {
		b.StopTimer()
		s := before.Clone()
		f := NewFold(testRun)
		b.StartTimer()
		ds, err := f.Apply(s, last)
		if err != nil {
			b.Fatal(err)
		}
		samples = 0
		for _, d := range ds {
			samples += len(d.Samples)
		}
		if samples == 0 {
			b.Fatal("the last record sealed nothing")
		}
	}
	total := float64(groups * attempts * turns * tokens)
	b.ReportMetric(float64(samples)/total, "sample-bytes/token")
	b.ReportMetric(total/(b.Elapsed().Seconds()/float64(b.N)), "tokens/s")
}
