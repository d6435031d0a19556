package projections

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/rolloutledger/rolloutledger/events"
)

// The audit projection (docs/design.md §14.8): a second pure fold, over a run's
// facts and the decisions the batch fold concluded from them, that
// measures what the recipe asks to observe — drop rates, staleness and
// masking, pass rate and tokens per solve per step, the trainer's log-prob
// gap and truncation, tools, compaction and microVM fork time — and lists
// every finding with its position.
//
// Feed it every record of the run in log order with [Audit.Fact], each
// followed by the decisions that record caused, with [Audit.Decision]. Its
// memory is bounded by the run's steps and tools and by the attempts of
// groups not yet in a batch (their turns' token counts, for the
// masked-token fraction); it is not kept in a Store and a restart starts it
// over.

// Reference figures of the recipe (the public FireFlash write-up) that the
// audit report sets the run against.
const (
	RefZeroSignalRate = 0.102 // share of completed train groups dropped as zero_signal
	RefInfraLostRate  = 0.005 // share lost to infrastructure
	RefTruncatedLow   = 0.01  // tokens truncated by importance sampling: 1–3%
	RefTruncatedHigh  = 0.03
)

// RefLogprobGap is the recipe's trainer-to-rollout log-prob gap by
// staleness: 0.065 at 1, 0.08 at 4–6.
var RefLogprobGap = map[int]float64{1: 0.065, 4: 0.08, 5: 0.08, 6: 0.08}

// Audit accumulates the audit report of one run. Its zero value is not
// usable; use [NewAudit].
type Audit struct {
	r AuditReport

	steps map[uint64]*StepAudit
	// gradients holds the first gradient.applied of each batch, until or
	// after its batch is sealed.
	gradients map[uint64]*events.GradientApplied
	tools     map[string]*ToolStats
	forkMS    map[int64]int
	staleness map[int64]int
	drops     map[string]int
	findings  map[string]int
	// seen holds the event id of every fact observed, as the fold's dedup
	// index does (docs/design.md §5.4): a record repeating an id is counted
	// as a fact and otherwise ignored, so a redelivered reward is one. It
	// grows with the run (some 2 GB at 50 M facts); a caller that folds the
	// facts passes the fold's own verdict instead ([Audit.FactFolded]),
	// and the audit then keeps none.
	seen map[[16]byte]struct{}
	// seenOther holds ids that are not UUIDs (the fold's own tests).
	seenOther map[string]struct{}

	// turnTokens keeps the completion tokens of each turn of attempts whose
	// group is not in a batch yet; groupAttempts the attempts of each train
	// group; purpose each group's purpose.
	turnTokens    map[string]map[int64]int64
	groupAttempts map[string][]string
	attemptGroup  map[string]string
	purpose       map[string]string
}

// AuditReport is what the audit found. Every list is in a fixed order, so
// the same run gives the same report byte for byte.
type AuditReport struct {
	Run   string `json:"run"`
	Facts uint64 `json:"facts"`
	// Tree is the head of the last batch or checkpoint observed; the
	// audit hashes nothing, so a caller that folds the facts sets the
	// final head.
	Tree TreeHead `json:"tree"`
	// FactsByType counts facts by type, in catalogue order; a record
	// repeating an earlier fact's event id is not counted again.
	FactsByType []TypeCount `json:"facts_by_type"`
	Undecodable int         `json:"undecodable"`

	Config events.Config `json:"config"`

	Steps []StepAudit `json:"steps"`

	// Train groups completed, and how many were dropped by reason, over
	// the batches sealed (their windows).
	GroupsUsed     int            `json:"groups_used"`
	GroupsDropped  map[string]int `json:"groups_dropped"`
	ZeroSignalRate float64        `json:"zero_signal_rate"`
	InfraLostRate  float64        `json:"infra_lost_rate"`
	UnadmittedRate float64        `json:"unadmitted_rate"`
	FullyStaleRate float64        `json:"fully_stale_rate"`

	// Staleness of every batched turn; masked turns and tokens.
	Staleness           []Count `json:"staleness"`
	Turns               int     `json:"turns"`
	MaskedTurns         int     `json:"masked_turns"`
	CompletionTokens    int64   `json:"completion_tokens"`
	MaskedTokens        int64   `json:"masked_tokens"`
	MaskedTokenFraction float64 `json:"masked_token_fraction"`

	PassRate       float64 `json:"pass_rate"`
	TokensPerSolve float64 `json:"tokens_per_solve"`

	// LogprobGap is the mean over steps of the trainer's reported gap at
	// each staleness; TruncatedFraction the mean over steps.
	LogprobGap        []Gap   `json:"logprob_gap"`
	TruncatedFraction float64 `json:"truncated_fraction"`
	GradientSteps     int     `json:"gradient_steps"`

	Attempts    AttemptStats `json:"attempts"`
	Tools       []ToolStats  `json:"tools"`
	ToolTotals  ToolStats    `json:"tool_totals"`
	Compaction  Compaction   `json:"compaction"`
	ForkMS      Quantiles    `json:"fork_ms"`
	Admitted    int          `json:"admitted"`
	Rejected    int          `json:"rejected"`
	Checkpoints int          `json:"checkpoints"`

	FindingsByKind NamedCounts     `json:"findings_by_kind"`
	Findings       []FindingRecord `json:"findings"`
}

