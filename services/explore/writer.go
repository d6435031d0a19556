package explore

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Writer folds one run's facts and the decisions made about them into the
// explorer's records (store.go) in a [projections.Store]: the projector's
// window over its database, or a [Model]'s memory. Feed it the run's facts
// in log order with [Writer.Fact], each followed by the decisions it
// caused with [Writer.Decision] (a decision may also come later), and call
// [Writer.Flush] before the store is committed.
//
// Like every projection it does not care in which order causally related
// facts of different producers arrive (docs/design.md §5.3): a turn, tool
// call, finish, failure or reward that comes before its attempt.started is
// kept on the attempt it names and counted once the attempt starts.
//
// The writer keeps the records it touched decoded between calls (a cache
// of what the store holds, at most cacheEntries of each kind once
// flushed), and writes the changed ones at Flush. A writer whose store was
// not committed must be dropped with it.
type Writer struct {
	run string
	// PartialIfNew marks a run with no summary yet as partial: the
	// projector sets it when the run's fold state predates the records.
	PartialIfNew bool
	// TokensInLog leaves turns' token arrays in the facts log, where
	// views read them back by position: the projector sets it, so that
	// the arrays have one home (docs/design.md §12.4). A [Model], which
	// may have no log to read, keeps them.
	TokensInLog bool

	sum      *sumRec
	sumDirty bool
	atts     map[string]*entry[attRec]
	grps     map[string]*entry[grpRec]
	tasks    map[string]*entry[taskRec]
	err      error // the first error of a tokens lookup
}

type entry[T any] struct {
	v     *T
	dirty bool
}

// cacheEntries bounds the records of each kind a writer keeps decoded
// after a flush: the attempts and groups in flight of a large run.
const cacheEntries = 8192

// NewWriter returns the writer of run's records.
func NewWriter(run string) *Writer {
	return &Writer{run: run, atts: map[string]*entry[attRec]{}, grps: map[string]*entry[grpRec]{}, tasks: map[string]*entry[taskRec]{}}
}

// Run is the writer's run.
func (w *Writer) Run() string { return w.run }

func (w *Writer) summary(s projections.Store) (*sumRec, error) {
	if w.sum != nil {
		return w.sum, nil
	}
	v, ok, err := s.Get([]byte{kSummary})
	if err != nil {
		return nil, err
	}
	w.sum = &sumRec{Versions: map[int]uint64{}, Config: events.DefaultConfig()}
	if !ok {
		w.sum.Partial, w.sum.DropsKept, w.sumDirty = w.PartialIfNew, true, true
		return w.sum, nil
	}
	if err := json.Unmarshal(v, w.sum); err != nil {
		w.sum = nil
		return nil, fmt.Errorf("explore: summary of %s: %w", w.run, err)
	}
	if w.sum.Versions == nil {
		w.sum.Versions = map[int]uint64{}
	}
	return w.sum, nil
}

// load returns the record under k from the cache or the store, nil when
// there is none and !create; a record made here is new (fresh true).
func load[T any](s projections.Store, cache map[string]*entry[T], k []byte, create bool) (e *entry[T], fresh bool, err error) {
	if e := cache[string(k)]; e != nil {
		return e, false, nil
	}
	v, ok, err := s.Get(k)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		if !create {
			return nil, false, nil
		}
		e = &entry[T]{v: new(T), dirty: true}
		cache[string(k)] = e
		return e, true, nil
	}
	e = &entry[T]{v: new(T)}
	if err := json.Unmarshal(v, e.v); err != nil {
		return nil, false, fmt.Errorf("explore: record %q: %w", k, err)
	}
	cache[string(k)] = e
	return e, false, nil
}

// attempt is the attempt id names, made (not started) when none is.
func (w *Writer) attempt(s projections.Store, id string) (*attRec, error) {
	e, _, err := load(s, w.atts, idKey(kAttempt, id), true)
	if err != nil {
		return nil, err
	}
	e.dirty = true
	return e.v, nil
}

// peekAttempt is the attempt id names, nil when none; it is not marked
// changed.
func (w *Writer) peekAttempt(s projections.Store, id string) (*attRec, error) {
	e, _, err := load(s, w.atts, idKey(kAttempt, id), false)
	if e == nil || err != nil {
		return nil, err
	}
	return e.v, nil
}

