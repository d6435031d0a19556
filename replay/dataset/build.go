package dataset

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// ErrNoFacts is returned for a source that holds no fact of its run.
var ErrNoFacts = errors.New("dataset: the run has no facts")

// Run is one run's history as tables: the rows every format is written
// from, in a fixed order (attempts by their attempt.started, turns and tool
// calls by their fact, batches and samples by seq), so the same history
// gives the same rows.
type Run struct {
	Run    string
	Source string
	// Head is the fact tree's head after the last fact folded: the ledger
	// head the export was taken from. Facts is its size.
	Head  projections.TreeHead
	Facts uint64
	// Model, Harness and Notes are run.started's; Declared the
	// configuration it declared and Config the effective one.
	Model, Harness, Notes string
	Declared              events.RunConfig
	Config                events.Config
	RuleVersion           int
	// Decisions counts the decisions the fold concluded, by kind.
	Decisions projections.DecisionCounts

	// The attempts, turns and tool calls wait on disk (rows.go,
	// attempts.go) and are read back by the writers: EachAttempt.
	Batches []*Batch
	// Tasks are the tasks registered, in the order of their first
	// task.registered, with the admission the fold decided for each.
	Tasks []*Task

	tasks map[string]*Task
	// rows holds the turns, tool calls and judgements (rows.go); forTables
	// and forTrajectories say which of their keys Build wrote.
	rows                       *rowStore
	forTables, forTrajectories bool
	// enc encodes the rows Build puts there (rowcodec.go).
	enc rowEncoder
	// attempts are the attempts the fold touched last, by id, also those
	// mentioned before (or without) their attempt.started; the others are
	// in rows (attempts.go): attemptsStored counts the summaries written
	// there, attemptCount the attempts that started. purposes is each
	// group's purpose, dropped the reason each dropped group was dropped
	// for.
	attempts       map[string]*Attempt
	attemptsStored int
	attemptCount   int
	attemptsMet    uint64 // the last ordinal given (Attempt.ord)
	purposes       map[string]string
	dropped        map[string]string
	// spill holds, one after another, the turns' and tool calls' text and
	// the turns' token arrays when Options.Tokens keeps them: on disk, so that a
	// run's text and tokens do not all sit in memory until the files that
	// carry them are written. win is a window of it read ahead, for text
	// read in the order it was written; spillErr the first read error.
	spill     *os.File
	spillSize int64
	win       []byte
	winAt     int64
	spillErr  error
	// scattered says text is read an attempt at a time (trajectories).
	scattered bool
	// samples holds the batches' canonical samples when Options.Samples
	// keeps them, written by the fold as it seals each batch (Build's
	// samplesTo), while the rows are collected and the spill written on
	// another goroutine; samplesSize is its length, and extents says
	// where each batch's went, by seq, until its decision is collected.
	samples     *os.File
	samplesSize int64
	samplesW    *bufio.Writer
	extentsMu   sync.Mutex
	extents     map[uint64]extent
}

// extent is where a batch's samples sit in the samples file.
type extent struct {
	at int64
	n  int
}

// samplesTo writes a batch's samples to the end of the samples file as
// the fold seals it (projections.FoldOptions.SamplesTo): none of a batch's
// tokens are held at once.
func (r *Run) samplesTo(seq uint64, write func(io.Writer) error) error {
	at := r.samplesSize
	cw := &countWriter{w: r.samplesW}
	r.samplesW.Reset(io.NewOffsetWriter(r.samples, at))
	if err := write(cw); err != nil {
		return err
	}
	if err := r.samplesW.Flush(); err != nil {
		return fmt.Errorf("dataset: samples of run %s: %w", r.Run, err)
	}
	r.samplesSize += cw.n
	r.extentsMu.Lock()
	r.extents[seq] = extent{at: at, n: int(cw.n)}
	r.extentsMu.Unlock()
	return nil
}

// takeExtent returns where batch seq's samples were written, once; false
// when Build keeps no samples.
func (r *Run) takeExtent(seq uint64) (extent, bool) {
	r.extentsMu.Lock()
	defer r.extentsMu.Unlock()
	e, ok := r.extents[seq]
	delete(r.extents, seq)
	return e, ok
}