// StepAudit is one sealed batch, the gradient step it feeds, and what the
// trainer reported of it.
type StepAudit struct {
	Step    uint64      `json:"step"`
	Fact    uint64      `json:"fact"` // the fact that sealed the batch
	Tree    TreeHead    `json:"tree"`
	Digest  string      `json:"digest"`
	Groups  int         `json:"groups"`
	Dropped NamedCounts `json:"dropped"`
	// Rates are of the groups completed in the batch's window (used plus
	// dropped).
	ZeroSignalRate float64 `json:"zero_signal_rate"`
	InfraLostRate  float64 `json:"infra_lost_rate"`
	UnadmittedRate float64 `json:"unadmitted_rate"`

	Attempts       int     `json:"attempts"`
	Solves         int     `json:"solves"`
	PassRate       float64 `json:"pass_rate"`
	TokensPerSolve float64 `json:"tokens_per_solve"`

	Turns               int     `json:"turns"`
	TrainedTurns        int     `json:"trained_turns"`
	MaskedTurnFraction  float64 `json:"masked_turn_fraction"`
	CompletionTokens    int64   `json:"completion_tokens"`
	MaskedTokens        int64   `json:"masked_tokens"`
	MaskedTokenFraction float64 `json:"masked_token_fraction"`
	Staleness           []Count `json:"staleness"`
	InFlight            []Count `json:"in_flight"`
	InQueue             []Count `json:"in_queue"`

	// From the trainer's gradient.applied for this batch, when reported.
	Trained           bool    `json:"trained"`
	Loss              float64 `json:"loss,omitempty"`
	TrainedTokens     int64   `json:"trained_tokens,omitempty"`
	TruncatedFraction float64 `json:"truncated_fraction,omitempty"`
	LogprobGap        []Gap   `json:"logprob_gap,omitempty"`
	DigestMatches     bool    `json:"digest_matches"`
}

// Count is a count at an integer value (a staleness, a version lag).
type Count struct {
	Value int64 `json:"value"`
	N     int   `json:"n"`
}

// NamedCount is a count under a name.
type NamedCount struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

// NamedCounts are counts by name, sorted by name.
type NamedCounts []NamedCount

// Get is the count under name, 0 if absent.
func (c NamedCounts) Get(name string) int {
	for _, n := range c {
		if n.Name == name {
			return n.N
		}
	}
	return 0
}

// TypeCount counts facts of one type.
type TypeCount struct {
	Type events.Type `json:"type"`
	N    int         `json:"n"`
}

// Gap is a mean log-prob gap at a staleness.
type Gap struct {
	Staleness int64   `json:"staleness"`
	Gap       float64 `json:"gap"`
}

// AttemptStats counts attempts by what became of them.
type AttemptStats struct {
	Started  int         `json:"started"`
	Retries  int         `json:"retries"`
	Finished NamedCounts `json:"finished"` // by outcome
	Failed   NamedCounts `json:"failed"`   // by reason: infrastructure
	Rewarded int         `json:"rewarded"`
	Passed   int         `json:"passed"`
}