func (w *Writer) group(s projections.Store, id string) (*grpRec, error) {
	return named(s, w.grps, kGroup, kGroupOrd, id, &w.sum.Groups, func(g *grpRec, ord uint64) { g.Ord = ord })
}

func (w *Writer) task(s projections.Store, id string) (*taskRec, error) {
	return named(s, w.tasks, kTask, kTaskOrd, id, &w.sum.Tasks, func(t *taskRec, ord uint64) { t.Ord, t.Decision = ord, "pending" })
}

// named returns the record id names, marked changed; one made here takes
// the next ordinal of its kind (counted in *count, indexed under ordKind),
// given to made.
func named[T any](s projections.Store, cache map[string]*entry[T], kind, ordKind byte, id string, count *uint64, made func(*T, uint64)) (*T, error) {
	e, fresh, err := load(s, cache, idKey(kind, id), true)
	if err != nil {
		return nil, err
	}
	e.dirty = true
	if fresh {
		*count++
		made(e.v, *count)
		if err := s.Set(key(ordKind, u64(*count)), []byte(id)); err != nil {
			return nil, err
		}
	}
	return e.v, nil
}

func funnelKey(seq uint64, kind byte, task string) []byte {
	return append(append(append([]byte{kFunnel}, u64(seq)...), kind), task...)
}

// Fact folds the run's next record. repeat says an earlier record carried
// its event id (the fold's verdict, [projections.Fold.Repeat]): it is
// numbered and counted, and otherwise ignored. arrived is when the record
// reached the log (zero when unknown). r.Value may be nil: the event is
// then encoded for the records that keep it.
func (w *Writer) Fact(s projections.Store, r projections.Record, repeat bool, arrived time.Time) error {
	sum, err := w.summary(s)
	if err != nil {
		return err
	}
	ev := r.Event
	sum.Facts++
	w.sumDirty = true
	pos := projections.FactPosition{Seq: sum.Facts, Partition: r.Partition, Offset: r.Offset}
	if sum.FirstAt.IsZero() || ev.At.Before(sum.FirstAt) {
		sum.FirstAt = ev.At
	}
	if ev.At.After(sum.LastAt) {
		sum.LastAt = ev.At
	}
	if arrived.After(sum.ArrivedAt) {
		sum.ArrivedAt = arrived
	}
	sum.Versions[ev.V]++
	if repeat {
		return nil
	}
	raw := func() ([]byte, error) {
		v := r.Value
		if v == nil {
			var err error
			if v, err = events.Encode(ev); err != nil {
				return nil, err
			}
		}
		return rawRec(pos, v), nil
	}
	switch d := ev.Data.(type) {
	case *events.RunStarted:
		if cfg := d.Config.Resolve(); cfg.Validate() == nil {
			sum.Configured, sum.Config = true, cfg
		}
	case *events.TaskRegistered:
		t, err := w.task(s, d.Task)
		if err != nil || t.R != nil {
			return err
		}
		reg := *d
		t.R, t.Fact = &reg, pos
		sum.Registered++
		return s.Set(funnelKey(pos.Seq, funnelRegistered, d.Task), nil)
	case *events.GroupStarted:
		return w.groupStarted(s, d, pos)
	case *events.AttemptStarted:
		return w.attemptStarted(s, d, pos)
	case *events.TurnGenerated:
		a, err := w.attempt(s, d.Attempt)
		if err != nil {
			return err
		}
		i, found := a.turnIndex(d.Turn)
		if found {
			return nil
		}
		a.Gen, a.Tok = slices.Insert(a.Gen, i, int32(d.Turn)), slices.Insert(a.Tok, i, d.CompletionTokens)
		a.Prompt += d.PromptTokens
		if i == len(a.Gen)-1 {
			a.Finish = d.Finish
		}
		var v []byte
		if w.TokensInLog && hasTokens(d) {
			v, err = strippedRec(pos, ev.ID, d)
		} else {
			v, err = raw()
		}
		if err != nil {
			return err
		}
		return s.Set(turnKey(kTurn, d.Attempt, d.Turn), v)
	case *events.ToolCalled:
		a, err := w.attempt(s, d.Attempt)
		if err != nil {
			return err
		}
		a.Tools++
		v, err := raw()
		if err != nil {
			return err
		}
		return s.Set(append(append(turnKey(kTool, d.Attempt, d.Turn), i64(int64(d.Call))...), u64(pos.Seq)...), v)
	case *events.ContextCompacted:
		a, err := w.attempt(s, d.Attempt)
		if err != nil {
			return err
		}
		i, found := slices.BinarySearch(a.Comp, int32(d.Turn))
		if found {
			return nil
		}
		a.Comp = slices.Insert(a.Comp, i, int32(d.Turn))
		v, err := raw()
		if err != nil {
			return err
		}
		return s.Set(turnKey(kCompaction, d.Attempt, d.Turn), v)
	case *events.AttemptFinished:
		a, err := w.attempt(s, d.Attempt)
		if err == nil && a.Outcome == "" {
			a.Outcome = d.Outcome
		}
		return err
	case *events.AttemptFailed:
		a, err := w.attempt(s, d.Attempt)
		if err == nil && a.Failed == "" {
			a.Failed = d.Reason
		}
		return err
	case *events.RewardComputed:
		a, err := w.attempt(s, d.Attempt)
		if err != nil || a.Reward != nil {
			return err
		}
		a.Reward = &rewardRec{Passed: d.Passed, TestsPassed: d.TestsPassed, TestsTotal: d.TestsTotal}
		if d.Passed && a.started() {
			return w.solved(s, a.S.Group, 1)
		}
	case *events.GroupClosed:
		g, err := w.group(s, d.Group)
		if err == nil && g.Closed == "" {
			g.Closed = d.Reason
		}
		return err
	case *events.PolicyPublished:
		sum.Policies++
		b, err := json.Marshal(polRec{P: *d, Fact: pos})
		if err != nil {
			return err
		}
		return s.Set(key(kPolicy, u64(sum.Policies)), b)
	case *events.GradientApplied:
		return w.gradient(s, d, pos)
	case *events.VocabularyRegistered:
		return w.vocabulary(s, d, raw)
	}
	return nil
}

