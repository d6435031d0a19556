package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Overrides are what-if settings of a run's configuration (docs/design.md §4),
// parsed from "key=value,key=value".
type Overrides struct {
	// Settings are the overrides as given, normalized ("max_staleness=3").
	Settings []string
	apply    []func(*events.Config)
}

// Apply sets the overrides on cfg.
func (o Overrides) Apply(cfg *events.Config) {
	for _, f := range o.apply {
		f(cfg)
	}
}

// ParseOverrides parses "key=value,..." over the keys of the run config:
// group_size, batch_groups, min_group, max_staleness, min_probes (integers),
// pass_band (low:high), enforce_admission (true or false),
// partial_credit_cap, efficiency_weight (numbers) and advantage (grpo,
// grpo_std or rloo). Every problem is reported at once.
func ParseOverrides(s string) (Overrides, error) {
	var o Overrides
	var errs []error
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || val == "" {
			errs = append(errs, fmt.Errorf("replay: what-if %q: want key=value", part))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("replay: what-if: %s given twice", key))
			continue
		}
		seen[key] = true
		f, err := override(key, val)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.Settings = append(o.Settings, key+"="+val)
		o.apply = append(o.apply, f)
	}
	if len(errs) == 0 && len(o.apply) == 0 {
		errs = append(errs, errors.New("replay: what-if: no settings given"))
	}
	return o, errors.Join(errs...)
}

func override(key, val string) (func(*events.Config), error) {
	bad := func(want string) error { return fmt.Errorf("replay: what-if %s=%s: want %s", key, val, want) }
	integer := func(set func(*events.Config, int)) (func(*events.Config), error) {
		n, err := strconv.Atoi(val)
		if err != nil {
			return nil, bad("an integer")
		}
		return func(c *events.Config) { set(c, n) }, nil
	}
	number := func(set func(*events.Config, float64)) (func(*events.Config), error) {
		x, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, bad("a number")
		}
		return func(c *events.Config) { set(c, x) }, nil
	}
	switch key {
	case "group_size":
		return integer(func(c *events.Config, n int) { c.GroupSize = n })
	case "batch_groups":
		return integer(func(c *events.Config, n int) { c.BatchGroups = n })
	case "min_group":
		return integer(func(c *events.Config, n int) { c.MinGroup = n })
	case "max_staleness":
		return integer(func(c *events.Config, n int) { c.MaxStaleness = n })
	case "min_probes":
		return integer(func(c *events.Config, n int) { c.MinProbes = n })
	case "partial_credit_cap":
		return number(func(c *events.Config, x float64) { c.PartialCreditCap = x })
	case "efficiency_weight":
		return number(func(c *events.Config, x float64) { c.EfficiencyWeight = x })
	case "pass_band":
		lo, hi, ok := strings.Cut(val, ":")
		l, err1 := strconv.ParseFloat(lo, 64)
		h, err2 := strconv.ParseFloat(hi, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, bad("low:high, e.g. 0.2:0.8")
		}
		return func(c *events.Config) { c.PassBand = [2]float64{l, h} }, nil
	case "enforce_admission":
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, bad("true or false")
		}
		return func(c *events.Config) { c.EnforceAdmission = b }, nil
	case "advantage":
		switch val {
		case events.AdvantageGRPO, events.AdvantageGRPOStd, events.AdvantageRLOO:
			return func(c *events.Config) { c.Advantage = val }, nil
		}
		return nil, bad("grpo, grpo_std or rloo")
	}
	return nil, fmt.Errorf("replay: what-if: unknown setting %q (want group_size, batch_groups, min_group, max_staleness, pass_band, min_probes, enforce_admission, partial_credit_cap, efficiency_weight or advantage)", key)
}

// WhatIfResult is a run re-folded under other settings, step by step
// against what was recorded.
type WhatIfResult struct {
	Run       string   `json:"run"`
	Overrides []string `json:"overrides"`
	// Recorded is the run's configuration; WhatIf the one folded under.
	Recorded events.Config `json:"recorded_config"`
	WhatIf   events.Config `json:"what_if_config"`
	Steps    []StepDiff    `json:"steps"`
	// Totals sum the steps of each side.
	RecordedTotal StepSummary `json:"recorded_total"`
	WhatIfTotal   StepSummary `json:"what_if_total"`
	// Manifests are the what-if batches, in order.
	Manifests []projections.Manifest `json:"-"`
}

