package explore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Snapshot is one run's explorer records as its views read them: every
// view is a few point reads and scans bounded by what it shows (an
// attempt's turns, a group's members, a page of a list), never a fold of
// the run's history. The records it reads are decoded once per snapshot.
type Snapshot struct {
	run    string
	r      Reader
	sum    *sumRec
	vocabs *vocabCache
	// log reads back the token arrays the records leave in the facts log,
	// under ctx (the request's); nil when there is none to read.
	log FactLog
	ctx context.Context

	atts  map[string]*attRec
	grps  map[string]*grpRec
	tasks map[string]*taskRec
	steps map[uint64]*stepRec
	grads map[uint64]*gradRec
}

// OpenSnapshot reads run's records from r; ok is false when it holds none.
func OpenSnapshot(run string, r Reader) (*Snapshot, bool, error) {
	return openSnapshot(run, r, nil)
}

// openSnapshot is OpenSnapshot; vocabs, when not nil, keeps decoded
// vocabularies between snapshots.
func openSnapshot(run string, r Reader, vocabs *vocabCache) (*Snapshot, bool, error) {
	sum, err := getJSON[sumRec](r, []byte{kSummary})
	if err != nil || sum == nil {
		return nil, false, err
	}
	s := emptySnapshot(run, r, vocabs)
	s.sum = sum
	return s, true, nil
}

func emptySnapshot(run string, r Reader, vocabs *vocabCache) *Snapshot {
	if vocabs == nil {
		vocabs = &vocabCache{}
	}
	return &Snapshot{run: run, r: r, sum: &sumRec{Versions: map[int]uint64{}, Config: events.DefaultConfig()}, vocabs: vocabs,
		atts: map[string]*attRec{}, grps: map[string]*grpRec{}, tasks: map[string]*taskRec{}, steps: map[uint64]*stepRec{}, grads: map[uint64]*gradRec{}}
}

// Run is the snapshot's run.
func (s *Snapshot) Run() string { return s.run }

// Facts is the number of facts the records hold.
func (s *Snapshot) Facts() uint64 { return s.sum.Facts }

// Partial says the records began after the run's first fact.
func (s *Snapshot) Partial() bool { return s.sum.Partial }

func cached[T any](s *Snapshot, cache map[string]*T, kind byte, id string) (*T, error) {
	if v, ok := cache[id]; ok {
		return v, nil
	}
	v, err := getJSON[T](s.r, idKey(kind, id))
	if err == nil {
		cache[id] = v
	}
	return v, err
}

// prefetch reads the records of ids not cached yet into cache, in key
// order, once each.
func prefetch[T any](s *Snapshot, cache map[string]*T, kind byte, ids []string) error {
	var keys [][]byte
	var want []string
	seen := map[string]bool{}
	for _, id := range ids {
		if _, ok := cache[id]; ok || seen[id] {
			continue
		}
		seen[id] = true
		keys, want = append(keys, idKey(kind, id)), append(want, id)
	}
	return getMany(s.r, keys, func(i int, v []byte) error {
		if v == nil {
			cache[want[i]] = nil
			return nil
		}
		out, err := decodeJSON[T](keys[i], v)
		if err != nil {
			return err
		}
		cache[want[i]] = out
		return nil
	})
}

// prefetchRows reads the records the rows of attempts ids show: the
// attempts', then their groups'.
func (s *Snapshot) prefetchRows(ids []string) error {
	if err := prefetch(s, s.atts, kAttempt, ids); err != nil {
		return err
	}
	groups := make([]string, 0, len(ids))
	for _, id := range ids {
		if a := s.atts[id]; a != nil {
			groups = append(groups, a.S.Group)
		}
	}
	return prefetch(s, s.grps, kGroup, groups)
}

func (s *Snapshot) attempt(id string) (*attRec, error) { return cached(s, s.atts, kAttempt, id) }
func (s *Snapshot) group(id string) (*grpRec, error)   { return cached(s, s.grps, kGroup, id) }
func (s *Snapshot) task(id string) (*taskRec, error)   { return cached(s, s.tasks, kTask, id) }
func (s *Snapshot) batch(seq uint64) (*batchRec, error) {
	return getJSON[batchRec](s.r, key(kBatch, u64(seq)))
}

func (s *Snapshot) step(seq uint64) (*stepRec, error) {
	if v, ok := s.steps[seq]; ok {
		return v, nil
	}
	v, err := getJSON[stepRec](s.r, key(kStep, u64(seq)))
	if err == nil {
		s.steps[seq] = v
	}
	return v, err
}

func (s *Snapshot) gradient(batch uint64) (*gradRec, error) {
	if v, ok := s.grads[batch]; ok {
		return v, nil
	}
	v, err := getJSON[gradRec](s.r, key(kGradient, i64(int64(batch))))
	if err == nil {
		s.grads[batch] = v
	}
	return v, err
}

