package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/rolloutledger/rolloutledger/events"
)

// Record is one fact as read from the log.
type Record struct {
	Value     []byte       // the Kafka record value (canonical event JSON)
	Event     events.Event // decoded Value
	Partition int32
	Offset    int64
	// Digests, when set, are HashValue(Value), computed ahead of the fold
	// (by a pool of goroutines, say): the fold then hashes nothing itself.
	// The zero value means "not computed"; the fold computes them.
	Digests Digests
}

// Digests are the two SHA-256 digests the fold takes of a record value:
// its plain SHA-256, which the duplicate check keeps (docs/design.md §5.4),
// and its fact-tree leaf hash, SHA-256(0x00 || value) (§9). Only
// [HashValue] makes them, so a set Digests is always the digests of some
// value; that it is the record's own is the caller's to keep (hash the
// value the record carries, and do not change it afterwards).
type Digests struct {
	sum, leaf [sha256.Size]byte
	set       bool
}

// HashValue computes the digests of a record value.
func HashValue(value []byte) Digests {
	d := Digests{sum: sha256.Sum256(value), set: true}
	h := leafHashers.Get().(*leafHasher)
	h.h.Reset()
	h.h.Write(leafPrefix[:])
	h.h.Write(value)
	d.leaf = [sha256.Size]byte(h.h.Sum(h.out[:0]))
	leafHashers.Put(h)
	return d
}

// leafHasher is a pooled digest and the buffer its sums go to: a sum
// written into the caller's array through the hash.Hash interface would
// move that array to the heap at every record.
type leafHasher struct {
	h   hash.Hash
	out [sha256.Size]byte
}

var leafHashers = sync.Pool{New: func() any { return &leafHasher{h: sha256.New()} }}

// Set reports whether d was computed.
func (d *Digests) Set() bool { return d.set }

// Leaf is the leaf hash (nil when d was not computed).
func (d *Digests) Leaf() []byte {
	if !d.set {
		return nil
	}
	return d.leaf[:]
}

// ErrWrongRun is returned by [Fold.Apply] for a record of another run. The
// Store is left untouched.
var ErrWrongRun = errors.New("projections: record of another run")

// Fold applies one run's facts. It keeps NO state of its own between calls
// except caches that are pure functions of the Store; everything lives in the Store.
// A Fold is used by one goroutine at a time.
type Fold struct {
	run      string
	rules    int // the rule version folded under
	override func(*events.Config)
	recorded *events.Config
	cache    treeCache
	// wb is the write-back cache (FoldOptions.WriteBack), nil for a fold
	// that writes every record through.
	wb *writeBack
	// repeat says the last record applied repeated an event id applied
	// before (see Repeat).
	repeat bool
	// noSamples is FoldOptions.NoSamples.
	noSamples bool
	// samplesTo is FoldOptions.SamplesTo.
	samplesTo func(seq uint64, write func(io.Writer) error) error
	// digests are those of the record being applied, and key the room
	// for its dedup key: kept here, where the Store's and the tree's
	// copies of them cost no allocation.
	digests Digests
	key     []byte
	// ctx is the context of the record being applied (Apply).
	ctx applyCtx
}

// Repeat reports whether the record of the last Apply repeated the id of
// an event applied before, and so concluded nothing (identical bytes or a
// conflicting duplicate alike, docs/design.md §5.4).
func (f *Fold) Repeat() bool { return f.repeat }

// NewFold returns the fold of run.
func NewFold(run string) *Fold { return &Fold{run: run, rules: RuleVersion} }

