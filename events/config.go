package events

import (
	"errors"
	"reflect"
)

// Advantage estimators (docs/design.md §6.5, rule 5).
const (
	AdvantageGRPO    = "grpo"     // r − mean
	AdvantageGRPOStd = "grpo_std" // (r − mean)/(std + 1e-6)
	AdvantageRLOO    = "rloo"     // r_i − mean of the others
)

// RunConfig is the projection configuration a run declares in run.started.
// Every field is optional: an absent field takes the documented default, and
// an explicit zero (efficiency_weight 0, say) is kept as given, which is why
// the fields are pointers. [RunConfig.Resolve] gives the effective values.
type RunConfig struct {
	GroupSize        *int      `json:"group_size,omitempty"`
	BatchGroups      *int      `json:"batch_groups,omitempty"`
	MinGroup         *int      `json:"min_group,omitempty"`
	MaxStaleness     *int      `json:"max_staleness,omitempty"`
	PassBand         []float64 `json:"pass_band,omitempty" rl:"optional,max=1"`
	MinProbes        *int      `json:"min_probes,omitempty"`
	EnforceAdmission *bool     `json:"enforce_admission,omitempty"`
	PartialCreditCap *float64  `json:"partial_credit_cap,omitempty" rl:"max=1"`
	EfficiencyWeight *float64  `json:"efficiency_weight,omitempty"`
	Advantage        *string   `json:"advantage,omitempty" rl:"enum=grpo|grpo_std|rloo"`
}

// Config is a run's effective projection configuration, every default
// applied. Its zero value is not meaningful: build it with
// [RunConfig.Resolve] or [DefaultConfig].
type Config struct {
	GroupSize        int        `json:"group_size"`
	BatchGroups      int        `json:"batch_groups"`
	MinGroup         int        `json:"min_group"`
	MaxStaleness     int        `json:"max_staleness"`
	PassBand         [2]float64 `json:"pass_band"`
	MinProbes        int        `json:"min_probes"`
	EnforceAdmission bool       `json:"enforce_admission"`
	PartialCreditCap float64    `json:"partial_credit_cap"`
	EfficiencyWeight float64    `json:"efficiency_weight"`
	Advantage        string     `json:"advantage"`
}

// DefaultConfig is the configuration of a run that sets nothing.
func DefaultConfig() Config {
	return Config{
		GroupSize:        8,
		BatchGroups:      64,
		MinGroup:         2,
		MaxStaleness:     6,
		PassBand:         [2]float64{0.15, 0.85},
		MinProbes:        4,
		EnforceAdmission: true,
		PartialCreditCap: 0.5,
		EfficiencyWeight: 0.1,
		Advantage:        AdvantageGRPO,
	}
}

// Resolve applies the defaults to every field the run left out.
func (rc RunConfig) Resolve() Config { return rc.ResolveOnto(DefaultConfig()) }

// ResolveOnto applies the fields the run set onto base: the configuration
// of a run whose left-out fields take base's values. Replay resolves a run
// onto the configuration its decisions recorded, so a later build's
// defaults cannot change an old run.
func (rc RunConfig) ResolveOnto(base Config) Config {
	c := base
	if rc.GroupSize != nil {
		c.GroupSize = *rc.GroupSize
	}
	if rc.BatchGroups != nil {
		c.BatchGroups = *rc.BatchGroups
	}
	if rc.MinGroup != nil {
		c.MinGroup = *rc.MinGroup
	}
	if rc.MaxStaleness != nil {
		c.MaxStaleness = *rc.MaxStaleness
	}
	if len(rc.PassBand) == 2 {
		c.PassBand = [2]float64{rc.PassBand[0], rc.PassBand[1]}
	}
	if rc.MinProbes != nil {
		c.MinProbes = *rc.MinProbes
	}
	if rc.EnforceAdmission != nil {
		c.EnforceAdmission = *rc.EnforceAdmission
	}
	if rc.PartialCreditCap != nil {
		c.PartialCreditCap = *rc.PartialCreditCap
	}
	if rc.EfficiencyWeight != nil {
		c.EfficiencyWeight = *rc.EfficiencyWeight
	}
	if rc.Advantage != nil {
		c.Advantage = *rc.Advantage
	}
	return c
}

// configRules are the rules of a run's configuration, on its effective
// values: an absent field is checked as its default. Rule 4 (every passed
// attempt must out-earn every failed one) is the bound of
// partial_credit_cap: the largest partial credit stays below the smallest
// shaped full solve.
var configRules = []rule{
	{Field: "pass_band", Length: num(2), Message: "want [low, high], got {$len} numbers"},
	{Field: "group_size", Minimum: num(1), Message: "must be at least 1, got {group_size}"},
	{Field: "batch_groups", Minimum: num(1), Message: "must be at least 1, got {batch_groups}"},
	{Field: "min_group", Minimum: num(1), Maximum: ref("group_size"), Message: "must be between 1 and group_size {group_size}, got {min_group}"},
	{Field: "max_staleness", Minimum: num(0), Message: "must be at least 0, got {max_staleness}"},
	{Field: "pass_band", Interval: &[2]float64{0, 1}, Message: "want 0 <= low <= high <= 1, got {pass_band}"},
	{Field: "min_probes", Minimum: num(1), Message: "must be at least 1, got {min_probes}"},
	{Field: "efficiency_weight", Minimum: num(0), ExclusiveMaximum: num(2), Message: "must be in [0, 2), got {efficiency_weight}"},
	{
		Field: "partial_credit_cap", Minimum: num(0), ExclusiveMaximum: linear("efficiency_weight", -0.5, 1),
		Message: "must be in [0, 1 − efficiency_weight/2) = [0, {$exclusiveMaximum}), got {partial_credit_cap}",
	},
	{Field: "advantage", Enum: []string{AdvantageGRPO, AdvantageGRPOStd, AdvantageRLOO}, Message: "must be grpo, grpo_std or rloo, got {advantage}"},
}

// A run's configuration reports all of its problems at once; the fields
// it leaves out are checked as their defaults.
func (*RunConfig) ruleSet() ruleSet {
	return ruleSet{rules: configRules, all: true, defaults: DefaultConfig()}
}

func (*Config) ruleSet() ruleSet { return ruleSet{rules: configRules, all: true} }

// Validate reports every problem of the run's configuration at once, each
// naming its field, joined with errors.Join.
func (rc RunConfig) Validate() error {
	return validateAll(reflect.ValueOf(rc))
}

// Validate reports every problem of an effective configuration at once.
func (c Config) Validate() error {
	return validateAll(reflect.ValueOf(c))
}

func validateAll(rv reflect.Value) error {
	errs := specOf(rv.Type()).rules.check(rv, "data.config", true)
	out := make([]error, len(errs))
	for i, fe := range errs {
		out[i] = fe
	}
	return errors.Join(out...)
}