// ordered calls fn with the ids of an ordinal index (kind) after ordinal
// after, in order, until fn returns false.
func (s *Snapshot) ordered(kind byte, after uint64, fn func(ord uint64, id string) (bool, error)) error {
	var from []byte
	if after > 0 {
		from = key(kind, u64(after))
	}
	return s.r.Scan([]byte{kind}, from, func(k, v []byte) (bool, error) {
		return fn(binary.BigEndian.Uint64(k[1:]), string(v))
	})
}

// Summary is the run's line of the runs list; now decides live or idle.
func (s *Snapshot) Summary(now time.Time) RunSummary {
	sum := s.sum
	out := RunSummary{Run: s.run, Status: "idle", Facts: sum.Facts, Batches: sum.Sealed, TasksAdmitted: sum.Admitted,
		TasksRejected: sum.Rejected, Findings: int(sum.Findings) + s.misroutedCount(), FirstFactAt: sum.FirstAt, LastActivity: sum.LastAt,
		LastArrival: sum.ArrivedAt, Catalogue: []int{}}
	last := sum.LastAt
	if sum.ArrivedAt.After(last) {
		last = sum.ArrivedAt
	}
	if !last.IsZero() && now.Sub(last) < LiveFor {
		out.Status = "live"
	}
	for v := range sum.Versions {
		out.Catalogue = append(out.Catalogue, v)
	}
	slices.Sort(out.Catalogue)
	return out
}

func (s *Snapshot) misroutedCount() int {
	n := 0
	_ = s.r.Scan([]byte{kMisrouted}, nil, func([]byte, []byte) (bool, error) { n++; return true, nil })
	return n
}

// funnels returns the admission funnel after each of seqs (ascending), one
// pass over the funnel's index.
func (s *Snapshot) funnels(seqs []uint64) ([]Funnel, error) {
	out := make([]Funnel, len(seqs))
	var f Funnel
	i := 0
	err := s.r.Scan([]byte{kFunnel}, nil, func(k, _ []byte) (bool, error) {
		seq := binary.BigEndian.Uint64(k[1:])
		for ; i < len(seqs) && seqs[i] < seq; i++ {
			out[i] = f
		}
		if i == len(seqs) {
			return false, nil
		}
		switch k[9] {
		case funnelRegistered:
			f.Registered++
		case funnelProbed:
			f.Probed++
		case funnelAdmitted:
			f.Admitted++
		case funnelRejected:
			f.Rejected++
		}
		return true, nil
	})
	for ; i < len(seqs); i++ {
		out[i] = f
	}
	return out, err
}

// RunViewSteps is how many steps the run view shows. A longer run shows
// its newest half that many and, of the steps before them, as many again
// evenly spaced, so the view reads the same few hundred records on a
// run's fifth day as on its first; the steps list ([Snapshot.Steps])
// pages through every one.
const (
	RunViewSteps = 500
	// RunViewFindings is how many of its findings the run view lists, in
	// the order made; the summary counts every one.
	RunViewFindings = 1000
	// RunViewPolicies is how many policy versions the run view lists,
	// the newest.
	RunViewPolicies = 500
)

// RunView builds the run view.
func (s *Snapshot) RunView(now time.Time) (RunView, error) { return s.runView(now, RunViewSteps) }

// runView is RunView showing at most most steps (every one when most is 0).
func (s *Snapshot) runView(now time.Time, most int) (RunView, error) {
	sum := s.sum
	v := RunView{RunSummary: s.Summary(now), Config: sum.Config, Configured: sum.Configured, Steps: []Step{},
		Reference: Reference{projections.RefZeroSignalRate, projections.RefInfraLostRate, projections.RefTruncatedLow, projections.RefTruncatedHigh},
		Findings:  []Finding{}, Drops: map[string]int{}, Policies: []PolicyVersion{},
		Funnel:   Funnel{Registered: sum.Registered, Probed: sum.Probed, Admitted: sum.AdmittedTasks, Rejected: sum.RejectedTasks},
		InFlight: sum.InFlight, StepsTotal: sum.Sealed, PoliciesTotal: sum.Policies}
	steps, err := s.shownSteps(most)
	if err != nil {
		return v, err
	}
	if v.Steps, err = s.stepRows(steps); err != nil {
		return v, err
	}
	v.StepsSampled = len(v.Steps) < sum.Sealed
	if sum.DropsKept {
		maps.Copy(v.Drops, sum.Drops)
	} else if err := s.scanSteps(0, nil, func(st *stepRec) bool { addDrops(v.Drops, st); return true }); err != nil {
		// Records made before the summary kept the drops count them here.
		return v, err
	}
	if v.Findings, err = s.findings(RunViewFindings); err != nil {
		return v, err
	}
	var after []byte
	if sum.Policies > RunViewPolicies {
		after = key(kPolicy, u64(sum.Policies-RunViewPolicies))
	}
	err = s.r.Scan([]byte{kPolicy}, after, func(_, val []byte) (bool, error) {
		var p polRec
		if err := json.Unmarshal(val, &p); err != nil {
			return false, fmt.Errorf("explore: policy of %s: %w", s.run, err)
		}
		v.Policies = append(v.Policies, PolicyVersion{p.P.Version, p.Fact})
		return true, nil
	})
	return v, err
}