// FoldOptions change what a fold concludes, or where a sealed batch's
// samples go; the projector uses SamplesTo alone, which changes no
// decision.
type FoldOptions struct {
	// Config, when set, adjusts the run's effective configuration — the
	// one run.started resolves to, or the defaults before or without it —
	// before any rule reads it: the what-if replays of a run under other
	// settings. An adjusted configuration that fails validation is
	// treated like an invalid run.started: a finding, and the defaults.
	Config func(*events.Config)
	// Recorded, when set, is the effective configuration the run's
	// decisions recorded: run.started resolves onto it instead of this
	// build's defaults, so replay folds an old run with what was recorded
	// (docs/design.md §4.3). The fields run.started sets still win, so a
	// recorded configuration that contradicts the run's own shows as a
	// differing manifest.
	Recorded *events.Config
	// RuleVersion, when set, is the rule version to fold a run under from
	// its first record: that of the run's recorded decisions, so a replay
	// of a run sealed under older rules concludes what they concluded
	// (docs/design.md §10). It must satisfy SupportsRuleVersion; 0 means
	// RuleVersion. A run whose state already has records keeps the
	// version it started under.
	RuleVersion int
	// WriteBack, when above 0, keeps the records the fold rewrites with
	// nearly every fact — the header, the fact tree, the open batch, and
	// the attempts and groups in flight, up to about WriteBack bytes of
	// them — decoded in memory between records, and writes them to the
	// Store only to make room and at [Fold.Flush] (writeback.go). The
	// decisions are the same; the Store is complete only after Flush, and
	// the fold must be used with one Store. For a pass over a whole run
	// into a scratch store (replay), not for a projector, whose Store is
	// its snapshot at every window.
	WriteBack int
	// NoSamples leaves the samples out of every batch.sealed Decision
	// (Samples is nil). The decision is the same: the manifest's digest
	// covers the samples, and they are written into it as they are built,
	// so a batch's tokens are never held in memory at once. For a pass that
	// compares decisions (replay's verify), not one that stores or exports
	// the samples.
	NoSamples bool
	// SamplesTo, when set, is given each batch the fold seals, by its seq,
	// and a function that writes the batch's samples to a writer in their
	// canonical binary form as they are built (and into the digest); it
	// must call it once and return its error, or one of its own, which
	// stops the fold. The decision's Samples are then nil, as with
	// NoSamples: a pass that stores the samples (an export) holds none of
	// a batch's tokens at once. It takes precedence over NoSamples.
	SamplesTo func(seq uint64, write func(io.Writer) error) error
}

// NewFoldWith returns the fold of run with options.
func NewFoldWith(run string, o FoldOptions) *Fold {
	rules := o.RuleVersion
	if rules == 0 {
		rules = RuleVersion
	}
	f := &Fold{run: run, override: o.Config, recorded: o.Recorded, rules: rules, noSamples: o.NoSamples, samplesTo: o.SamplesTo}
	if o.WriteBack > 0 {
		f.wb = newWriteBack(o.WriteBack)
	}
	return f
}

// Flush writes what a write-back fold holds in memory to s, the Store it
// folds into, so that s holds the fold's whole state (read it with
// [HeadOf], [ViewSummary]); a fold that writes through has nothing to
// flush. The fold can go on after it.
func (f *Fold) Flush(s Store) error {
	if f.wb == nil {
		return nil
	}
	if err := f.wb.use(s); err != nil {
		return err
	}
	return f.wb.flush(s, f.cache.tree)
}

// Head is the head of the fact tree after the last record applied to s,
// the fold's Store: [HeadOf] without a Flush.
func (f *Fold) Head(s Store) (TreeHead, error) {
	if f.wb != nil && f.wb.store == s && f.cache.tree != nil {
		return f.cache.tree.Head(), nil
	}
	return HeadOf(s)
}

// Tree returns a copy of the fact tree the fold has built in s, to be
// extended apart from the fold's own.
func (f *Fold) Tree(s Store) (*Tree, error) {
	if f.wb != nil && f.wb.store == s && f.cache.tree != nil {
		return decodeTree(f.cache.tree.encode())
	}
	return treeOf(s)
}

// RuleVersion is the rule version the fold applies.
func (f *Fold) RuleVersion() int { return f.rules }

// Run is the run the fold applies.
func (f *Fold) Run() string { return f.run }