// ToolStats are one tool's calls (or all tools', in ToolTotals).
type ToolStats struct {
	Tool        string  `json:"tool,omitempty"`
	Calls       int     `json:"calls"`
	Failures    int     `json:"failures"` // non-zero exit, not timed out
	Timeouts    int     `json:"timeouts"`
	ToFile      int     `json:"to_file"`
	Background  int     `json:"background"`
	DurationMS  int64   `json:"duration_ms"`
	OutputBytes int64   `json:"output_bytes"`
	MeanMS      float64 `json:"mean_ms"`
}

// Compaction sums the run's context compactions.
type Compaction struct {
	Count        int     `json:"count"`
	TokensBefore int64   `json:"tokens_before"`
	TokensAfter  int64   `json:"tokens_after"`
	Savings      float64 `json:"savings"` // 1 − after/before
}

// Quantiles summarize a distribution of integers.
type Quantiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  int64   `json:"p50"`
	P95  int64   `json:"p95"`
	Max  int64   `json:"max"`
}

// FindingRecord is an audit.finding with the position of the fact that
// caused it.
type FindingRecord struct {
	Seq     uint64       `json:"seq"`
	Fact    FactPosition `json:"fact"`
	Finding Finding      `json:"finding"`
}

// NewAudit returns the audit of run.
func NewAudit(run string) *Audit {
	return &Audit{
		r:     AuditReport{Run: run, Config: events.DefaultConfig()},
		steps: map[uint64]*StepAudit{}, gradients: map[uint64]*events.GradientApplied{},
		tools: map[string]*ToolStats{}, forkMS: map[int64]int{}, staleness: map[int64]int{},
		drops: map[string]int{}, findings: map[string]int{},
		turnTokens: map[string]map[int64]int64{}, groupAttempts: map[string][]string{},
		attemptGroup: map[string]string{}, purpose: map[string]string{},
	}
}

// factTypeIndex places each fact type in FactsByType, in catalogue order.
var factTypeIndex = func() map[events.Type]int {
	m := map[events.Type]int{}
	for i, t := range events.FactTypes() {
		m[t] = i
	}
	return m
}()

// Fact observes the next record of the run. r.Event is used when set, else
// r.Value is decoded. The fact tree is the caller's: see [Audit.Decision].
func (a *Audit) Fact(r Record) {
	a.fact(r, nil)
}

// FactFolded observes the next record of the run as [Audit.Fact] does,
// with the verdict of a fold that applied it just before: repeated is
// [Fold.Repeat]. The audit then keeps no index of the ids it saw, so its
// memory does not grow with the run's facts; a caller must use one of
// Fact and FactFolded for all of a run.
func (a *Audit) FactFolded(r Record, repeated bool) {
	a.fact(r, &repeated)
}

func (a *Audit) fact(r Record, folded *bool) {
	a.r.Facts++
	ev := r.Event
	if ev.Type == "" {
		var err error
		if ev, err = events.Decode(r.Value); err != nil {
			a.r.Undecodable++
			return
		}
	}
	if folded != nil && *folded || folded == nil && a.repeated(ev.ID) {
		return
	}
	if a.r.FactsByType == nil {
		for _, t := range events.FactTypes() {
			a.r.FactsByType = append(a.r.FactsByType, TypeCount{Type: t})
		}
	}
	if i, ok := factTypeIndex[ev.Type]; ok {
		a.r.FactsByType[i].N++
	}
	switch d := ev.Data.(type) {
	case *events.RunStarted:
		if cfg := d.Config.Resolve(); cfg.Validate() == nil {
			a.r.Config = cfg
		}
	case *events.GroupStarted:
		a.purpose[d.Group] = d.Purpose
		if d.Purpose != events.PurposeTrain {
			a.forgetGroup(d.Group)
		}
	case *events.AttemptStarted:
		a.r.Attempts.Started++
		a.forkMS[d.ForkMS]++
		if d.RetryOf != "" {
			a.r.Attempts.Retries++
		}
		if p, ok := a.purpose[d.Group]; ok && p != events.PurposeTrain {
			delete(a.turnTokens, d.Attempt)
			return
		}
		a.attemptGroup[d.Attempt] = d.Group
		a.groupAttempts[d.Group] = append(a.groupAttempts[d.Group], d.Attempt)
	case *events.TurnGenerated:
		g, known := a.attemptGroup[d.Attempt]
		if p, ok := a.purpose[g]; known && ok && p != events.PurposeTrain {
			return
		}
		tt := a.turnTokens[d.Attempt]
		if tt == nil {
			tt = map[int64]int64{}
			a.turnTokens[d.Attempt] = tt
		}
		if _, dup := tt[int64(d.Turn)]; !dup {
			tt[int64(d.Turn)] = d.CompletionTokens
		}
	case *events.ToolCalled:
		a.tool(d)
	case *events.ContextCompacted:
		a.r.Compaction.Count++
		a.r.Compaction.TokensBefore += d.TokensBefore
		a.r.Compaction.TokensAfter += d.TokensAfter
	case *events.AttemptFinished:
		a.r.Attempts.Finished = addNamed(a.r.Attempts.Finished, d.Outcome)
	case *events.AttemptFailed:
		a.r.Attempts.Failed = addNamed(a.r.Attempts.Failed, d.Reason)
	case *events.RewardComputed:
		a.r.Attempts.Rewarded++
		if d.Passed {
			a.r.Attempts.Passed++
		}
	case *events.GradientApplied:
		if d.Batch < 1 {
			return
		}
		k := uint64(d.Batch)
		if _, ok := a.gradients[k]; ok {
			return
		}
		a.gradients[k] = d
		if st := a.steps[k]; st != nil {
			ApplyGradient(st, d)
		}
	}
}

