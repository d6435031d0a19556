package simulate

import (
	"math"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func mustGenerate(t testing.TB, o Options, run string) *Plan {
	t.Helper()
	p, err := Generate(o, run)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return p
}

// checkDecodes pushes every event of p through the strict decoder, in
// requests of 256 per stream, as the ingest server would see them.
func checkDecodes(t *testing.T, p *Plan) {
	t.Helper()
	for _, s := range p.Streams {
		for lo := 0; lo < len(s.Events); lo += 256 {
			evs := s.Events[lo:min(lo+256, len(s.Events))]
			recs, err := events.EncodeBatch(evs)
			if err != nil {
				t.Fatalf("stream %s: EncodeBatch: %v", s.Producer, err)
			}
			body, n := joinRecords(recs)
			if n != len(recs) {
				t.Fatalf("stream %s: %d of %d records fit a request", s.Producer, n, len(recs))
			}
			got, err := events.DecodeBatch(body)
			if err != nil {
				fe, _ := events.AsFieldError(err)
				t.Fatalf("stream %s: DecodeBatch: %v (event %s)", s.Producer, err, evs[fe.Index].Type)
			}
			for i, ev := range got {
				if ev.ID != evs[i].ID || ev.Source != s.Producer || ev.Run != p.Run {
					t.Fatalf("stream %s event %d: id %s source %s run %s, want %s %s %s",
						s.Producer, lo+i, ev.ID, ev.Source, ev.Run, evs[i].ID, s.Producer, p.Run)
				}
			}
		}
	}
}

func TestGenerateValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"default", Options{Seed: 1}},
		{"tokens", Options{Seed: 2, Tasks: 4, Steps: 1, BatchGroups: 2, MaxTurns: 20, Tokens: true}},
		{"failures", Options{Seed: 3, Tasks: 16, Steps: 2, MaxTurns: 40, InfraFailureRate: 0.4}},
		{"tiny", Options{Seed: 4, Tasks: 2, Steps: 1, BatchGroups: 1, GroupSize: 2, MinTurns: 1, MaxTurns: 2, ContextBudget: 4096}},
		{"no failures", Options{Seed: 5, Tasks: 8, Steps: 1, MaxTurns: 40, InfraFailureRate: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustGenerate(t, tc.o, "sim-test")
			checkDecodes(t, p)
			if first := p.Streams[0].Events[0]; p.Streams[0].Producer != scheduler || first.Type != events.TypeRunStarted {
				t.Errorf("first event: %s from %s, want run.started from the scheduler", first.Type, p.Streams[0].Producer)
			}
			if all := p.All(); len(all) != p.Len() || all[0].Type != events.TypeRunStarted {
				t.Errorf("All: %d events starting with %s, want %d starting with run.started", len(all), all[0].Type, p.Len())
			}
			checkStreamOrder(t, p)
		})
	}
}

// checkStreamOrder checks causality inside each stream and that `at` never
// goes back in a stream or in All.
func checkStreamOrder(t *testing.T, p *Plan) {
	t.Helper()
	for _, s := range p.Streams {
		started := map[string]bool{}
		done := map[string]bool{}
		nextTurn := map[string]int{}
		for i, ev := range s.Events {
			if i > 0 && ev.At.Before(s.Events[i-1].At) {
				t.Fatalf("stream %s: event %d at %s before %s", s.Producer, i, ev.At, s.Events[i-1].At)
			}
			switch d := ev.Data.(type) {
			case *events.AttemptStarted:
				started[d.Attempt] = true
			case *events.TurnGenerated:
				if !started[d.Attempt] || done[d.Attempt] || d.Turn != nextTurn[d.Attempt] {
					t.Fatalf("stream %s: turn %d of %s out of order", s.Producer, d.Turn, d.Attempt)
				}
				nextTurn[d.Attempt]++
			case *events.ToolCalled:
				if d.Turn != nextTurn[d.Attempt]-1 || done[d.Attempt] {
					t.Fatalf("stream %s: tool call of turn %d of %s out of order", s.Producer, d.Turn, d.Attempt)
				}
			case *events.ContextCompacted:
				if d.Turn != nextTurn[d.Attempt]-1 || done[d.Attempt] {
					t.Fatalf("stream %s: compaction after turn %d of %s out of order", s.Producer, d.Turn, d.Attempt)
				}
			case *events.AttemptFinished:
				done[d.Attempt] = true
			case *events.AttemptFailed:
				done[d.Attempt] = true
			}
		}
	}
	all := p.All()
	for i := 1; i < len(all); i++ {
		if all[i].At.Before(all[i-1].At) {
			t.Fatalf("All: event %d at %s before %s", i, all[i].At, all[i-1].At)
		}
	}
}