// solved adds n solved attempts to the task of group, once the group has
// started (its task known).
func (w *Writer) solved(s projections.Store, group string, n int) error {
	g, err := w.group(s, group)
	if err != nil || g.S == nil {
		return err
	}
	t, err := w.task(s, g.S.Task)
	if err == nil {
		t.Solved += n
	}
	return err
}

// addGroup gives the task its next group, moving the list of a record
// written before the H keys to them first.
func (t *taskRec) addGroup(s projections.Store, task, group string) error {
	for _, g := range append(t.Groups, group) {
		if err := s.Set(taskGroupKey(task, uint64(t.NGroups)), []byte(g)); err != nil {
			return err
		}
		t.NGroups++
	}
	t.Groups = nil
	return nil
}

func (w *Writer) groupStarted(s projections.Store, d *events.GroupStarted, pos projections.FactPosition) error {
	g, err := w.group(s, d.Group)
	if err != nil || g.S != nil {
		return err
	}
	gs := *d
	g.S, g.Fact = &gs, pos
	t, err := w.task(s, d.Task)
	if err != nil {
		return err
	}
	if err := t.addGroup(s, d.Task, d.Group); err != nil {
		return err
	}
	if d.Purpose == events.PurposeProbe && !t.Probed {
		t.Probed = true
		w.sum.Probed++
		if err := s.Set(funnelKey(pos.Seq, funnelProbed, d.Task), nil); err != nil {
			return err
		}
	}
	if d.Purpose == events.PurposeTrain && g.Batch == 0 && g.Dropped == "" {
		g.InFlight = true
		w.sum.InFlight++
	}
	// Attempts that started before their group did count for its task now.
	t.Attempts += len(g.Members)
	for _, id := range g.Members {
		a, err := w.peekAttempt(s, id)
		if err != nil {
			return err
		}
		if a != nil && a.Reward != nil && a.Reward.Passed {
			t.Solved++
		}
	}
	return nil
}