// repeated records id and reports whether an earlier fact carried it.
// UUIDs are kept as their 16 bytes: the index has one entry per fact.
func (a *Audit) repeated(id string) bool {
	if a.seen == nil {
		a.seen, a.seenOther = map[[16]byte]struct{}{}, map[string]struct{}{}
	}
	if u, err := uuid.Parse(id); err == nil && len(id) == 36 {
		if _, ok := a.seen[u]; ok {
			return true
		}
		a.seen[u] = struct{}{}
		return false
	}
	if _, ok := a.seenOther[id]; ok {
		return true
	}
	a.seenOther[id] = struct{}{}
	return false
}

func (a *Audit) tool(d *events.ToolCalled) {
	t := a.tools[d.Tool]
	if t == nil {
		t = &ToolStats{Tool: d.Tool}
		a.tools[d.Tool] = t
	}
	for _, s := range []*ToolStats{t, &a.r.ToolTotals} {
		s.Calls++
		switch {
		case d.TimedOut:
			s.Timeouts++
		case d.ExitCode != 0:
			s.Failures++
		}
		if d.ToFile {
			s.ToFile++
		}
		if d.Background {
			s.Background++
		}
		s.DurationMS += d.DurationMS
		s.OutputBytes += d.OutputBytes
	}
}

// forgetGroup drops the token counts kept for a group's attempts.
func (a *Audit) forgetGroup(group string) {
	for _, att := range a.groupAttempts[group] {
		delete(a.turnTokens, att)
		delete(a.attemptGroup, att)
	}
	delete(a.groupAttempts, group)
}

// Decision observes a decision, after the record that caused it.
func (a *Audit) Decision(d Decision) error {
	var env Envelope
	if err := json.Unmarshal(d.Value, &env); err != nil {
		return fmt.Errorf("projections: audit: decision %s: %w", d.ID, err)
	}
	switch env.Type {
	case KindBatchSealed:
		var m Manifest
		if err := unmarshalData(env, &m); err != nil {
			return err
		}
		a.batch(env, &m)
	case KindAuditFinding:
		var f Finding
		if err := unmarshalData(env, &f); err != nil {
			return err
		}
		a.findings[f.Kind]++
		a.r.Findings = append(a.r.Findings, FindingRecord{Seq: d.Seq, Fact: env.Fact, Finding: f})
	case KindAuditCheckpoint:
		var cp Checkpoint
		if err := unmarshalData(env, &cp); err != nil {
			return err
		}
		a.r.Checkpoints++
		a.r.Tree = cp.Tree
	case KindTaskAdmitted:
		a.r.Admitted++
	case KindTaskRejected:
		a.r.Rejected++
	}
	return nil
}