// StepDiff sets a step's recorded batch against the what-if one. Either
// may be missing when one side sealed fewer batches.
type StepDiff struct {
	Step     uint64       `json:"step"`
	Recorded *StepSummary `json:"recorded,omitempty"`
	WhatIf   *StepSummary `json:"what_if,omitempty"`
	// Same says the two manifests have the same digest: the same batch,
	// byte for byte, samples included.
	Same bool `json:"same"`
	// GroupsGained are in the what-if batch only, GroupsLost in the
	// recorded one only; the turn deltas are what-if minus recorded.
	GroupsGained      []string `json:"groups_gained"`
	GroupsLost        []string `json:"groups_lost"`
	TurnsDelta        int      `json:"turns_delta"`
	TrainedTurnsDelta int      `json:"trained_turns_delta"`
}

// StepSummary is what a batch (or a run's batches) held.
type StepSummary struct {
	Batches        int                     `json:"batches,omitempty"`
	Groups         int                     `json:"groups"`
	Attempts       int                     `json:"attempts"`
	Turns          int                     `json:"turns"`
	TrainedTurns   int                     `json:"trained_turns"`
	MaskedFraction float64                 `json:"masked_fraction"`
	Solves         int                     `json:"solves"`
	PassRate       float64                 `json:"pass_rate"`
	TokensPerSolve float64                 `json:"tokens_per_solve"`
	Dropped        projections.NamedCounts `json:"dropped"`
	Digest         string                  `json:"digest,omitempty"`
	solveTokens    int64
}

func summarize(m *projections.Manifest) *StepSummary {
	s := &StepSummary{Groups: len(m.Groups), Digest: m.Digest}
	drops := map[string]int{}
	for _, d := range m.Dropped {
		drops[d.Reason]++
	}
	for _, r := range slices.Sorted(maps.Keys(drops)) {
		s.Dropped = append(s.Dropped, projections.NamedCount{Name: r, N: drops[r]})
	}
	for _, g := range m.Groups {
		for _, a := range g.Attempts {
			s.Attempts++
			if a.Score == 1 {
				s.Solves++
				s.solveTokens += a.CompletionTokens
			}
			for _, t := range a.Turns {
				s.Turns++
				if t.Trained {
					s.TrainedTurns++
				}
			}
		}
	}
	s.finish()
	return s
}

func (s *StepSummary) finish() {
	s.MaskedFraction, s.PassRate, s.TokensPerSolve = 0, 0, 0
	if s.Turns > 0 {
		s.MaskedFraction = float64(s.Turns-s.TrainedTurns) / float64(s.Turns)
	}
	if s.Attempts > 0 {
		s.PassRate = float64(s.Solves) / float64(s.Attempts)
	}
	if s.Solves > 0 {
		s.TokensPerSolve = float64(s.solveTokens) / float64(s.Solves)
	}
}

func (s *StepSummary) add(o *StepSummary) {
	s.Batches++
	s.Groups += o.Groups
	s.Attempts += o.Attempts
	s.Turns += o.Turns
	s.TrainedTurns += o.TrainedTurns
	s.Solves += o.Solves
	s.solveTokens += o.solveTokens
	for _, d := range o.Dropped {
		i, found := slices.BinarySearchFunc(s.Dropped, d.Name, func(n projections.NamedCount, k string) int { return cmp.Compare(n.Name, k) })
		if found {
			s.Dropped[i].N += d.N
		} else {
			s.Dropped = slices.Insert(s.Dropped, i, d)
		}
	}
	s.finish()
}