// Apply folds the next record of the run, in log order, into the state held
// by s and returns the decisions it concludes, in the order they were
// reached. Every record of the run must be applied exactly once per state,
// duplicates included: the fact sequence number counts them.
//
// When Record.Event is the zero value, Apply decodes Record.Value; when
// Record.Value is empty, it uses the canonical encoding of Record.Event. A
// record that does not decode is counted and reported as a finding.
//
// An error leaves s partly written: discard the writes (the projector drops
// its batch) and do not apply later records to it.
func (f *Fold) Apply(s Store, r Record) ([]Decision, error) {
	if !SupportsRuleVersion(f.rules) {
		return nil, fmt.Errorf("projections: rule version %d is not implemented by this build (%d to %d are)", f.rules, MinRuleVersion, RuleVersion)
	}
	ev, value := r.Event, r.Value
	var decodeErr error
	switch {
	case ev.Type == "":
		ev, decodeErr = events.Decode(value)
		if decodeErr == nil && ev.Run != f.run {
			return nil, fmt.Errorf("%w: %q in the fold of %q", ErrWrongRun, ev.Run, f.run)
		}
	case ev.Run != f.run:
		return nil, fmt.Errorf("%w: %q in the fold of %q", ErrWrongRun, ev.Run, f.run)
	case ev.Data == nil:
		return nil, fmt.Errorf("projections: event %s (%s) has no data", ev.ID, ev.Type)
	case len(value) == 0:
		var err error
		if value, err = events.Encode(ev); err != nil {
			return nil, err
		}
	}

	// The digests a caller computed are of r.Value; a value encoded here
	// from r.Event is hashed here.
	f.digests = r.Digests
	if !f.digests.set || len(r.Value) == 0 {
		f.digests = HashValue(value)
	}
	f.repeat = false
	// One context a fold, made anew for each record: allocated per
	// record, it was the largest of a replay's allocations (some 360
	// bytes a fact). Nothing keeps it past Apply; c.out is a new slice
	// each time.
	c := &f.ctx
	*c = applyCtx{run: f.run, rules: f.rules, s: s, ev: ev, override: f.override, recorded: f.recorded, cache: &f.cache, digests: &f.digests, key: &f.key, repeat: &f.repeat, noSamples: f.noSamples, samplesTo: f.samplesTo}
	if f.wb != nil {
		ds, err := f.applyWriteBack(c, r.Partition, r.Offset, value, decodeErr)
		if err != nil {
			f.wb.broken = err
		}
		return ds, err
	}
	if err := c.loadHeader(); err != nil {
		return nil, err
	}
	if err := c.applyRecord(r.Partition, r.Offset, value, decodeErr); err != nil {
		return nil, err
	}
	if err := c.s.Set([]byte(keyHeader), c.h.encode()); err != nil {
		return nil, err
	}
	return c.out, nil
}

// applyWriteBack is Apply of a write-back fold: the header, the config and
// the tree come from the cache and go back to it.
func (f *Fold) applyWriteBack(c *applyCtx, partition int32, offset int64, value []byte, decodeErr error) ([]Decision, error) {
	w := f.wb
	if err := w.use(c.s); err != nil {
		return nil, err
	}
	h, err := w.header(c.s)
	if err != nil {
		return nil, err
	}
	c.h, c.wb, c.cfg = h, w, w.cfg
	if err := c.applyRecord(partition, offset, value, decodeErr); err != nil {
		return nil, err
	}
	w.setHeader(c.h)
	w.cfg = c.cfg
	if err := w.trim(c.s, f.cache.tree); err != nil {
		return nil, err
	}
	return c.out, nil
}

// applyRecord applies a record to the state whose header c holds.
func (c *applyCtx) applyRecord(partition int32, offset int64, value []byte, decodeErr error) error {
	// A run keeps the rule version it started under, whatever build folds
	// its later records: its first record fixes it.
	switch {
	case c.h.facts == 0:
		c.h.rules = uint64(c.rules)
	case c.h.rules == 0:
		c.h.rules = MinRuleVersion // a state from before the version was kept
	}
	if !SupportsRuleVersion(int(c.h.rules)) {
		return fmt.Errorf("projections: run %s is folded under rule version %d, which this build does not implement", c.run, c.h.rules)
	}
	c.rules = int(c.h.rules)
	c.h.facts++
	c.pos = FactPosition{Seq: c.h.facts, Partition: partition, Offset: offset}
	if err := c.appendLeaf(c.digests.leaf[:]); err != nil {
		return err
	}

	var err error
	if decodeErr != nil {
		err = c.finding(Finding{Kind: FindingUndecodable, Detail: decodeErr.Error()})
	} else {
		err = c.apply(value)
	}
	if err == nil {
		err = c.checkpoint()
	}
	return err
}