func (a *Audit) batch(env Envelope, m *Manifest) {
	st := NewStepAudit(env.Fact.Seq, m, func(attempt string, turn int64) int64 { return a.turnTokens[attempt][turn] })
	a.r.Tree = m.Tree
	for _, d := range m.Dropped {
		a.drops[d.Reason]++
		a.forgetGroup(d.Group)
	}
	a.r.GroupsUsed += st.Groups
	for _, g := range m.Groups {
		for _, at := range g.Attempts {
			for _, t := range at.Turns {
				a.staleness[t.Staleness]++
			}
		}
		a.forgetGroup(g.Group)
	}
	if g, ok := a.gradients[m.Seq]; ok {
		ApplyGradient(&st, g)
	}
	a.steps[m.Seq] = &st
}

// NewStepAudit is the audit's figures of one sealed batch, before the
// trainer's gradient.applied ([ApplyGradient]): fact is the sequence
// number of the fact that sealed it, and tokens gives the completion
// tokens of an attempt's turn (0 when unknown). The audit report and the
// run explorer both make their steps with it, so their figures agree.
func NewStepAudit(fact uint64, m *Manifest, tokens func(attempt string, turn int64) int64) StepAudit {
	st := StepAudit{Step: m.Seq, Fact: fact, Tree: m.Tree, Digest: m.Digest, Groups: len(m.Groups)}
	drops := map[string]int{}
	for _, d := range m.Dropped {
		drops[d.Reason]++
	}
	st.Dropped = named(drops)
	if n := st.Groups + len(m.Dropped); n > 0 {
		st.ZeroSignalRate = float64(drops[DropZeroSignal]) / float64(n)
		st.InfraLostRate = float64(drops[DropInfraLost]) / float64(n)
		st.UnadmittedRate = float64(drops[DropUnadmitted]) / float64(n)
	}
	var solveTokens int64
	for _, g := range m.Groups {
		for _, at := range g.Attempts {
			st.Attempts++
			if at.Score == 1 {
				st.Solves++
				solveTokens += at.CompletionTokens
			}
			for _, t := range at.Turns {
				n := tokens(at.Attempt, t.Turn)
				st.Turns++
				st.CompletionTokens += n
				if t.Trained {
					st.TrainedTurns++
				} else {
					st.MaskedTokens += n
				}
			}
		}
	}
	st.PassRate = ratio(st.Solves, st.Attempts)
	if st.Solves > 0 {
		st.TokensPerSolve = float64(solveTokens) / float64(st.Solves)
	}
	st.MaskedTurnFraction = ratio(st.Turns-st.TrainedTurns, st.Turns)
	if st.CompletionTokens > 0 {
		st.MaskedTokenFraction = float64(st.MaskedTokens) / float64(st.CompletionTokens)
	}
	st.Staleness = counts(m.Stats.StalenessHistogram)
	st.InFlight = counts(m.Stats.InFlight)
	st.InQueue = counts(m.Stats.InQueue)
	return st
}

// ApplyGradient adds to a step what the trainer reported of it.
func ApplyGradient(st *StepAudit, g *events.GradientApplied) {
	st.Trained = true
	st.Loss, st.TrainedTokens, st.TruncatedFraction = g.Loss, g.TrainedTokens, g.TruncatedFraction
	st.DigestMatches = g.BatchDigest == st.Digest
	st.LogprobGap = nil
	for _, k := range slices.Sorted(maps.Keys(g.LogprobGap)) {
		s, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			continue
		}
		st.LogprobGap = append(st.LogprobGap, Gap{Staleness: s, Gap: g.LogprobGap[k]})
	}
	slices.SortFunc(st.LogprobGap, func(x, y Gap) int { return cmp.Compare(x.Staleness, y.Staleness) })
}

