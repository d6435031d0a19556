package events

import (
	"errors"
	"fmt"
)

// Advantage estimators (DESIGN.md §5, rule 5).
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
func (rc RunConfig) Resolve() Config {
	c := DefaultConfig()
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

// Validate reports every problem of the run's configuration at once, each
// naming its field, joined with errors.Join.
func (rc RunConfig) Validate() error {
	var errs []error
	if rc.PassBand != nil && len(rc.PassBand) != 2 {
		errs = append(errs, fieldErr("data.config.pass_band", ErrInvalidValue, "want [low, high], got %d numbers", len(rc.PassBand)))
	}
	return errors.Join(append(errs, rc.Resolve().Validate())...)
}

// Validate reports every problem of an effective configuration at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldErr("data.config."+field, ErrInvalidValue, format, args...))
	}
	if c.GroupSize < 1 {
		bad("group_size", "must be at least 1, got %d", c.GroupSize)
	}
	if c.BatchGroups < 1 {
		bad("batch_groups", "must be at least 1, got %d", c.BatchGroups)
	}
	if c.MinGroup < 1 || c.MinGroup > c.GroupSize {
		bad("min_group", "must be between 1 and group_size %d, got %d", c.GroupSize, c.MinGroup)
	}
	if c.MaxStaleness < 0 {
		bad("max_staleness", "must be at least 0, got %d", c.MaxStaleness)
	}
	if lo, hi := c.PassBand[0], c.PassBand[1]; lo < 0 || hi > 1 || lo > hi {
		bad("pass_band", "want 0 <= low <= high <= 1, got [%g, %g]", lo, hi)
	}
	if c.MinProbes < 1 {
		bad("min_probes", "must be at least 1, got %d", c.MinProbes)
	}
	if c.EfficiencyWeight < 0 || c.EfficiencyWeight >= 2 {
		bad("efficiency_weight", "must be in [0, 2), got %g", c.EfficiencyWeight)
	}
	// Rule 4: every passed attempt must out-earn every failed one, so the
	// largest partial credit stays below the smallest shaped full solve.
	if limit := 1 - c.EfficiencyWeight/2; c.PartialCreditCap < 0 || c.PartialCreditCap >= limit {
		bad("partial_credit_cap", "must be in [0, 1 − efficiency_weight/2) = [0, %g), got %g", limit, c.PartialCreditCap)
	}
	switch c.Advantage {
	case AdvantageGRPO, AdvantageGRPOStd, AdvantageRLOO:
	default:
		bad("advantage", "must be grpo, grpo_std or rloo, got %q", c.Advantage)
	}
	return errors.Join(errs...)
}

func (rs *RunStarted) validate() *FieldError {
	if err := rs.Config.Validate(); err != nil {
		// Report the first problem as the field error, all of them in words.
		var first *FieldError
		if fe, ok := AsFieldError(err); ok {
			first = fe
		} else {
			first = fieldErr("data.config", ErrInvalidValue, "")
		}
		return &FieldError{Field: first.Field, Err: ErrInvalidValue, Detail: fmt.Sprint(joinDetails(err))}
	}
	return nil
}

// joinDetails flattens an errors.Join of field errors into one sentence.
func joinDetails(err error) string {
	var parts []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range j.Unwrap() {
				walk(inner)
			}
			return
		}
		if fe, ok := e.(*FieldError); ok {
			parts = append(parts, fe.Field+": "+fe.Detail)
			return
		}
		parts = append(parts, e.Error())
	}
	walk(err)
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += "; "
		}
		out += p
	}
	return out
}