func (w *Writer) attemptStarted(s projections.Store, d *events.AttemptStarted, pos projections.FactPosition) error {
	a, err := w.attempt(s, d.Attempt)
	if err != nil || a.started() {
		return err
	}
	g, err := w.group(s, d.Group)
	if err != nil {
		return err
	}
	as := *d
	a.S, a.Fact = &as, pos
	// A retry takes the slot of the attempt it retries, whichever of the
	// two the log holds first (producers race).
	var prev *attRec
	if d.RetryOf != "" {
		if prev, err = w.peekAttempt(s, d.RetryOf); err != nil {
			return err
		}
	}
	retry, hasRetry, err := s.Get(idKey(kRetry, d.Attempt))
	if err != nil {
		return err
	}
	switch {
	case prev != nil && prev.started():
		prev, _ = w.attempt(s, d.RetryOf)
		a.Slot, prev.RetriedBy = prev.Slot, d.Attempt
	case hasRetry:
		r, err := w.attempt(s, string(retry))
		if err != nil {
			return err
		}
		a.Slot, a.RetriedBy = r.Slot, string(retry)
		if err := s.Delete(idKey(kRetry, d.Attempt)); err != nil {
			return err
		}
	default:
		a.Slot = g.Slots
		g.Slots++
		if d.RetryOf != "" {
			if err := s.Set(idKey(kRetry, d.RetryOf), []byte(d.Attempt)); err != nil {
				return err
			}
		}
	}
	g.Members = append(g.Members, d.Attempt)
	w.sum.Attempts++
	a.Ord = w.sum.Attempts
	if err := s.Set(key(kAttemptOrd, u64(a.Ord)), []byte(d.Attempt)); err != nil {
		return err
	}
	if g.S != nil {
		t, err := w.task(s, g.S.Task)
		if err != nil {
			return err
		}
		t.Attempts++
		if a.Reward != nil && a.Reward.Passed {
			t.Solved++
		}
	}
	return nil
}

func (w *Writer) gradient(s projections.Store, d *events.GradientApplied, pos projections.FactPosition) error {
	k := key(kGradient, i64(d.Batch))
	if _, ok, err := s.Get(k); err != nil || ok {
		return err
	}
	b, err := json.Marshal(gradRec{G: *d, Fact: pos})
	if err != nil {
		return err
	}
	if err := s.Set(k, b); err != nil {
		return err
	}
	if d.Batch < 1 {
		return nil
	}
	sk := key(kStep, u64(uint64(d.Batch)))
	v, ok, err := s.Get(sk)
	if err != nil || !ok {
		return err
	}
	var st stepRec
	if err := json.Unmarshal(v, &st); err != nil {
		return fmt.Errorf("explore: step %d of %s: %w", d.Batch, w.run, err)
	}
	projections.ApplyGradient(&st.Audit, d)
	return setJSON(s, sk, st)
}

func (w *Writer) vocabulary(s projections.Store, d *events.VocabularyRegistered, raw func() ([]byte, error)) error {
	k := idKey(kVocab, d.Engine)
	v, ok, err := s.Get(k)
	if err != nil {
		return err
	}
	var voc vocabRec
	if ok {
		if err := json.Unmarshal(v, &voc); err != nil {
			return fmt.Errorf("explore: vocabulary of %s: %w", d.Engine, err)
		}
	} else {
		voc = vocabRec{Model: d.Model, Size: d.Size, Chunks: d.Chunks}
		w.sum.Engines = append(w.sum.Engines, d.Engine)
	}
	if slices.Contains(voc.Got, d.Chunk) || d.Size != voc.Size || d.Chunks != voc.Chunks {
		// A chunk again, or one of another registration of the engine:
		// the first registration stands.
		return nil
	}
	voc.Got = append(voc.Got, d.Chunk)
	rv, err := raw()
	if err != nil {
		return err
	}
	ck := append(append(idKey(kVocabChunk, d.Engine), 0), u64(uint64(int64(d.Chunk)))...)
	if err := s.Set(ck, rv); err != nil {
		return err
	}
	return setJSON(s, k, voc)
}

// putBatch stores a batch's record (a batchRec) of its manifest as JSON,
// data, put in place instead of encoding the manifest again.
func putBatch(s projections.Store, seq uint64, decision projections.FactPosition, data []byte) error {
	d, err := json.Marshal(decision)
	if err != nil {
		return err
	}
	b := make([]byte, 0, len(data)+len(d)+32)
	b = append(b, `{"manifest":`...)
	b = append(b, data...)
	b = append(b, `,"decision":`...)
	b = append(b, d...)
	return s.Set(key(kBatch, u64(seq)), append(b, '}'))
}