// spilled places a value in a run's spill file.
type spilled struct {
	At int64 `json:"a,omitempty"`
	N  int32 `json:"n,omitempty"`
}

// spillText appends s to the run's spill file; "" takes no room.
func (r *Run) spillText(s string) (spilled, error) {
	if s == "" {
		return spilled{}, nil
	}
	at, err := r.spillBytes([]byte(s))
	return spilled{At: at, N: int32(len(s))}, err
}

// textWindow is how much of the spill file a text read brings in at once
// for the tables, which read text in the order it was written;
// trajectoryWindow for the trajectories, which read an attempt's text,
// spread over the file among other attempts', a turn at a time.
const (
	textWindow       = 1 << 20
	trajectoryWindow = 16 << 10
)

// textOf reads a text back. A read error gives "" and is kept in spillErr,
// which the writers check before they keep a file (Run.Err).
func (r *Run) textOf(x spilled) string {
	if x.N == 0 || r.spill == nil {
		return ""
	}
	end := x.At + int64(x.N)
	if x.At < r.winAt || end > r.winAt+int64(len(r.win)) {
		window := int64(textWindow)
		if r.scattered {
			window = trajectoryWindow
		}
		n := min(max(window, int64(x.N)), r.spillSize-x.At)
		win, err := r.readSpill(x.At, int(n), r.win)
		if err != nil {
			r.win, r.winAt = r.win[:0], 0
			if r.spillErr == nil {
				r.spillErr = err
			}
			return ""
		}
		r.win, r.winAt = win, x.At
	}
	return string(r.win[x.At-r.winAt : end-r.winAt])
}

// TextOf is a turn's text ("" when the fact carried none).
func (r *Run) TextOf(t *Turn) string { return r.textOf(t.text) }

// InputOf and OutputOf are a tool call's input and output text.
func (r *Run) InputOf(c *ToolCall) string  { return r.textOf(c.input) }
func (r *Run) OutputOf(c *ToolCall) string { return r.textOf(c.output) }

// Err is the first error reading back what the run keeps on disk.
func (r *Run) Err() error { return r.spillErr }

// spillBytes appends b to the run's spill file and returns where it sits.
func (r *Run) spillBytes(b []byte) (int64, error) {
	at := r.spillSize
	if _, err := r.spill.WriteAt(b, at); err != nil {
		return 0, fmt.Errorf("dataset: spill of run %s: %w", r.Run, err)
	}
	r.spillSize += int64(len(b))
	return at, nil
}

// readSpill reads n bytes at at of the run's spill file into buf, grown
// as needed.
func (r *Run) readSpill(at int64, n int, buf []byte) ([]byte, error) {
	return readAt(r.spill, at, n, buf, "spill of run "+r.Run)
}

// readAt reads n bytes at at of f into buf, grown as needed.
func readAt(f *os.File, at int64, n int, buf []byte, what string) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := f.ReadAt(buf, at); err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", what, err)
	}
	return buf, nil
}

// Close removes what Build kept on disk for the run: the turns' and tool
// calls' text, the batches' samples, the turns' tokens. The rows' other
// columns stay readable; those read back empty.
func (r *Run) Close() error {
	var err error
	if r.rows != nil {
		err = r.rows.close()
		r.rows = nil
	}
	for _, f := range []**os.File{&r.spill, &r.samples} {
		if *f == nil {
			continue
		}
		if cerr := (*f).Close(); err == nil {
			err = cerr
		}
		if rerr := os.Remove((*f).Name()); err == nil {
			err = rerr
		}
		*f = nil
	}
	return err
}

// sampleChunkBytes is how much of a batch's samples is read back at once
// (Run.EachSample), or twice the largest sample when that is more; a
// variable for the tests.
var sampleChunkBytes = 8 << 20