// FoldAll folds recs, in order, into a fresh [MemStore] and returns every
// decision.
func FoldAll(run string, recs []Record) ([]Decision, error) {
	f, s := NewFold(run), NewMemStore()
	var out []Decision
	for i, r := range recs {
		ds, err := f.Apply(s, r)
		if err != nil {
			return out, fmt.Errorf("record %d: %w", i, err)
		}
		out = append(out, ds...)
	}
	return out, nil
}

// applyCtx is the working set of one Apply: the header, the position of the
// record, and the decisions reached so far.
type applyCtx struct {
	run   string
	rules int // the rule version
	s     Store
	h     header
	pos   FactPosition
	ev    events.Event
	cfg   *events.Config
	out   []Decision
	// tree is the fact tree with this record appended.
	tree *Tree
	// override adjusts the run's config, recorded replaces the defaults
	// run.started resolves onto (see FoldOptions).
	override func(*events.Config)
	recorded *events.Config
	cache    *treeCache
	// digests are the record value's (see HashValue); key is the fold's
	// room for a key the Store copies. Apply, the one caller of apply,
	// sets both.
	digests *Digests
	key     *[]byte
	// repeat is set when the record repeats an event id (Fold.Repeat).
	repeat *bool
	// wb is the fold's write-back cache, nil when it writes through.
	wb *writeBack
	// noSamples writes a sealed batch's samples into its digest only
	// (FoldOptions.NoSamples).
	noSamples bool
	// samplesTo is FoldOptions.SamplesTo.
	samplesTo func(seq uint64, write func(io.Writer) error) error
}

func (c *applyCtx) apply(value []byte) error {
	dup, err := c.dedup(value)
	if dup && c.repeat != nil {
		*c.repeat = true
	}
	if err != nil || dup {
		return err
	}
	switch d := c.ev.Data.(type) {
	case *events.RunStarted:
		return c.runStarted(d)
	case *events.TaskRegistered:
		return c.taskRegistered(d)
	case *events.GroupStarted:
		return c.groupStarted(d)
	case *events.AttemptStarted:
		return c.attemptStarted(d)
	case *events.TurnGenerated:
		return c.turnGenerated(d)
	case *events.ContextCompacted:
		return c.contextCompacted(d)
	case *events.AttemptFinished:
		return c.attemptSettled(d.Attempt, false)
	case *events.AttemptFailed:
		return c.attemptSettled(d.Attempt, true)
	case *events.RewardComputed:
		return c.rewardComputed(d)
	case *events.GroupClosed:
		return c.groupClosed(d)
	case *events.GradientApplied:
		return c.gradientApplied(d)
	case *events.ToolCalled, *events.PolicyPublished, *events.VocabularyRegistered:
		// Inputs of the audit and analyst projections, not of decisions:
		// staleness is measured against the batch's step, not against
		// what was published when.
		return nil
	default:
		return fmt.Errorf("projections: no rule for fact type %s", c.ev.Type)
	}
}

// dedup records the record's id and reports whether the record repeats one
// already applied (docs/design.md §5.4): identical bytes are dropped silently,
// different bytes are a conflicting duplicate and ignored as well.
func (c *applyCtx) dedup(value []byte) (bool, error) {
	sum := c.digests.sum[:]
	prev, ok, err := c.recordEvent()
	if err != nil || !ok {
		return false, err
	}
	if bytes.Equal(prev, sum) {
		return true, nil
	}
	return true, c.finding(Finding{
		Kind: FindingConflictingDuplicate, Event: c.ev.ID, Type: c.ev.Type,
		Detail: fmt.Sprintf("event %s was first applied with sha256 %s; this record has sha256 %s and is ignored",
			c.ev.ID, hex.EncodeToString(prev), hex.EncodeToString(sum)),
	})
}