// Report returns the report of everything observed so far.
func (a *Audit) Report() AuditReport {
	r := a.r
	r.FactsByType = slices.Clone(r.FactsByType)
	r.Findings = slices.Clone(r.Findings)
	r.Steps = nil
	var solves, attempts int
	var solveTokens float64
	var truncSum float64
	gapSum, gapN := map[int64]float64{}, map[int64]int{}
	for _, k := range slices.Sorted(maps.Keys(a.steps)) {
		st := *a.steps[k]
		r.Steps = append(r.Steps, st)
		r.Turns += st.Turns
		r.MaskedTurns += st.Turns - st.TrainedTurns
		r.CompletionTokens += st.CompletionTokens
		r.MaskedTokens += st.MaskedTokens
		solves += st.Solves
		attempts += st.Attempts
		solveTokens += st.TokensPerSolve * float64(st.Solves)
		if st.Trained {
			r.GradientSteps++
			truncSum += st.TruncatedFraction
			for _, g := range st.LogprobGap {
				gapSum[g.Staleness] += g.Gap
				gapN[g.Staleness]++
			}
		}
	}
	r.GroupsDropped = maps.Clone(a.drops)
	completed := r.GroupsUsed
	for _, n := range a.drops {
		completed += n
	}
	r.ZeroSignalRate = ratio(a.drops[DropZeroSignal], completed)
	r.InfraLostRate = ratio(a.drops[DropInfraLost], completed)
	r.UnadmittedRate = ratio(a.drops[DropUnadmitted], completed)
	r.FullyStaleRate = ratio(a.drops[DropFullyStale], completed)
	r.Staleness = countsInt(a.staleness)
	if r.CompletionTokens > 0 {
		r.MaskedTokenFraction = float64(r.MaskedTokens) / float64(r.CompletionTokens)
	}
	r.PassRate = ratio(solves, attempts)
	if solves > 0 {
		r.TokensPerSolve = solveTokens / float64(solves)
	}
	if r.GradientSteps > 0 {
		r.TruncatedFraction = truncSum / float64(r.GradientSteps)
	}
	for _, s := range slices.Sorted(maps.Keys(gapSum)) {
		r.LogprobGap = append(r.LogprobGap, Gap{Staleness: s, Gap: gapSum[s] / float64(gapN[s])})
	}
	r.Tools = nil
	for _, name := range slices.Sorted(maps.Keys(a.tools)) {
		t := *a.tools[name]
		t.MeanMS = meanMS(t)
		r.Tools = append(r.Tools, t)
	}
	r.ToolTotals.MeanMS = meanMS(r.ToolTotals)
	if r.Compaction.TokensBefore > 0 {
		r.Compaction.Savings = 1 - float64(r.Compaction.TokensAfter)/float64(r.Compaction.TokensBefore)
	}
	r.ForkMS = quantiles(a.forkMS)
	r.FindingsByKind = named(a.findings)
	r.Attempts.Finished = slices.Clone(r.Attempts.Finished)
	r.Attempts.Failed = slices.Clone(r.Attempts.Failed)
	return r
}

func meanMS(t ToolStats) float64 {
	if t.Calls == 0 {
		return 0
	}
	return float64(t.DurationMS) / float64(t.Calls)
}

func ratio(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

func addNamed(c NamedCounts, name string) NamedCounts {
	i, found := slices.BinarySearchFunc(c, name, func(n NamedCount, s string) int { return cmp.Compare(n.Name, s) })
	if found {
		c[i].N++
		return c
	}
	return slices.Insert(c, i, NamedCount{Name: name, N: 1})
}

func named(m map[string]int) NamedCounts {
	out := NamedCounts{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, NamedCount{Name: k, N: m[k]})
	}
	return out
}

// counts turns a manifest histogram into counts in numeric order.
func counts(h map[string]int) []Count {
	m := map[int64]int{}
	for k, n := range h {
		v, err := strconv.ParseInt(k, 10, 64)
		if err == nil {
			m[v] += n
		}
	}
	return countsInt(m)
}

func countsInt(m map[int64]int) []Count {
	out := []Count{}
	for _, v := range slices.Sorted(maps.Keys(m)) {
		out = append(out, Count{Value: v, N: m[v]})
	}
	return out
}

func quantiles(m map[int64]int) Quantiles {
	var q Quantiles
	var sum float64
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		q.N += m[k]
		sum += float64(k) * float64(m[k])
	}
	if q.N == 0 {
		return q
	}
	q.Mean = sum / float64(q.N)
	q.Max = keys[len(keys)-1]
	at := func(p float64) int64 {
		// The smallest value with at least p of the distribution at or below it.
		need, seen := int(math.Ceil(p*float64(q.N))), 0
		for _, k := range keys {
			seen += m[k]
			if seen >= need {
				return k
			}
		}
		return q.Max
	}
	q.P50, q.P95 = at(0.5), at(0.95)
	return q
}