func addDrops(drops map[string]int, st *stepRec) {
	for _, d := range st.Audit.Dropped {
		drops[d.Name] += d.N
	}
}

// scanSteps calls fn with each step record after step after (every one
// when after is 0) that want takes (every one when want is nil), in batch
// order, until fn returns false. A step want passes over is not decoded.
func (s *Snapshot) scanSteps(after uint64, want func(seq uint64) bool, fn func(*stepRec) bool) error {
	var from []byte
	if after > 0 {
		from = key(kStep, u64(after))
	}
	return s.r.Scan([]byte{kStep}, from, func(k, val []byte) (bool, error) {
		if want != nil && !want(binary.BigEndian.Uint64(k[1:])) {
			return true, nil
		}
		st := new(stepRec)
		if err := json.Unmarshal(val, st); err != nil {
			return false, fmt.Errorf("explore: step of %s: %w", s.run, err)
		}
		return fn(st), nil
	})
}

// shownSteps are the step records the run view shows, in batch order:
// every one when there are at most most (or most is 0); else the newest
// most/2 and the rest of most from the older ones, the first of them and
// then evenly spaced. It is one scan of the steps' keys, which decodes the
// records it shows: on a large state, hundreds of point reads each find
// their own blocks, where the scan reads the range's once, in order.
func (s *Snapshot) shownSteps(most int) ([]*stepRec, error) {
	var out []*stepRec
	last := s.sum.MaxBatch
	if most <= 0 || last <= uint64(most) {
		err := s.scanSteps(0, nil, func(st *stepRec) bool { out = append(out, st); return true })
		return out, err
	}
	recent := uint64(most / 2)
	older := last - recent // steps 1..older are sampled
	picks := uint64(most) - recent
	next := uint64(0) // the next pick, an index below picks
	pick := func(i uint64) uint64 { return 1 + i*older/picks }
	sampled := func(seq uint64) bool {
		if seq > older {
			return true
		}
		for next < picks && pick(next) < seq {
			next++ // a pick with no record
		}
		if next == picks || pick(next) != seq {
			return false
		}
		next++
		return true
	}
	err := s.scanSteps(0, sampled, func(st *stepRec) bool { out = append(out, st); return true })
	return out, err
}

// stepRows are steps (in batch order) as the run view and the steps list
// show them: each with the admission funnel after it, from one pass over
// the funnel's index, and its gradient's norm.
func (s *Snapshot) stepRows(steps []*stepRec) ([]Step, error) {
	seqs := make([]uint64, len(steps))
	for i, st := range steps {
		seqs[i] = st.Audit.Fact
	}
	// The funnel's index is in fact order; steps are in batch order,
	// which seals in fact order too.
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(seqs[a], seqs[b]) })
	sorted := make([]uint64, len(steps))
	for i, j := range order {
		sorted[i] = seqs[j]
	}
	fs, err := s.funnels(sorted)
	if err != nil {
		return nil, err
	}
	funnel := make([]Funnel, len(steps))
	for i, j := range order {
		funnel[j] = fs[i]
	}
	grads, err := s.gradients(steps)
	if err != nil {
		return nil, err
	}
	out := make([]Step, 0, len(steps))
	for i, st := range steps {
		out = append(out, stepOf(st, funnel[i], grads[i]))
	}
	return out, nil
}

// gradients are the first gradient.applied of each of steps (in batch
// order), nil where none came: one scan of the gradients' keys from the
// first step's to the last's.
func (s *Snapshot) gradients(steps []*stepRec) ([]*gradRec, error) {
	out := make([]*gradRec, len(steps))
	if len(steps) == 0 {
		return out, nil
	}
	i := 0
	var from []byte
	if first := int64(steps[0].Audit.Step); first > 1 {
		from = key(kGradient, i64(first-1))
	}
	err := s.r.Scan([]byte{kGradient}, from, func(k, val []byte) (bool, error) {
		batch := binary.BigEndian.Uint64(k[1:]) ^ 1<<63
		for i < len(steps) && steps[i].Audit.Step < batch {
			i++
		}
		if i == len(steps) {
			return false, nil
		}
		if steps[i].Audit.Step != batch {
			return true, nil
		}
		g := new(gradRec)
		if err := json.Unmarshal(val, g); err != nil {
			return false, fmt.Errorf("explore: gradient of %s: %w", s.run, err)
		}
		out[i] = g
		i++
		return true, nil
	})
	return out, err
}

// Steps is a page of the run's steps in batch order: at most limit (every
// one when limit is 0) after the step the cursor names.
func (s *Snapshot) Steps(cursor string, limit int) (StepPage, error) {
	after, _ := strconv.ParseUint(cursor, 10, 64)
	var steps []*stepRec
	next := ""
	err := s.scanSteps(after, nil, func(st *stepRec) bool {
		if limit > 0 && len(steps) == limit {
			next = strconv.FormatUint(steps[len(steps)-1].Audit.Step, 10)
			return false
		}
		steps = append(steps, st)
		return true
	})
	if err != nil {
		return StepPage{}, err
	}
	rows, err := s.stepRows(steps)
	return StepPage{Steps: rows, Total: s.sum.Sealed, Next: next}, err
}