// WhatIf re-folds src's facts with the overrides applied to the run's
// configuration and compares the batches with the recorded ones.
func WhatIf(ctx context.Context, src Source, o Overrides) (*WhatIfResult, error) {
	res := &WhatIfResult{Run: src.Run(), Overrides: o.Settings}
	// The recorded batches, and the run's configuration as its decisions
	// recorded it, not this build's defaults (docs/design.md §4.3), for
	// the overrides to go over: one pass over the decisions.
	var recorded []projections.Manifest
	decided, rules, err := decidedConfig(ctx, src, func(r Recorded, d decisionInfo) error {
		if d.Type != projections.KindBatchSealed {
			return nil
		}
		m, err := projections.ManifestOf(r.Value)
		if err != nil {
			return err
		}
		// Re-emissions repeat a seq; the first stands.
		if m.Seq == uint64(len(recorded))+1 {
			recorded = append(recorded, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res.Recorded, err = effectiveConfig(ctx, src, decided); err != nil {
		return nil, err
	}
	res.WhatIf = res.Recorded
	o.Apply(&res.WhatIf)
	if err := res.WhatIf.Validate(); err != nil {
		return nil, fmt.Errorf("replay: the what-if config is invalid: %w", err)
	}
	// Batches are compared by their digests, which cover the samples: the
	// samples themselves are not kept.
	fold := projections.NewFoldWith(src.Run(), projections.FoldOptions{Config: o.Apply, Recorded: decided, RuleVersion: rules, NoSamples: true})
	store, err := openScratch("", src)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	err = factsOf(ctx, src, func(f Fact) error {
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			return fmt.Errorf("replay: fold fact %d: %w", f.Seq, err)
		}
		for _, d := range ds {
			if d.Kind == projections.KindBatchSealed {
				m, err := projections.ManifestOf(d.Value)
				if err != nil {
					return err
				}
				res.Manifests = append(res.Manifests, m)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range max(len(recorded), len(res.Manifests)) {
		sd := StepDiff{Step: uint64(i + 1), GroupsGained: []string{}, GroupsLost: []string{}}
		var rec, wif *projections.Manifest
		if i < len(recorded) {
			rec = &recorded[i]
			sd.Recorded = summarize(rec)
			res.RecordedTotal.add(sd.Recorded)
		}
		if i < len(res.Manifests) {
			wif = &res.Manifests[i]
			sd.WhatIf = summarize(wif)
			res.WhatIfTotal.add(sd.WhatIf)
		}
		sd.Same = rec != nil && wif != nil && rec.Digest == wif.Digest
		in := func(m *projections.Manifest) map[string]bool {
			out := map[string]bool{}
			if m != nil {
				for _, g := range m.Groups {
					out[g.Group] = true
				}
			}
			return out
		}
		ri, wi := in(rec), in(wif)
		for _, g := range slices.Sorted(maps.Keys(wi)) {
			if !ri[g] {
				sd.GroupsGained = append(sd.GroupsGained, g)
			}
		}
		for _, g := range slices.Sorted(maps.Keys(ri)) {
			if !wi[g] {
				sd.GroupsLost = append(sd.GroupsLost, g)
			}
		}
		if sd.Recorded != nil && sd.WhatIf != nil {
			sd.TurnsDelta = sd.WhatIf.Turns - sd.Recorded.Turns
			sd.TrainedTurnsDelta = sd.WhatIf.TrainedTurns - sd.Recorded.TrainedTurns
		}
		res.Steps = append(res.Steps, sd)
	}
	return res, nil
}

// effectiveConfig is the configuration the run's run.started resolves to
// over base (the recorded configuration; the defaults when nil): the first
// one, valid, as the fold takes it; base otherwise.
func effectiveConfig(ctx context.Context, src Source, base *events.Config) (events.Config, error) {
	cfg := events.DefaultConfig()
	if base != nil {
		cfg = *base
	}
	onto := cfg
	err := src.Facts(ctx, func(f Fact) error {
		ev, ok := decodeIf(f, events.TypeRunStarted)
		if !ok {
			return nil
		}
		if c := ev.Data.(*events.RunStarted).Config.ResolveOnto(onto); c.Validate() == nil {
			cfg = c
		}
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return cfg, err
	}
	return cfg, nil
}

func sortCounts(c []projections.Count) {
	slices.SortFunc(c, func(a, b projections.Count) int { return cmp.Compare(a.Value, b.Value) })
}