func setJSON(s projections.Store, k []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Set(k, b)
}

// Decided folds a decision the fold in this process just made: a sealed
// batch's manifest is taken as the fold has it, decoded and encoded,
// where [Writer.Decision] would decode the record again (megabytes at a
// large batch, on the way to the seal's commit).
func (w *Writer) Decided(s projections.Store, d projections.Decision) error {
	if d.Kind != projections.KindBatchSealed || d.Manifest == nil || d.Data == nil {
		return w.Decision(s, d.Seq, d.Value)
	}
	if _, err := w.summary(s); err != nil {
		return err
	}
	if d.Run != w.run {
		return nil
	}
	w.sumDirty = true
	return w.seal(s, d.Manifest, d.Fact, d.Data)
}

// Decision folds a decision the projector made about the run: kind and
// seq as the fold numbered it (a misrouted finding has no number), value
// its record.
func (w *Writer) Decision(s projections.Store, seq uint64, value []byte) error {
	sum, err := w.summary(s)
	if err != nil {
		return err
	}
	var env projections.Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return fmt.Errorf("explore: decision does not decode: %w", err)
	}
	if env.Run != w.run {
		return nil
	}
	w.sumDirty = true
	switch env.Type {
	case projections.KindBatchSealed:
		var man projections.Manifest
		if err := json.Unmarshal(env.Data, &man); err != nil {
			return fmt.Errorf("explore: batch.sealed %s: %w", env.ID, err)
		}
		return w.seal(s, &man, env.Fact, env.Data)
	case projections.KindTaskAdmitted, projections.KindTaskRejected:
		var ad projections.Admission
		if err := json.Unmarshal(env.Data, &ad); err != nil {
			return fmt.Errorf("explore: %s %s: %w", env.Type, env.ID, err)
		}
		t, err := w.task(s, ad.Task)
		if err != nil {
			return err
		}
		switch t.Decision {
		case "admitted":
			sum.AdmittedTasks--
			err = s.Delete(funnelKey(t.DecidedAt.Seq, funnelAdmitted, ad.Task))
		case "rejected":
			sum.RejectedTasks--
			err = s.Delete(funnelKey(t.DecidedAt.Seq, funnelRejected, ad.Task))
		}
		if err != nil {
			return err
		}
		t.Admission, t.DecidedAt, t.DecisionSeq = ad, env.Fact, seq
		kind := byte(funnelAdmitted)
		if env.Type == projections.KindTaskRejected {
			t.Decision, kind = "rejected", funnelRejected
			sum.Rejected++
			sum.RejectedTasks++
		} else {
			t.Decision = "admitted"
			sum.Admitted++
			sum.AdmittedTasks++
		}
		return s.Set(funnelKey(env.Fact.Seq, kind, ad.Task), nil)
	case projections.KindAuditFinding:
		var f projections.Finding
		if err := json.Unmarshal(env.Data, &f); err != nil {
			return fmt.Errorf("explore: audit.finding %s: %w", env.ID, err)
		}
		if projections.IsMisrouted(env) {
			return putMisrouted(s, env, f)
		}
		sum.Findings++
		return setJSON(s, key(kFinding, u64(sum.Findings)), Finding{Seq: seq, Fact: env.Fact, Finding: f})
	}
	return nil
}