// recordEvent returns the digest the dedup index holds for the record's
// event id, or records the record's there: in one call of a store that
// keeps the index itself ([EventIndex]), else a Get and a Set.
func (c *applyCtx) recordEvent() (prev []byte, seen bool, err error) {
	if ix, ok := c.s.(EventIndex); ok {
		if id, ok := parseUUID(c.ev.ID); ok {
			return ix.RecordEvent(id, &c.digests.sum)
		}
	}
	key := appendEventKey((*c.key)[:0], c.ev.ID)
	*c.key = key
	if prev, seen, err = c.s.Get(key); err != nil || seen {
		return prev, seen, err
	}
	return nil, false, c.s.Set(key, c.digests.sum[:])
}

func (c *applyCtx) runStarted(d *events.RunStarted) error {
	if c.h.configured {
		return c.finding(Finding{Kind: FindingDuplicateRunStarted, Event: c.ev.ID, Type: c.ev.Type,
			Detail: "the run already started; this run.started and its config are ignored"})
	}
	c.h.configured = true
	base := events.DefaultConfig()
	if c.recorded != nil {
		base = *c.recorded
	}
	cfg := d.Config.ResolveOnto(base)
	if c.override != nil {
		c.override(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return c.finding(Finding{Kind: FindingInvalidConfig, Event: c.ev.ID, Type: c.ev.Type,
			Detail: "the default config stays in force: " + err.Error()})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	c.cfg = &cfg
	return c.s.Set([]byte(keyConfig), b)
}

func (c *applyCtx) taskRegistered(d *events.TaskRegistered) error {
	t, err := c.task(d.Task)
	if err != nil {
		return err
	}
	if t.registered {
		return c.duplicate(Finding{Task: d.Task}, "task "+d.Task+" is already registered")
	}
	t.registered = true
	return c.putTask(d.Task, &t)
}

func (c *applyCtx) loadHeader() error {
	b, ok, err := c.s.Get([]byte(keyHeader))
	if err != nil || !ok {
		return err
	}
	c.h, err = decodeHeader(b)
	return err
}

// config is the run's configuration at this position: the resolved config
// of run.started, or the defaults before it.
func (c *applyCtx) config() (events.Config, error) {
	if c.cfg != nil {
		return *c.cfg, nil
	}
	cfg := events.DefaultConfig()
	stored := false
	if c.h.configured {
		b, ok, err := c.s.Get([]byte(keyConfig))
		if err != nil {
			return cfg, err
		}
		if ok {
			if err := json.Unmarshal(b, &cfg); err != nil {
				return cfg, fmt.Errorf("%w: config: %v", ErrCorruptState, err)
			}
			stored = true
		}
	}
	// The stored config had the override applied when run.started was;
	// the defaults get it here.
	if !stored && c.override != nil {
		adjusted := cfg
		c.override(&adjusted)
		if adjusted.Validate() == nil {
			cfg = adjusted
		}
	}
	c.cfg = &cfg
	return cfg, nil
}

// emit appends a decision of kind with the given seq, caused by the record
// being applied.
func (c *applyCtx) emit(kind events.Type, seq uint64, data any, samples []byte) error {
	d, err := events.CanonicalJSON(data)
	if err != nil {
		return fmt.Errorf("projections: encode %s data: %w", kind, err)
	}
	return c.emitJSON(kind, seq, d, samples, nil)
}

// emitJSON is emit for data already in canonical JSON; m is the manifest
// of a batch.sealed.
func (c *applyCtx) emitJSON(kind events.Type, seq uint64, data []byte, samples []byte, m *Manifest) error {
	e := c.envelope(kind, seq)
	v, at, err := envelopeJSON(e, data)
	if err != nil {
		return fmt.Errorf("projections: encode %s: %w", kind, err)
	}
	c.push(e, seq, v, at, samples, m)
	return nil
}

// envelope is the envelope of the decision of kind with seq that the
// record being applied causes, without its data.
func (c *applyCtx) envelope(kind events.Type, seq uint64) Envelope {
	return Envelope{
		ID: events.DecisionID(c.run, kind, seq), Run: c.run, Type: kind, V: DecisionSchemaVersion,
		Source: DecisionSource, RuleVersion: c.rules, Fact: c.pos,
	}
}

// push appends the decision of envelope e with seq whose canonical JSON is
// v, its data from at to the envelope's closing brace.
func (c *applyCtx) push(e Envelope, seq uint64, v []byte, at int, samples []byte, m *Manifest) {
	end := len(v) - 1
	c.out = append(c.out, Decision{ID: e.ID, Run: e.Run, Kind: e.Type, Seq: seq, Value: v, Samples: samples,
		Data: v[at:end:end], Manifest: m, Fact: e.Fact})
}

// envelopeJSON is the canonical JSON of e with data, canonical JSON, as
// its Data, and where data starts in it: data put after envelopeHead as
// it is, since encoding/json would check and copy it again, all of a
// batch's manifest (TestEnvelopeJSON holds the two the same).
func envelopeJSON(e Envelope, data []byte) ([]byte, int, error) {
	head, err := envelopeHead(e)
	if err != nil {
		return nil, 0, err
	}
	out := make([]byte, 0, len(head)+len(data)+1)
	out = append(out, head...)
	out = append(out, data...)
	return append(out, '}'), len(head), nil
}

// envelopeHead is the canonical JSON of e up to its data: Data is the
// envelope's last field, so what follows is the data and a closing brace.
func envelopeHead(e Envelope) ([]byte, error) {
	const tail = `"data":0}`
	e.Data = json.RawMessage("0")
	head, err := events.CanonicalJSON(e)
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(head, []byte(tail)) {
		return nil, fmt.Errorf("the envelope's encoding does not end with its data: %.40q", head[max(0, len(head)-40):])
	}
	return head[:len(head)-2], nil
}

func (c *applyCtx) finding(f Finding) error {
	c.h.findings++
	return c.emit(KindAuditFinding, c.h.findings, f, nil)
}

// duplicate reports the record as a second declaration of something
// already known, which the fold ignores.
func (c *applyCtx) duplicate(f Finding, what string) error {
	f.Kind, f.Event, f.Type = FindingDuplicateEntity, c.ev.ID, c.ev.Type
	f.Detail = what + "; this " + string(c.ev.Type) + " is ignored"
	return c.finding(f)
}

func (c *applyCtx) task(id string) (taskState, error) {
	b, ok, err := c.s.Get(taskKey(id))
	if err != nil || !ok {
		return taskState{}, err
	}
	return decodeTask(b)
}

func (c *applyCtx) putTask(id string, t *taskState) error { return c.s.Set(taskKey(id), t.encode()) }

func (c *applyCtx) group(id string) (groupState, error) {
	if c.wb != nil {
		return c.wb.group(c.s, id)
	}
	return c.storedGroup(id)
}

func (c *applyCtx) storedGroup(id string) (groupState, error) {
	b, ok, err := c.s.Get(groupKey(id))
	if err != nil || !ok {
		return groupState{}, err
	}
	return decodeGroup(b)
}

func (c *applyCtx) putGroup(id string, g *groupState) error {
	if c.wb != nil {
		return c.wb.putGroup(c.s, id, g)
	}
	return c.s.Set(groupKey(id), g.encode())
}

func (c *applyCtx) attempt(id string) (attemptState, error) {
	if c.wb != nil {
		return c.wb.attempt(c.s, id)
	}
	return c.storedAttempt(id)
}

func (c *applyCtx) storedAttempt(id string) (attemptState, error) {
	b, ok, err := c.s.Get(attemptKey(id))
	if err != nil || !ok {
		return attemptState{}, err
	}
	return decodeAttempt(b)
}

func (c *applyCtx) putAttempt(id string, a *attemptState) error {
	if c.wb != nil {
		return c.wb.putAttempt(c.s, id, a)
	}
	return c.s.Set(attemptKey(id), a.encode())
}