func stepOf(st *stepRec, f Funnel, g *gradRec) Step {
	out := Step{StepAudit: st.Audit, Funnel: f, MeanReward: st.MeanReward, Reward: st.Reward, TrainedStaleness: st.TrainedStaleness}
	if out.TrainedStaleness == nil {
		out.TrainedStaleness = []projections.Count{}
	}
	if g != nil {
		gn := g.G.GradNorm
		out.GradNorm = &gn
	}
	return out
}

// findings are the run's findings, at most most: the fold's in the order
// made, then the misrouted ones by position.
func (s *Snapshot) findings(most int) ([]Finding, error) {
	out := []Finding{}
	for _, kind := range []byte{kFinding, kMisrouted} {
		err := s.r.Scan([]byte{kind}, nil, func(_, val []byte) (bool, error) {
			if len(out) == most {
				return false, nil
			}
			var f Finding
			if err := json.Unmarshal(val, &f); err != nil {
				return false, fmt.Errorf("explore: finding of %s: %w", s.run, err)
			}
			out = append(out, f)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Snapshot) attemptRow(a *attRec) (AttemptRow, error) {
	g, err := s.group(a.S.Group)
	if err != nil {
		return AttemptRow{}, err
	}
	if g == nil {
		g = &grpRec{}
	}
	r := AttemptRow{Attempt: a.S.Attempt, Group: a.S.Group, Task: a.S.Task, Purpose: g.purpose(), Slot: a.Slot, RetryOf: a.S.RetryOf,
		RetriedBy: a.RetriedBy, Outcome: "running", Batch: a.Batch, Turns: len(a.Gen), PromptTokens: a.Prompt, ToolCalls: a.Tools, Finish: a.Finish}
	switch {
	case a.Failed != "":
		r.Outcome = "failed: " + a.Failed
	case a.Outcome != "":
		r.Outcome = a.Outcome
	}
	if a.Batch == 0 && g.Dropped != "" {
		r.DropReason = g.Dropped
	}
	if a.Reward != nil {
		p, tp, tt := a.Reward.Passed, a.Reward.TestsPassed, a.Reward.TestsTotal
		r.Passed, r.TestsPassed, r.TestsTotal = &p, &tp, &tt
	}
	if j := a.Judged; j != nil {
		r.Score, r.Bonus, r.Reward, r.Advantage = &j.Score, &j.Bonus, &j.Reward, &j.Advantage
		for _, t := range j.Turns {
			if t.Trained {
				r.TrainedTurns++
			}
			if r.MaxStaleness == nil || t.Staleness > *r.MaxStaleness {
				st := t.Staleness
				r.MaxStaleness = &st
			}
		}
	}
	for _, n := range a.Tok {
		r.CompletionTokens += n
	}
	return r, nil
}

// Defaults and bounds of a page of a list (attempts, tasks).
const (
	DefaultPage = 2000
	MaxPage     = 10000
)

// AttemptPage is a page of the attempts list, in the order they started.
type AttemptPage struct {
	Attempts []AttemptRow `json:"attempts"`
	// Total is how many attempts the run has started; Next is the cursor
	// of the next page, empty at the end.
	Total uint64 `json:"total"`
	Next  string `json:"next"`
}

// ValidatePage checks a list's cursor and page size as a request gives
// them; limit "" is DefaultPage.
func ValidatePage(cursor, limit string) (int, error) {
	if cursor != "" {
		if n, err := strconv.ParseUint(cursor, 10, 64); err != nil || n == 0 {
			return 0, fmt.Errorf("cursor %q is not one this list returned", cursor)
		}
	}
	return parseLimit(limit, DefaultPage, MaxPage)
}

// Attempts is a page of the run's attempts in the order started: at most
// limit (every one when limit is 0) after the cursor a page returned.
func (s *Snapshot) Attempts(cursor string, limit int) (AttemptPage, error) {
	// The page's ids first, so that their records are read in key order.
	var ids []string
	after, _ := strconv.ParseUint(cursor, 10, 64)
	err := s.ordered(kAttemptOrd, after, func(_ uint64, id string) (bool, error) {
		ids = append(ids, id)
		return limit == 0 || len(ids) < limit, nil
	})
	if err == nil {
		err = s.prefetchRows(ids)
	}
	if err != nil {
		return AttemptPage{}, err
	}
	rows, next, err := pageOf(s, kAttemptOrd, cursor, limit, func(id string) (AttemptRow, bool, error) {
		a, err := s.attempt(id)
		if err != nil || a == nil || !a.started() {
			return AttemptRow{}, false, err
		}
		r, err := s.attemptRow(a)
		return r, err == nil, err
	})
	return AttemptPage{Attempts: rows, Total: s.sum.Attempts, Next: next}, err
}

// pageOf is a page of an ordinal index (kind): the rows of at most limit
// ids (every one when limit is 0) after the cursor a page returned, and
// the cursor of the next page ("" at the end).
func pageOf[R any](s *Snapshot, kind byte, cursor string, limit int, row func(id string) (R, bool, error)) ([]R, string, error) {
	out := []R{}
	next := ""
	after, _ := strconv.ParseUint(cursor, 10, 64)
	err := s.ordered(kind, after, func(ord uint64, id string) (bool, error) {
		if limit > 0 && len(out) == limit {
			next = strconv.FormatUint(ord-1, 10)
			return false, nil
		}
		r, ok, err := row(id)
		if ok {
			out = append(out, r)
		}
		return err == nil, err
	})
	return out, next, err
}

// StepView builds the view of batch seq; ok is false when it is not sealed.
func (s *Snapshot) StepView(seq uint64) (StepView, bool, error) {
	b, err := s.batch(seq)
	if err != nil || b == nil {
		return StepView{}, false, err
	}
	next, _, err := s.r.Get(key(kBatch, u64(seq+1)))
	if err != nil {
		return StepView{}, false, err
	}
	m := &b.Manifest
	v := StepView{Seq: m.Seq, TrainerVersion: m.TrainerVersion, RuleVersion: m.RuleVersion, Watermark: m.Watermark,
		Decision: b.Decision, Tree: m.Tree, Digest: m.Digest, Stats: m.Stats, Groups: []StepGroup{},
		Dropped: append([]projections.DroppedGroup{}, m.Dropped...), Next: next != nil}
	var ids []string
	for _, bg := range m.Groups {
		for _, ba := range bg.Attempts {
			ids = append(ids, ba.Attempt)
		}
	}
	if err := s.prefetchRows(ids); err != nil {
		return v, false, err
	}
	for _, bg := range m.Groups {
		sg := StepGroup{Group: bg.Group, Task: bg.Task, Completed: bg.Completed, Attempts: []AttemptRow{}}
		for _, ba := range bg.Attempts {
			a, err := s.attempt(ba.Attempt)
			if err != nil {
				return v, false, err
			}
			if a != nil && a.started() {
				r, err := s.attemptRow(a)
				if err != nil {
					return v, false, err
				}
				sg.Attempts = append(sg.Attempts, r)
			}
		}
		v.Groups = append(v.Groups, sg)
	}
	g, err := s.gradient(seq)
	if err != nil {
		return v, false, err
	}
	if g != nil {
		v.Gradient = &Gradient{GradientApplied: g.G, Fact: g.Fact, DigestMatches: g.G.BatchDigest == m.Digest}
	}
	st, err := s.step(seq)
	if err != nil {
		return v, false, err
	}
	if st != nil {
		fs, err := s.funnels([]uint64{st.Audit.Fact})
		if err != nil {
			return v, false, err
		}
		step := stepOf(st, fs[0], g)
		v.Metrics = &step
	}
	return v, true, nil
}

// GroupView builds the view of a group; ok is false when it is unknown.
func (s *Snapshot) GroupView(id string) (GroupView, bool, error) {
	g, err := s.group(id)
	if err != nil || g == nil {
		return GroupView{}, false, err
	}
	v := GroupView{Group: id, Task: g.task(), Purpose: g.purpose(), Started: g.Fact, Closed: g.Closed,
		Batch: g.Batch, Dropped: g.Dropped, DropSeal: g.DropSeal, Slots: g.Slots, Attempts: []AttemptRow{}, State: groupState(g)}
	if g.S != nil {
		v.Size = g.S.Size
	}
	members, rows, err := s.members(g)
	if err != nil {
		return v, false, err
	}
	for i, a := range members {
		r := rows[i]
		for _, n := range a.Gen {
			if j := a.judgedTurn(int(n)); j != nil {
				r.TurnTrained = append(r.TurnTrained, j.Trained)
			}
		}
		v.Attempts = append(v.Attempts, r)
	}
	return v, true, nil
}

// members are a group's attempts in the order they started, with their
// rows.
func (s *Snapshot) members(g *grpRec) ([]*attRec, []AttemptRow, error) {
	var atts []*attRec
	var rows []AttemptRow
	for _, id := range g.Members {
		a, err := s.attempt(id)
		if err != nil {
			return nil, nil, err
		}
		if a == nil || !a.started() {
			return nil, nil, fmt.Errorf("explore: member %s of a group has no record", id)
		}
		r, err := s.attemptRow(a)
		if err != nil {
			return nil, nil, err
		}
		atts, rows = append(atts, a), append(rows, r)
	}
	return atts, rows, nil
}

func groupState(g *grpRec) string {
	switch {
	case g.Batch != 0:
		return "in_batch"
	case g.Dropped != "":
		return "dropped"
	case g.purpose() != "" && g.purpose() != events.PurposeTrain:
		return "not_for_training"
	}
	return "in_flight"
}

type storedTurn struct {
	fact       projections.FactPosition
	turn       *events.TurnGenerated
	id         string // the turn's event id
	inLog      bool   // its token arrays are in the facts log at fact
	gone       bool   // and the log no longer holds them
	tools      []events.ToolCalled
	compaction *events.ContextCompacted
}

// turnsOf reads an attempt's generated turns in order, with their tool
// calls (by call number) and compactions.
func (s *Snapshot) turnsOf(attempt string) ([]storedTurn, error) {
	out, _, err := s.turnsRead(attempt)
	return out, err
}

// turnsRead is turnsOf, and how many bytes of records it read.
func (s *Snapshot) turnsRead(attempt string) ([]storedTurn, int64, error) {
	var out []storedTurn
	var read int64
	at := map[int]int{}
	err := s.r.Scan(attemptPrefix(kTurn, attempt), nil, func(k, v []byte) (bool, error) {
		read += int64(len(v))
		pos, d, id, inLog, err := readTurn(v)
		if err != nil {
			return false, err
		}
		at[d.Turn] = len(out)
		out = append(out, storedTurn{fact: pos, turn: d, id: id, inLog: inLog})
		return true, nil
	})
	if err != nil {
		return nil, read, err
	}
	err = s.r.Scan(attemptPrefix(kTool, attempt), nil, func(k, v []byte) (bool, error) {
		read += int64(len(v))
		i, ok := at[turnOf(k[:len(k)-16])]
		if !ok {
			return true, nil
		}
		_, ev, err := readRaw(v)
		if err != nil {
			return false, err
		}
		if d, ok := ev.Data.(*events.ToolCalled); ok {
			out[i].tools = append(out[i].tools, *d)
		}
		return true, nil
	})
	if err != nil {
		return nil, read, err
	}
	err = s.r.Scan(attemptPrefix(kCompaction, attempt), nil, func(k, v []byte) (bool, error) {
		i, ok := at[turnOf(k)]
		if !ok {
			return true, nil
		}
		_, ev, err := readRaw(v)
		if err != nil {
			return false, err
		}
		if d, ok := ev.Data.(*events.ContextCompacted); ok {
			out[i].compaction = d
		}
		return true, nil
	})
	return out, read, err
}

// AttemptView builds an attempt's timeline; ok is false when it is unknown.
func (s *Snapshot) AttemptView(id string) (AttemptView, bool, error) {
	a, err := s.attempt(id)
	if err != nil || a == nil || !a.started() {
		return AttemptView{}, false, err
	}
	row, err := s.attemptRow(a)
	if err != nil {
		return AttemptView{}, false, err
	}
	g, err := s.group(a.S.Group)
	if err != nil {
		return AttemptView{}, false, err
	}
	if g == nil {
		g = &grpRec{}
	}
	v := AttemptView{AttemptRow: row, Engine: a.S.Engine, VM: a.S.VM, ForkMS: a.S.ForkMS, Started: a.Fact,
		MaxStaleness: s.sum.Config.MaxStaleness, TurnList: []TurnView{}}
	t, err := s.task(a.S.Task)
	if err != nil {
		return v, false, err
	}
	if t != nil && t.R != nil {
		v.TaskPrompt, v.TaskPromptCut = t.R.Prompt, t.R.PromptCut
	}
	var grad *Gradient
	if a.Batch != 0 {
		st, err := s.step(a.Batch)
		if err != nil {
			return v, false, err
		}
		var digest string
		if st != nil {
			tv := st.TrainerVersion
			v.TrainerVersion, digest = &tv, st.Digest
		}
		gr, err := s.gradient(a.Batch)
		if err != nil {
			return v, false, err
		}
		if gr != nil {
			grad = &Gradient{GradientApplied: gr.G, Fact: gr.Fact, DigestMatches: gr.G.BatchDigest == digest}
			v.Gradient = grad
		}
	}
	turns, err := s.turnsOf(id)
	if err != nil {
		return v, false, err
	}
	if err := s.tokensFromLog(turns); err != nil {
		return v, false, err
	}
	for _, st := range turns {
		t := st.turn
		tv := TurnView{Turn: t.Turn, Fact: st.fact, PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens,
			CachedTokens: t.CachedTokens, ObservationIDs: orEmpty(t.ObservationTokenIDs), TokenIDs: orEmpty(t.TokenIDs),
			Logprobs: t.Logprobs, Text: t.Text, TextCut: t.TextCut, Finish: t.Finish, LatencyMS: t.LatencyMS,
			Tools: st.tools, Compaction: st.compaction}
		if tv.Logprobs == nil {
			tv.Logprobs = []float32{}
		}
		if tv.Tools == nil {
			tv.Tools = []events.ToolCalled{}
		}
		if st.gone {
			tv.TokensGone = fmt.Sprintf("the facts log no longer holds this turn's record (partition %d offset %d), which kept its token arrays", st.fact.Partition, st.fact.Offset)
		}
		tv.Segments, tv.Lineage = lineage(a, g, t, grad)
		tv.Judged = a.judgedTurn(t.Turn) != nil
		v.TurnList = append(v.TurnList, tv)
	}
	for _, side := range []struct {
		ord uint64
		to  *string
	}{{a.Ord - 1, &v.PrevAttempt}, {a.Ord + 1, &v.NextAttempt}} {
		if side.ord == 0 {
			continue
		}
		id, ok, err := s.r.Get(key(kAttemptOrd, u64(side.ord)))
		if err != nil {
			return v, false, err
		}
		if ok {
			*side.to = string(id)
		}
	}
	voc, err := s.vocabularyOf(a.S.Engine)
	if err != nil {
		return v, false, err
	}
	if voc != nil {
		v.Vocabulary = voc.decode(v.TurnList)
	}
	return v, true, nil
}

// FactLog reads facts' records back from the facts log by position: the
// token arrays the projector's explorer records leave there
// (docs/design.md §12.4). Records returns each record's value in the
// order asked, nil where the log no longer holds it.
type FactLog interface {
	Records(ctx context.Context, at []projections.FactPosition) ([][]byte, error)
}

// WithLog makes the snapshot read token arrays from log under ctx.
func (s *Snapshot) WithLog(ctx context.Context, log FactLog) *Snapshot {
	s.ctx, s.log = ctx, log
	return s
}

// errLogUnread is a view that needs the facts log and cannot read it.
func errLogUnread(pos projections.FactPosition, err error) error {
	msg := fmt.Sprintf("the token arrays of the turn at facts partition %d offset %d are kept in the facts log, which could not be read", pos.Partition, pos.Offset)
	if err != nil {
		msg += ": " + err.Error()
	}
	return &httpError{http.StatusServiceUnavailable, "facts_log_unavailable", msg}
}

// tokensFromLog fills in the token arrays of the turns whose records left
// them in the facts log, reading each record back and checking it is the
// turn's. A turn whose record the log no longer holds keeps none, and says
// so.
func (s *Snapshot) tokensFromLog(turns []storedTurn) error {
	var at []projections.FactPosition
	var idx []int
	for i, st := range turns {
		if st.inLog {
			at, idx = append(at, st.fact), append(idx, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	if s.log == nil {
		return errLogUnread(at[0], nil)
	}
	values, err := s.log.Records(s.ctx, at)
	if err != nil {
		return errLogUnread(at[0], err)
	}
	for j, v := range values {
		st := &turns[idx[j]]
		if v == nil {
			st.gone = true
			continue
		}
		ev, err := events.Decode(v)
		d, ok := ev.Data.(*events.TurnGenerated)
		if err != nil || !ok || ev.ID != st.id {
			return fmt.Errorf("explore: the facts log at %d/%d does not hold turn %d's record %s", st.fact.Partition, st.fact.Offset, st.turn.Turn, st.id)
		}
		st.turn.TokenIDs, st.turn.Logprobs, st.turn.ObservationTokenIDs = d.TokenIDs, d.Logprobs, d.ObservationTokenIDs
	}
	return nil
}

func orEmpty(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// lineage judges a turn: the version segments as its batch judged them (or
// as generated, with staleness unknown, before one did), and its fate.
func lineage(a *attRec, g *grpRec, t *events.TurnGenerated, grad *Gradient) ([]projections.TurnSegment, Lineage) {
	segs := make([]projections.TurnSegment, 0, len(t.VersionSegments))
	if j := a.judgedTurn(t.Turn); j != nil {
		if len(j.Segments) > 0 {
			segs = append(segs, j.Segments...)
		} else {
			segs = append(segs, projections.TurnSegment{Start: 0, PolicyVersion: j.PolicyVersion, Staleness: j.Staleness, Trained: j.Trained})
		}
		l := Lineage{State: "masked", Batch: a.Batch}
		trained := 0
		for _, s := range segs {
			if s.Trained {
				trained++
			}
		}
		switch {
		case trained == len(segs):
			l.State, l.Reason = "trained", "trained in batch"
		case trained > 0:
			l.State, l.Reason = "partly_trained", "some version segments exceed max_staleness and are masked"
		default:
			l.Reason = "masked: staleness exceeds max_staleness"
		}
		if grad != nil && trained > 0 {
			st := grad.Step
			l.GradientStep = &st
		} else if trained > 0 {
			l.Reason += "; no gradient.applied reported for the batch yet"
		}
		return segs, l
	}
	for _, s := range t.VersionSegments {
		segs = append(segs, projections.TurnSegment{Start: s.Start, PolicyVersion: s.PolicyVersion})
	}
	switch {
	case g.purpose() != "" && g.purpose() != events.PurposeTrain:
		return segs, Lineage{State: "not_for_training", Reason: g.purpose() + " group: never trains"}
	case g.Dropped != "":
		return segs, Lineage{State: "dropped", Reason: "group dropped: " + g.Dropped, Batch: g.DropSeal}
	case a.Failed != "":
		return segs, Lineage{State: "failed", Reason: "attempt failed: " + a.Failed}
	case a.Batch != 0:
		return segs, Lineage{State: "masked", Batch: a.Batch, Reason: "turn not held by the batch"}
	}
	return segs, Lineage{State: "pending", Reason: "group not in a batch yet"}
}

func (s *Snapshot) taskRow(id string, t *taskRec) TaskRow {
	r := TaskRow{Task: id, Registered: t.R != nil, Decision: t.Decision, Probes: t.Admission.Probes, Passes: t.Admission.Passes,
		PassRate: t.Admission.PassRate, Groups: t.groups(), Attempts: t.Attempts, Solved: t.Solved}
	if t.R != nil {
		r.Kind, r.Tier = t.R.Kind, t.R.Tier
	}
	return r
}

// TaskPage is a page of the tasks list, in the order first seen.
type TaskPage struct {
	Tasks []TaskRow `json:"tasks"`
	Total uint64    `json:"total"`
	Next  string    `json:"next"`
}

// Tasks is a page of the run's tasks in the order first seen: at most
// limit (every one when limit is 0) after the cursor a page returned.
func (s *Snapshot) Tasks(cursor string, limit int) (TaskPage, error) {
	rows, next, err := pageOf(s, kTaskOrd, cursor, limit, func(id string) (TaskRow, bool, error) {
		t, err := s.task(id)
		if err != nil || t == nil {
			return TaskRow{}, false, err
		}
		return s.taskRow(id, t), true, nil
	})
	return TaskPage{Tasks: rows, Total: s.sum.Tasks, Next: next}, err
}

// TaskGroupPage is how many groups a task's view shows at once.
const TaskGroupPage = 100

// TaskView builds a task's view with a page of limit of its groups after
// cursor (a cursor a page returned, "" for the first; limit 0 for every
// group); ok is false when the task is unknown.
func (s *Snapshot) TaskView(id, cursor string, limit int) (TaskView, bool, error) {
	t, err := s.task(id)
	if err != nil || t == nil {
		return TaskView{}, false, err
	}
	v := TaskView{TaskRow: s.taskRow(id, t), RegisteredAt: t.Fact, DecisionSeq: t.DecisionSeq, GroupList: []GroupView{}, Gates: []events.Gate{}}
	if t.R != nil {
		v.Source, v.Prompt, v.PromptCut = t.R.Source, t.R.Prompt, t.R.PromptCut
		if t.R.Gates != nil {
			v.Gates = t.R.Gates
		}
	}
	if t.DecidedAt.Seq != 0 {
		p := t.DecidedAt
		v.DecidedAt = &p
	}
	n := t.groups()
	from := 0
	if cursor != "" {
		c, err := strconv.Atoi(cursor)
		if err != nil || c < 0 || c > n {
			return v, false, &httpError{http.StatusBadRequest, "invalid_value", fmt.Sprintf("cursor %q is not one this view returned", cursor)}
		}
		from = c
	}
	to := n
	if limit > 0 {
		to = min(to, from+limit)
	}
	ids, err := s.taskGroups(id, t, from, to)
	if err != nil {
		return v, false, err
	}
	for _, gid := range ids {
		gv, _, err := s.GroupView(gid)
		if err != nil {
			return v, false, err
		}
		v.GroupList = append(v.GroupList, gv)
	}
	if to < n {
		v.GroupsNext = strconv.Itoa(to)
	}
	return v, true, nil
}

// taskGroups are the ids of task's groups from its from-th to before its
// to-th, in the order they started: one scan of its H keys, or the list
// of a record written before them.
func (s *Snapshot) taskGroups(task string, t *taskRec, from, to int) ([]string, error) {
	if len(t.Groups) > 0 {
		return t.Groups[from:to], nil
	}
	ids := make([]string, 0, to-from)
	if from >= to {
		return ids, nil
	}
	prefix := attemptPrefix(kTaskGroup, task)
	var after []byte
	if from > 0 {
		after = taskGroupKey(task, uint64(from-1))
	}
	err := s.r.Scan(prefix, after, func(_, v []byte) (bool, error) {
		ids = append(ids, string(v))
		return len(ids) < to-from, nil
	})
	return ids, err
}

// SideView builds a group's side-by-side view; ok is false when the group
// is unknown.
func (s *Snapshot) SideView(id string) (SideView, bool, error) {
	g, err := s.group(id)
	if err != nil || g == nil {
		return SideView{}, false, err
	}
	v := SideView{Group: id, Task: g.task(), State: groupState(g), Attempts: []SideAttempt{}}
	members, rows, err := s.members(g)
	if err != nil {
		return v, false, err
	}
	for i, a := range members {
		sa := SideAttempt{AttemptRow: rows[i], TurnList: []SideTurn{}}
		turns, err := s.turnsOf(a.S.Attempt)
		if err != nil {
			return v, false, err
		}
		for _, st := range turns {
			t := st.turn
			sid := SideTurn{Turn: t.Turn, Text: t.Text, TextCut: t.TextCut, Finish: t.Finish, CompletionTokens: t.CompletionTokens, Tools: st.tools}
			if sid.Tools == nil {
				sid.Tools = []events.ToolCalled{}
			}
			sa.TurnList = append(sa.TurnList, sid)
		}
		v.Attempts = append(v.Attempts, sa)
	}
	return v, true, nil
}