// seal folds a sealed batch: man, and data, man as JSON.
func (w *Writer) seal(s projections.Store, man *projections.Manifest, decision projections.FactPosition, data []byte) error {
	sum := w.sum
	sum.Sealed++
	sum.MaxBatch = max(sum.MaxBatch, man.Seq)
	if err := putBatch(s, man.Seq, decision, data); err != nil {
		return err
	}
	settle := func(g *grpRec) {
		if g.InFlight {
			g.InFlight = false
			sum.InFlight--
		}
	}
	for gi := range man.Groups {
		bg := &man.Groups[gi]
		g, err := w.group(s, bg.Group)
		if err != nil {
			return err
		}
		g.Batch = man.Seq
		settle(g)
		for ai := range bg.Attempts {
			a, err := w.attempt(s, bg.Attempts[ai].Attempt)
			if err != nil {
				return err
			}
			ba := bg.Attempts[ai]
			a.Batch, a.Judged = man.Seq, &ba
		}
	}
	for _, d := range man.Dropped {
		g, err := w.group(s, d.Group)
		if err != nil {
			return err
		}
		g.Dropped, g.DropSeal = d.Reason, man.Seq
		settle(g)
	}
	w.err = nil
	tokens := func(attempt string, turn int64) int64 {
		a, err := w.peekAttempt(s, attempt)
		if err != nil && w.err == nil {
			w.err = err
		}
		if a == nil {
			return 0
		}
		return a.tokens(turn)
	}
	st := stepRec{Audit: projections.NewStepAudit(decision.Seq, man, tokens), Decision: decision,
		TrainerVersion: man.TrainerVersion, Digest: man.Digest}
	st.MeanReward, st.Reward, st.TrainedStaleness = trendOf(man, tokens)
	if w.err != nil {
		return w.err
	}
	g, err := getJSON[gradRec](storeReader{s}, key(kGradient, i64(int64(man.Seq))))
	if err != nil {
		return err
	}
	if g != nil {
		projections.ApplyGradient(&st.Audit, &g.G)
	}
	if sum.DropsKept {
		if sum.Drops == nil {
			sum.Drops = map[string]int{}
		}
		addDrops(sum.Drops, &st)
	}
	return setJSON(s, key(kStep, u64(man.Seq)), st)
}

// Misrouted keeps a misrouted finding (value, its decision's record) with
// its run's records. It is made outside the run's fold, which numbers
// every other decision (docs/design.md §11.2), by whichever partition's
// consumer read the fact: so it is written apart from the run's [Writer]
// and its summary, under a key of its own position.
func Misrouted(s projections.Store, value []byte) error {
	var env projections.Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return fmt.Errorf("explore: decision does not decode: %w", err)
	}
	var f projections.Finding
	if err := json.Unmarshal(env.Data, &f); err != nil {
		return fmt.Errorf("explore: audit.finding %s: %w", env.ID, err)
	}
	return putMisrouted(s, env, f)
}

func putMisrouted(s projections.Store, env projections.Envelope, f projections.Finding) error {
	k := binary.BigEndian.AppendUint32([]byte{kMisrouted}, uint32(env.Fact.Partition))
	return setJSON(s, append(k, i64(env.Fact.Offset)...), Finding{Fact: env.Fact, Finding: f})
}

// storeReader reads a store's point keys (it cannot scan).
type storeReader struct{ s projections.Store }

func (r storeReader) Get(k []byte) ([]byte, bool, error) { return r.s.Get(k) }
func (r storeReader) Scan([]byte, []byte, func([]byte, []byte) (bool, error)) error {
	return fmt.Errorf("explore: a fold's store cannot be scanned")
}

// Flush writes the records changed since the last flush into s, and
// forgets clean ones past the cache's bound.
func (w *Writer) Flush(s projections.Store) error {
	if w.sum != nil && w.sumDirty {
		if err := setJSON(s, []byte{kSummary}, w.sum); err != nil {
			return err
		}
		w.sumDirty = false
	}
	if err := flushCache(s, w.atts); err != nil {
		return err
	}
	if err := flushCache(s, w.grps); err != nil {
		return err
	}
	return flushCache(s, w.tasks)
}

func flushCache[T any](s projections.Store, cache map[string]*entry[T]) error {
	keys := make([]string, 0, len(cache))
	for k, e := range cache {
		if e.dirty {
			keys = append(keys, k)
		}
	}
	// In key order, so two flushes of the same changes write the same
	// sequence.
	slices.SortFunc(keys, cmp.Compare)
	for _, k := range keys {
		e := cache[k]
		if err := setJSON(s, []byte(k), e.v); err != nil {
			return err
		}
		e.dirty = false
	}
	if over := len(cache) - cacheEntries; over > 0 {
		for k := range cache {
			if over == 0 {
				break
			}
			delete(cache, k)
			over--
		}
	}
	return nil
}

// Arrived says a fact of the run reached the log at t (the Kafka record's
// timestamp), for a caller that learns it apart from [Writer.Fact].
func (w *Writer) Arrived(s projections.Store, t time.Time) error {
	sum, err := w.summary(s)
	if err == nil && t.After(sum.ArrivedAt) {
		sum.ArrivedAt, w.sumDirty = t, true
	}
	return err
}