func TestGenerateDeterministic(t *testing.T) {
	o := Options{Seed: 7, Tasks: 16, Steps: 2}
	a := planStreams(t, mustGenerate(t, o, "r1"), false)
	b := planStreams(t, mustGenerate(t, o, "r1"), false)
	if d := diffStreams(a, b); d != "" {
		t.Fatalf("same seed, different content: %s", d)
	}
	// Transport options do not change content.
	o2 := o
	o2.Workers, o2.EventsPerRequest, o2.URL = 3, 17, "http://ledger.example:8080"
	if d := diffStreams(a, planStreams(t, mustGenerate(t, o2, "r1"), false)); d != "" {
		t.Fatalf("transport options changed content: %s", d)
	}
	o3 := o
	o3.Seed = 8
	if d := diffStreams(a, planStreams(t, mustGenerate(t, o3, "r1"), false)); d == "" {
		t.Fatal("seeds 7 and 8 generated the same content")
	}
}

// TestGenerateTokensAddOnly checks that inline tokens are drawn apart from
// everything else: a run with tokens is the run without, plus the arrays.
func TestGenerateTokensAddOnly(t *testing.T) {
	o := Options{Seed: 9, Tasks: 8, Steps: 1, MaxTurns: 40}
	plain := mustGenerate(t, o, "r")
	o.Tokens = true
	tok := mustGenerate(t, o, "r")
	if plain.Len() != tok.Len() {
		t.Fatalf("%d events without tokens, %d with", plain.Len(), tok.Len())
	}
	turns := 0
	for si, s := range tok.Streams {
		for i, ev := range s.Events {
			if d, ok := ev.Data.(*events.TurnGenerated); ok {
				turns++
				if int64(len(d.TokenIDs)) != d.CompletionTokens || len(d.Logprobs) != len(d.TokenIDs) {
					t.Fatalf("turn %d of %s: %d token ids, %d logprobs for %d completion tokens", d.Turn, d.Attempt, len(d.TokenIDs), len(d.Logprobs), d.CompletionTokens)
				}
				near := 0
				for _, lp := range d.Logprobs {
					if lp > 0 {
						t.Fatalf("positive logprob %v", lp)
					}
					if lp > -0.1 {
						near++
					}
				}
				if near*2 < len(d.Logprobs) {
					t.Errorf("turn %d of %s: only %d of %d logprobs near 0", d.Turn, d.Attempt, near, len(d.Logprobs))
				}
				if (d.Turn > 0) != (len(d.ObservationTokenIDs) > 0) {
					// Even a refused call leaves the harness's message.
					t.Errorf("turn %d of %s: %d observation tokens", d.Turn, d.Attempt, len(d.ObservationTokenIDs))
				}
				c := *d
				c.TokenIDs, c.Logprobs, c.ObservationTokenIDs = nil, nil, nil
				ev.Data = &c
			}
			if got, want := blanked(t, ev, false), blanked(t, plain.Streams[si].Events[i], false); got != want {
				t.Fatalf("stream %s event %d differs beyond the token arrays:\n  %s\n  %s", s.Producer, i, got, want)
			}
		}
	}
	if turns == 0 {
		t.Fatal("no turns")
	}
}

func TestGenerateRejects(t *testing.T) {
	if _, err := Generate(Options{}, "not a run id"); err == nil {
		t.Error("Generate accepted a run id with spaces")
	}
	if _, err := Generate(Options{Tasks: -1}, "r"); err == nil {
		t.Error("Generate accepted Tasks -1")
	}
}

func TestValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero options: %v", err)
	}
	ok := Options{URL: "https://ledger:7070/", Run: "r-1", Tasks: 3, Steps: 2, BatchGroups: 2, GroupSize: 2, Workers: 1,
		MinTurns: 1, MaxTurns: 1, InfraFailureRate: 1, ContextBudget: 4096, EventsPerRequest: 1, Token: "abc.DEF-123"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	bad := Options{
		URL: "ftp://x", Run: "a b", Tasks: -1, Steps: -1, BatchGroups: -2, GroupSize: 1, Workers: -1,
		MinTurns: 50, MaxTurns: 10, InfraFailureRate: 1.5, ContextBudget: 100, EventsPerRequest: -3, Token: "a\nb",
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted everything wrong")
	}
	joined, ok2 := err.(interface{ Unwrap() []error })
	if !ok2 {
		t.Fatalf("Validate returned %T, want an errors.Join", err)
	}
	for _, want := range []string{"url", "run", "tasks", "steps", "batch_groups", "group_size", "workers",
		"min_turns 50 exceeds max_turns 10", "infra_failure_rate", "context_budget", "events_per_request", "token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: no problem mentions %q in:\n%v", want, err)
		}
	}
	if n := len(joined.Unwrap()); n != 12 {
		t.Errorf("Validate: %d problems, want 12:\n%v", n, err)
	}
	if strings.Contains(err.Error(), "a\nb") {
		t.Error("Validate echoed the token")
	}
	if err := (Options{MinTurns: 300}).Validate(); err == nil {
		t.Error("MinTurns 300 above the default MaxTurns 200 accepted")
	}
	if err := (Options{InfraFailureRate: math.NaN()}).Validate(); err == nil || !strings.Contains(err.Error(), "infra_failure_rate") {
		t.Errorf("NaN failure rate: %v", err)
	}
}