// EachSample reads batch b's canonical binary samples (docs/design.md
// §7.4) back a window of the file at a time into buf (grown as needed and
// returned), and calls fn with each whole sample the window holds, in
// order, until fn returns false; a sample is valid until fn returns.
// Nothing is read when Build did not keep samples. A batch of a long
// run's samples is hundreds of megabytes, which reading it whole had held
// at once. The next window starts after the last whole sample; a window
// that holds none is doubled until it does, and samples that do not read
// to the batch's end are the reader's error.
func (r *Run) EachSample(b *Batch, buf []byte, fn func(*projections.SampleView) bool) ([]byte, error) {
	if r.samples == nil || b.samplesLen == 0 {
		return buf, nil
	}
	at, end := b.samplesAt, b.samplesAt+int64(b.samplesLen)
	window := sampleChunkBytes
	for at < end {
		n := int(min(int64(window), end-at))
		data, err := readAt(r.samples, at, n, buf, "samples of run "+r.Run)
		if err != nil {
			return buf, err
		}
		buf = data[:0]
		sr := projections.NewSampleReader(data)
		for sr.Next() {
			if !fn(sr.Sample()) {
				return buf, nil
			}
		}
		if sr.Err() != nil && at+int64(n) == end {
			return buf, sr.Err()
		}
		if sr.Offset() == 0 {
			window *= 2
			continue
		}
		at += int64(sr.Offset())
		window = sampleChunkBytes
	}
	return buf, nil
}

// TokensOf reads turn t's observation token ids, completion token ids and
// log-probs back; all nil when Build did not keep tokens (Options.Tokens).
func (r *Run) TokensOf(t *Turn) (obs, ids []int32, lps []float32, err error) {
	if r.spill == nil || t.tokensLen == 0 {
		return nil, nil, nil, nil
	}
	b, err := r.readSpill(t.tokensAt, t.tokensLen, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	nObs, nIDs := int(t.ObservationTokens), int(t.InlineTokens)
	obs, ids, lps = make([]int32, nObs), make([]int32, nIDs), make([]float32, len(b)/4-nObs-nIDs)
	for i := range obs {
		obs[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	b = b[4*nObs:]
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	b = b[4*nIDs:]
	for i := range lps {
		lps[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return obs, ids, lps, nil
}

// spillTokens appends a turn's token arrays to the run's spill file,
// little-endian, observation ids, completion ids, log-probs.
func (r *Run) spillTokens(t *Turn, obs, ids []int32, lps []float32) error {
	n := 4 * (len(obs) + len(ids) + len(lps))
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, n)
	for _, v := range obs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, v := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, v := range lps {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	at, err := r.spillBytes(b)
	t.tokensAt, t.tokensLen = at, n
	return err
}

// Attempt is one attempt.started with what the facts and the batch that
// used it say about it.
type Attempt struct {
	Seq                        uint64 // of its attempt.started
	Attempt, Group, Task       string
	Engine, RetryOf            string
	Purpose                    string // the group's, "" when no group.started
	Outcome, FailureReason     string // attempt.finished's and attempt.failed's, "" when none
	Rewarded, Passed           bool
	TestsPassed, TestsTotal    int
	Turns                      int
	CompletionTokens           int64
	PromptTokens, CachedTokens int64
	// Batch is the seq of the batch that trained the attempt, 0 for none;
	// then Score, Bonus, Reward, Advantage and TrainedShare (the share of
	// its judged turns that train) are the manifest's.
	Batch                                         uint64
	Score, Bonus, Reward, Advantage, TrainedShare float64
	// DropReason is the reason its train group was dropped, "" when not.
	DropReason string

	// ord numbers it in the order the fold first met it, from 1: the key
	// of its rows in the row store (rows.go).
	ord uint64
	// turns and calls are its turns and tool calls while its trajectory
	// is written (Run.trajectories), nil otherwise.
	turns []*Turn
	calls []*ToolCall
}

// Turn is one turn.generated, with its judgement in a batch.
type Turn struct {
	Seq                                    uint64
	Partition                              int32
	Offset                                 int64
	Attempt                                string
	Turn                                   int
	PromptTokens, CompletionTokens, Cached int64
	SegmentStarts, SegmentVersions         []int64
	ObservationTokens, InlineTokens        int64
	// tokensAt and tokensLen place the turn's token arrays in the run's
	// spill file when Options.Tokens keeps them (Run.TokensOf).
	tokensAt  int64
	tokensLen int
	// text is the turn's text in the run's spill file (Run.TextOf).
	text      spilled
	TextCut   int64
	Finish    string
	LatencyMS int64
	// Batch is the seq of the batch that judged the turn, 0 for none;
	// then Staleness (of its first segment), SegmentStaleness and Trained
	// are the manifest's.
	Batch            uint64
	Staleness        int64
	SegmentStaleness []int64
	SegmentTrained   []bool
	Trained          bool
}

// ToolCall is one tool.called.
type ToolCall struct {
	Seq                          uint64
	Attempt                      string
	Turn, Call                   int
	Tool                         string
	ExitCode                     int
	DurationMS, OutputBytes      int64
	ToFile, Background, TimedOut bool
	// input and output are the call's text in the run's spill file
	// (Run.InputOf, Run.OutputOf).
	input, output       spilled
	InputCut, OutputCut int64
}

// Batch is one batch.sealed decision and the gradient step that consumed
// it; Run.EachSample reads its samples.
type Batch struct {
	Manifest projections.Manifest
	// Fact is the position of the fact that sealed it.
	Fact projections.FactPosition
	// Step is the first gradient.applied reporting the batch, nil when
	// none did.
	Step *events.GradientApplied
	// samplesAt and samplesLen place its samples in the run's samples
	// file.
	samplesAt  int64
	samplesLen int
}

// Task is one task.registered (the first of its id) and the admission
// decision the fold made for it (docs/design.md §6.6).
type Task struct {
	Seq                uint64 // of its task.registered
	Task, Source, Kind string
	Tier               int
	Prompt             string
	PromptCut          int64
	// Admission is "admitted" or "rejected" once decided, else ""; then
	// Probes, Passes and PassRate are the decision's tally.
	Admission      string
	Probes, Passes int64
	PassRate       float64
}

// Admission values.
const (
	Admitted = "admitted"
	Rejected = "rejected"
)

// Prompt is the prompt of a task as registered ("" when not given) and the
// bytes of it left out.
func (r *Run) Prompt(taskID string) (string, int64) {
	if t := r.tasks[taskID]; t != nil {
		return t.Prompt, t.PromptCut
	}
	return "", 0
}

// Options tune [Build].
type Options struct {
	// OnFact, when set, is called after each fact is folded: progress.
	OnFact func(replay.Fact)
	// Tokens keeps each turn's token ids and log-probs (the trajectory
	// formats carry them; the tables carry the samples' instead).
	Tokens bool
	// ScratchDir is where the fold's state, the run's spill file (text,
	// and the tokens kept) and its samples file are kept on disk; empty
	// means the system's temporary directory.
	ScratchDir string
	// Samples keeps each batch's samples, on disk until Run.Close (the
	// tables carry them; the trajectory formats do not).
	Samples bool

	// rows says which rows Build keeps for the writers; zero keeps both.
	rows rowKinds
}

// rowKinds are the rows Build keeps: for the tables, in log order, and
// for the trajectories, by attempt.
type rowKinds int

const (
	rowsForAll rowKinds = iota
	rowsForTables
	rowsForTrajectories
)

// Build folds src's facts with the projection rules (the replay fold) and
// collects its tables. Facts that do not decode, and facts whose id was
// seen before (duplicates the fold ignores as well), give no row.
func Build(ctx context.Context, src replay.Source, o Options) (*Run, error) {
	r := &Run{Run: src.Run(), Source: src.Describe(), RuleVersion: projections.RuleVersion, tasks: map[string]*Task{}}
	f, err := os.CreateTemp(o.ScratchDir, "rolloutledger-export-")
	if err != nil {
		return nil, fmt.Errorf("dataset: spill of run %s: %w", r.Run, err)
	}
	r.spill = f
	if o.Samples {
		if r.samples, err = os.CreateTemp(o.ScratchDir, "rolloutledger-export-samples-"); err != nil {
			r.Close()
			return nil, fmt.Errorf("dataset: samples of run %s: %w", r.Run, err)
		}
		r.samplesW, r.extents = bufio.NewWriterSize(nil, 1<<20), map[uint64]extent{}
	}
	if r.rows, err = openRowStore(o.ScratchDir); err != nil {
		r.Close()
		return nil, err
	}
	r.forTables, r.forTrajectories = o.rows != rowsForTrajectories, o.rows != rowsForTables
	r.attempts, r.purposes, r.dropped = map[string]*Attempt{}, map[string]string{}, map[string]string{}
	interned := map[string]string{}
	intern := func(s string) string {
		if v, ok := interned[s]; ok {
			return v
		}
		interned[s] = s
		return s
	}
	built := false
	defer func() {
		if !built {
			r.Close()
		}
	}()
	attemptOf := r.attemptOf
	purposes := r.purposes
	batchOf := map[int64]*Batch{}
	var steps []*events.GradientApplied
	collect := func(f replay.Fact, ds []projections.Decision) error {
		r.Facts = f.Seq
		if err := r.decisions(f, ds, batchOf); err != nil {
			return err
		}
		defer func() {
			if o.OnFact != nil {
				o.OnFact(f)
			}
		}()
		ev := f.Event
		if ev.Type == "" || f.Repeat {
			return nil
		}
		switch d := ev.Data.(type) {
		case *events.RunStarted:
			if r.Model == "" && r.Harness == "" {
				r.Model, r.Harness, r.Notes, r.Declared = d.Model, d.Harness, d.Notes, d.Config
			}
		case *events.TaskRegistered:
			if t := r.tasks[d.Task]; t == nil || t.Seq == 0 {
				if t == nil {
					t = &Task{Task: d.Task}
					r.tasks[d.Task] = t
				}
				t.Seq, t.Source, t.Kind, t.Tier, t.Prompt, t.PromptCut = f.Seq, d.Source, d.Kind, d.Tier, d.Prompt, d.PromptCut
				r.Tasks = append(r.Tasks, t)
			}
		case *events.GroupStarted:
			if _, ok := purposes[d.Group]; !ok {
				purposes[d.Group] = d.Purpose
			}
		case *events.AttemptStarted:
			a, err := attemptOf(d.Attempt)
			if err != nil || a.Seq != 0 {
				return err
			}
			a.Seq, a.Group, a.Task, a.Engine, a.RetryOf = f.Seq, d.Group, intern(d.Task), intern(d.Engine), d.RetryOf
			return r.started(a)
		case *events.TurnGenerated:
			a, err := attemptOf(d.Attempt)
			if err != nil {
				return err
			}
			t := &Turn{Seq: f.Seq, Partition: f.Partition, Offset: f.Offset, Attempt: a.Attempt, Turn: d.Turn,
				PromptTokens: d.PromptTokens, CompletionTokens: d.CompletionTokens, Cached: d.CachedTokens,
				ObservationTokens: int64(len(d.ObservationTokenIDs)), InlineTokens: int64(len(d.TokenIDs)),
				TextCut: d.TextCut, Finish: intern(d.Finish), LatencyMS: d.LatencyMS}
			text, err := r.spillText(d.Text)
			if err != nil {
				return err
			}
			t.text = text
			if o.Tokens {
				if err := r.spillTokens(t, d.ObservationTokenIDs, d.TokenIDs, d.Logprobs); err != nil {
					return err
				}
			}
			for _, s := range d.VersionSegments {
				t.SegmentStarts = append(t.SegmentStarts, s.Start)
				t.SegmentVersions = append(t.SegmentVersions, s.PolicyVersion)
			}
			if err := r.putTurn(a, t); err != nil {
				return err
			}
			a.Turns++
			a.CompletionTokens += d.CompletionTokens
			a.PromptTokens += d.PromptTokens
			a.CachedTokens += d.CachedTokens
		case *events.ToolCalled:
			a, err := attemptOf(d.Attempt)
			if err != nil {
				return err
			}
			c := &ToolCall{Seq: f.Seq, Attempt: a.Attempt, Turn: d.Turn, Call: d.Call, Tool: intern(d.Tool), ExitCode: d.ExitCode,
				DurationMS: d.DurationMS, OutputBytes: d.OutputBytes, ToFile: d.ToFile, Background: d.Background,
				TimedOut: d.TimedOut, InputCut: d.InputCut, OutputCut: d.OutputCut}
			input, err := r.spillText(d.Input)
			if err != nil {
				return err
			}
			output, err := r.spillText(d.Output)
			if err != nil {
				return err
			}
			c.input, c.output = input, output
			if err := r.putCall(a, c); err != nil {
				return err
			}
		case *events.AttemptFinished:
			a, err := attemptOf(d.Attempt)
			if err == nil && a.Outcome == "" {
				a.Outcome = intern(d.Outcome)
			}
			return err
		case *events.AttemptFailed:
			a, err := attemptOf(d.Attempt)
			if err == nil && a.FailureReason == "" {
				a.FailureReason = intern(d.Reason)
			}
			return err
		case *events.RewardComputed:
			a, err := attemptOf(d.Attempt)
			if err == nil && !a.Rewarded {
				a.Rewarded, a.Passed, a.TestsPassed, a.TestsTotal = true, d.Passed, d.TestsPassed, d.TestsTotal
			}
			return err
		case *events.GradientApplied:
			steps = append(steps, d)
		}
		return nil
	}
	var view projections.StateView
	var samplesTo func(uint64, func(io.Writer) error) error
	if o.Samples {
		samplesTo = r.samplesTo
	}
	err = foldInto(ctx, src, o, samplesTo, collect, func(store projections.Store) (err error) {
		view, err = projections.ViewSummary(store)
		return err
	})
	if err != nil {
		return nil, err
	}
	if r.Facts == 0 {
		return nil, fmt.Errorf("%w: %s holds none of run %s", ErrNoFacts, src.Describe(), src.Run())
	}
	r.Head, r.Config, r.Decisions = view.Tree, view.Config, view.Decisions
	for _, g := range steps {
		if b := batchOf[g.Batch]; b != nil && b.Step == nil {
			b.Step = g
		}
	}
	if err := r.storeAttempts(); err != nil {
		return nil, err
	}
	r.attempts = nil
	built = true
	return r, nil
}

// foldInto folds src and hands each fact and its decisions to collect on
// another goroutine, in order: collecting rows costs a fraction of the
// fold, and need not wait for it. An error of collect is returned once the
// fold ends.
func foldInto(ctx context.Context, src replay.Source, o Options, samplesTo func(uint64, func(io.Writer) error) error, collect func(replay.Fact, []projections.Decision) error, end func(projections.Store) error) error {
	type item struct {
		f  replay.Fact
		ds []projections.Decision
	}
	const batch = 512
	ch := make(chan []item, 8)
	done := make(chan error, 1)
	go func() {
		var err error
		for items := range ch {
			for _, it := range items {
				if err == nil {
					err = collect(it.f, it.ds)
				}
			}
		}
		done <- err
	}()
	buf := make([]item, 0, batch)
	err := replay.Fold(ctx, src, replay.FoldOptions{ScratchDir: o.ScratchDir, NoSamples: !o.Samples, SamplesTo: samplesTo}, func(f replay.Fact, ds []projections.Decision) error {
		f.Value = nil // the rows are read from the decoded event
		if buf = append(buf, item{f, ds}); len(buf) == batch {
			select {
			case ch <- buf:
			case <-ctx.Done():
				return ctx.Err()
			}
			buf = make([]item, 0, batch)
		}
		return nil
	}, end)
	if err == nil && len(buf) > 0 {
		ch <- buf
	}
	close(ch)
	if cerr := <-done; err == nil {
		err = cerr
	}
	return err
}

// decisions keeps the batches the fold sealed at f.
func (r *Run) decisions(f replay.Fact, ds []projections.Decision, batchOf map[int64]*Batch) error {
	for _, d := range ds {
		if d.Kind == projections.KindTaskAdmitted || d.Kind == projections.KindTaskRejected {
			if err := r.admission(d); err != nil {
				return err
			}
			continue
		}
		if d.Kind != projections.KindBatchSealed {
			continue
		}
		var env projections.Envelope
		if err := json.Unmarshal(d.Value, &env); err != nil {
			return fmt.Errorf("dataset: batch %d of run %s: %w", d.Seq, r.Run, err)
		}
		b := &Batch{Fact: env.Fact}
		if err := json.Unmarshal(env.Data, &b.Manifest); err != nil {
			return fmt.Errorf("dataset: manifest of batch %d of run %s: %w", d.Seq, r.Run, err)
		}
		if e, ok := r.takeExtent(b.Manifest.Seq); ok {
			b.samplesAt, b.samplesLen = e.at, e.n
		}
		if err := r.judge(&b.Manifest); err != nil {
			return err
		}
		b.Manifest.Groups = nil // judged; the rows hold what it said
		r.Batches = append(r.Batches, b)
		batchOf[int64(b.Manifest.Seq)] = b
	}
	return nil
}

// admission keeps a task's admission decision. A task decided before (or
// without) its task.registered gets its row when, and only if, that comes.
func (r *Run) admission(d projections.Decision) error {
	var env projections.Envelope
	var a projections.Admission
	err := json.Unmarshal(d.Value, &env)
	if err == nil {
		err = json.Unmarshal(env.Data, &a)
	}
	if err != nil {
		return fmt.Errorf("dataset: admission of run %s: %w", r.Run, err)
	}
	t := r.tasks[a.Task]
	if t == nil {
		t = &Task{Task: a.Task}
		r.tasks[a.Task] = t
	}
	t.Admission, t.Probes, t.Passes, t.PassRate = Rejected, a.Probes, a.Passes, a.PassRate
	if d.Kind == projections.KindTaskAdmitted {
		t.Admission = Admitted
	}
	return nil
}

// putTurn and putCall keep a turn and a tool call of a for the writers.
func (r *Run) putTurn(a *Attempt, t *Turn) error {
	r.enc.b = r.enc.b[:0]
	r.enc.turn(t)
	if r.forTables {
		if err := r.rows.put(turnKey(t.Seq), r.enc.b); err != nil {
			return err
		}
	}
	if r.forTrajectories {
		return r.rows.put(attemptTurnKey(a.ord, t), r.enc.b)
	}
	return nil
}

func (r *Run) putCall(a *Attempt, c *ToolCall) error {
	r.enc.b = r.enc.b[:0]
	r.enc.call(c)
	if r.forTables {
		if err := r.rows.put(callKey(c.Seq), r.enc.b); err != nil {
			return err
		}
	}
	if r.forTrajectories {
		return r.rows.put(attemptCallKey(a.ord, c), r.enc.b)
	}
	return nil
}

// judge keeps what a sealed batch concluded of the attempts and turns it
// used: on the attempts (in memory), and by turn position (on disk), where
// a later batch's judgement replaces an earlier one's.
func (r *Run) judge(m *projections.Manifest) error {
	for _, d := range m.Dropped {
		r.dropped[d.Group] = d.Reason
	}
	for _, g := range m.Groups {
		for _, ba := range g.Attempts {
			a, err := r.attemptOf(ba.Attempt)
			if err != nil {
				return err
			}
			a.Batch, a.Score, a.Bonus, a.Reward, a.Advantage = m.Seq, ba.Score, ba.Bonus, ba.Reward, ba.Advantage
			trained := 0
			for _, bt := range ba.Turns {
				if bt.Trained {
					trained++
				}
				j := judgement{Batch: m.Seq, Staleness: bt.Staleness, Trained: bt.Trained}
				if len(bt.Segments) == 0 {
					j.SegmentStaleness, j.SegmentTrained = []int64{bt.Staleness}, []bool{bt.Trained}
				}
				for _, s := range bt.Segments {
					j.SegmentStaleness = append(j.SegmentStaleness, s.Staleness)
					j.SegmentTrained = append(j.SegmentTrained, s.Trained)
				}
				r.enc.b = r.enc.b[:0]
				r.enc.judgement(&j)
				if r.forTables {
					if err := r.rows.put(judgementKey(bt.Partition, bt.Offset), r.enc.b); err != nil {
						return err
					}
				}
				if r.forTrajectories {
					// Beside the attempt's turns: a trajectory reads its
					// judgements in one scan, not a lookup a turn.
					if err := r.rows.put(attemptJudgementKey(a.ord, bt.Partition, bt.Offset), r.enc.b); err != nil {
						return err
					}
				}
			}
			if len(ba.Turns) > 0 {
				a.TrainedShare = float64(trained) / float64(len(ba.Turns))
			}
		}
	}
	return nil
}
