package explore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// The explorer's model of a run is kept as records under one key prefix
// per run (docs/design.md §12.4): the projector writes them in the same
// Pebble batch as its own state and the offsets past the facts they fold,
// so they are exactly once, like every projection, and a view reads the
// few records it shows instead of folding the run's history. A [Model]
// keeps the same records in memory, for an archive's bundle and tests.
//
// Keys, after the run's prefix (entity ids cannot hold NUL, which ends
// them; numbers are big endian so that keys sort in their order):
//
//	Z                           the run's summary (sumRec)
//	A attempt                   an attempt (attRec)
//	a ord                       the ord-th attempt started: its id
//	G group, g ord              a group (grpRec), the ord-th group named
//	T task, t ord               a task (taskRec), the ord-th task named
//	H task 0 ord                the ord-th group of a task: its id
//	N seq kind task             the funnel: task registered (r), probed (p), admitted (a) or rejected (x) by fact seq
//	U attempt 0 turn            a turn.generated: its position and record value
//	C attempt 0 turn call seq   a tool.called: its record value
//	K attempt 0 turn            a context.compacted: its record value
//	R attempt                   a retry seen before the attempt it retries: the retry's id
//	B seq, S seq                a sealed batch's manifest (batchRec), its step (stepRec)
//	D batch                     the first gradient.applied of a batch (gradRec)
//	P ord, F ord                a policy.published (polRec), a finding ([Finding])
//	V engine, W engine 0 chunk  an engine's vocabulary (vocabRec), one chunk's record value
//	M partition offset          a misrouted finding ([Finding]), written outside the run's fold
const (
	kSummary    = 'Z'
	kAttempt    = 'A'
	kAttemptOrd = 'a'
	kGroup      = 'G'
	kGroupOrd   = 'g'
	kTask       = 'T'
	kTaskOrd    = 't'
	kTaskGroup  = 'H'
	kFunnel     = 'N'
	kTurn       = 'U'
	kTool       = 'C'
	kCompaction = 'K'
	kRetry      = 'R'
	kBatch      = 'B'
	kStep       = 'S'
	kGradient   = 'D'
	kPolicy     = 'P'
	kFinding    = 'F'
	kVocab      = 'V'
	kVocabChunk = 'W'
	kMisrouted  = 'M'
)

// Funnel kinds of the N keys.
const (
	funnelRegistered = 'r'
	funnelProbed     = 'p'
	funnelAdmitted   = 'a'
	funnelRejected   = 'x'
)

// Reader reads one run's explorer records: what a view reads. Keys are
// those of the layout above, without the run's prefix.
type Reader interface {
	Get(key []byte) (value []byte, ok bool, err error)
	// Scan calls fn with each key under prefix greater than after (from
	// the first when after is nil), in key order, until fn returns false.
	// Key and value are valid only during the call.
	Scan(prefix, after []byte, fn func(key, value []byte) (bool, error)) error
}

func key(kind byte, parts ...[]byte) []byte {
	k := []byte{kind}
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

func idKey(kind byte, id string) []byte { return append([]byte{kind}, id...) }

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// i64 orders signed numbers: the sign bit flipped.
func i64(n int64) []byte { return u64(uint64(n) ^ 1<<63) }

func turnKey(kind byte, attempt string, turn int) []byte {
	k := append([]byte{kind}, attempt...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(int32(turn))^1<<31)
}

func turnOf(k []byte) int { return int(int32(binary.BigEndian.Uint32(k[len(k)-4:]) ^ 1<<31)) }

// attemptPrefix is the prefix of an attempt's keys of kind (turns, tools,
// compactions).
func attemptPrefix(kind byte, attempt string) []byte {
	return append(append([]byte{kind}, attempt...), 0)
}

// sumRec is the run's summary: its counters, and what every view shows
// at the top.
type sumRec struct {
	Facts      uint64         `json:"facts"`
	FirstAt    time.Time      `json:"first_at"`
	LastAt     time.Time      `json:"last_at"`
	ArrivedAt  time.Time      `json:"arrived_at"`
	Versions   map[int]uint64 `json:"versions"`
	Configured bool           `json:"configured"`
	Config     events.Config  `json:"config"`
	// Partial says the records began after the run's first fact (the
	// run was folded before the explorer's records were kept): its views
	// are made from the topics instead.
	Partial bool `json:"partial,omitempty"`

	Sealed   int    `json:"sealed"`
	MaxBatch uint64 `json:"max_batch"`
	Admitted int    `json:"admitted"` // decisions
	Rejected int    `json:"rejected"`
	Findings uint64 `json:"findings"`
	Policies uint64 `json:"policies"`
	Attempts uint64 `json:"attempts"` // started
	Groups   uint64 `json:"groups"`   // named
	Tasks    uint64 `json:"tasks"`    // named
	// The funnel at the run's end.
	Registered    int `json:"registered"`
	Probed        int `json:"probed"`
	AdmittedTasks int `json:"admitted_tasks"`
	RejectedTasks int `json:"rejected_tasks"`
	// InFlight counts the train groups started, neither in a batch nor
	// dropped.
	InFlight int `json:"in_flight"`
	// Drops counts the groups the batches dropped, by reason; DropsKept
	// says it does (records made before it did count them from the
	// steps).
	Drops     map[string]int `json:"drops,omitempty"`
	DropsKept bool           `json:"drops_kept,omitempty"`
	// Engines are the engines with a vocabulary, in the order first
	// registered.
	Engines []string `json:"engines,omitempty"`
}

type rewardRec struct {
	Passed      bool `json:"p"`
	TestsPassed int  `json:"tp"`
	TestsTotal  int  `json:"tt"`
}

// attRec is an attempt: started or only named so far.
type attRec struct {
	S         *events.AttemptStarted    `json:"s,omitempty"` // nil until its attempt.started
	Fact      projections.FactPosition  `json:"f"`
	Ord       uint64                    `json:"o,omitempty"`
	Slot      int                       `json:"sl,omitempty"`
	RetriedBy string                    `json:"rb,omitempty"`
	Outcome   string                    `json:"oc,omitempty"`
	Failed    string                    `json:"fl,omitempty"`
	Reward    *rewardRec                `json:"rw,omitempty"`
	Batch     uint64                    `json:"b,omitempty"`
	Judged    *projections.BatchAttempt `json:"j,omitempty"`
	// Gen are the turns generated, in order, and Tok their completion
	// tokens; Prompt sums their prompt tokens, Finish is the last one's
	// finish reason.
	Gen    []int32 `json:"g,omitempty"`
	Tok    []int64 `json:"t,omitempty"`
	Prompt int64   `json:"p,omitempty"`
	Finish string  `json:"fin,omitempty"`
	Tools  int     `json:"tc,omitempty"`
	// Comp are the turns with a context.compacted.
	Comp []int32 `json:"k,omitempty"`
}

func (a *attRec) started() bool { return a.S != nil }

// turnIndex is where turn n is (or would go) in Gen.
func (a *attRec) turnIndex(n int) (int, bool) { return slices.BinarySearch(a.Gen, int32(n)) }

func (a *attRec) tokens(n int64) int64 {
	if i, ok := a.turnIndex(int(n)); ok {
		return a.Tok[i]
	}
	return 0
}

// judgedTurn is the batch's judgement of turn n, nil when none.
func (a *attRec) judgedTurn(n int) *projections.BatchTurn {
	if a.Judged == nil {
		return nil
	}
	for i := range a.Judged.Turns {
		if a.Judged.Turns[i].Turn == int64(n) {
			return &a.Judged.Turns[i]
		}
	}
	return nil
}

func (a *attRec) id(fallback string) string {
	if a.S != nil {
		return a.S.Attempt
	}
	return fallback
}

// grpRec is a group.
type grpRec struct {
	S        *events.GroupStarted     `json:"s,omitempty"`
	Fact     projections.FactPosition `json:"f"`
	Ord      uint64                   `json:"o"`
	Members  []string                 `json:"m,omitempty"`
	Closed   string                   `json:"c,omitempty"`
	Batch    uint64                   `json:"b,omitempty"`
	Dropped  string                   `json:"d,omitempty"`
	DropSeal uint64                   `json:"ds,omitempty"`
	Slots    int                      `json:"sl,omitempty"`
	InFlight bool                     `json:"if,omitempty"`
}

func (g *grpRec) purpose() string {
	if g.S == nil {
		return ""
	}
	return g.S.Purpose
}

func (g *grpRec) task() string {
	if g.S == nil {
		return ""
	}
	return g.S.Task
}

// taskRec is a task. Its groups are H keys, one each, so that the record
// stays the same size however many groups the run gives the task.
type taskRec struct {
	R    *events.TaskRegistered   `json:"r,omitempty"`
	Fact projections.FactPosition `json:"f"`
	Ord  uint64                   `json:"o"`
	// NGroups counts the task's H keys. Groups is the list a record
	// written before them held; the writer moves it to H keys when it
	// next adds a group.
	NGroups     int                      `json:"ng,omitempty"`
	Groups      []string                 `json:"g,omitempty"`
	Decision    string                   `json:"d"`
	DecisionSeq uint64                   `json:"ds,omitempty"`
	DecidedAt   projections.FactPosition `json:"da"`
	Admission   projections.Admission    `json:"ad"`
	Probed      bool                     `json:"p,omitempty"`
	Attempts    int                      `json:"n,omitempty"`
	Solved      int                      `json:"s,omitempty"`
}

// groups is how many groups the task has.
func (t *taskRec) groups() int { return t.NGroups + len(t.Groups) }

// taskGroupKey is the key of a task's ord-th group.
func taskGroupKey(task string, ord uint64) []byte {
	return binary.BigEndian.AppendUint64(attemptPrefix(kTaskGroup, task), ord)
}

type batchRec struct {
	Manifest projections.Manifest     `json:"manifest"`
	Decision projections.FactPosition `json:"decision"`
}

// stepRec is what the run view shows of a sealed batch.
type stepRec struct {
	Audit            projections.StepAudit    `json:"audit"`
	Decision         projections.FactPosition `json:"decision"`
	TrainerVersion   uint64                   `json:"trainer_version"`
	Digest           string                   `json:"digest"`
	MeanReward       *float64                 `json:"mean_reward,omitempty"`
	Reward           *Spread                  `json:"reward,omitempty"`
	TrainedStaleness []projections.Count      `json:"trained_staleness"`
}

type gradRec struct {
	G    events.GradientApplied   `json:"g"`
	Fact projections.FactPosition `json:"f"`
}

type polRec struct {
	P    events.PolicyPublished   `json:"p"`
	Fact projections.FactPosition `json:"f"`
}

type vocabRec struct {
	Model  string `json:"model"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	// Got are the chunk numbers that count, in the order they arrived.
	Got []int `json:"got"`
}

// rawRec is a fact kept as it was read: its position and record value.
func rawRec(pos projections.FactPosition, value []byte) []byte {
	b := make([]byte, 0, 20+len(value))
	b = binary.BigEndian.AppendUint32(b, uint32(pos.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.Offset))
	b = binary.BigEndian.AppendUint64(b, pos.Seq)
	return append(b, value...)
}

// turnInLog is the first byte, after its position, of a stored turn
// whose token arrays were left in the facts log (a [Writer] with
// TokensInLog: the projector's records, docs/design.md §12.4); what
// follows is a strippedTurn's JSON. A turn kept whole has its record as
// read there, a JSON object, which never starts with this byte.
const turnInLog = 0x01

// strippedTurn is a turn.generated without its token arrays, which its
// record in the facts log holds; ID names that record's event, to check
// the record read back is the turn's.
type strippedTurn struct {
	ID string               `json:"id"`
	T  events.TurnGenerated `json:"t"`
}

// hasTokens says the turn carries token arrays.
func hasTokens(d *events.TurnGenerated) bool {
	return len(d.TokenIDs) > 0 || len(d.Logprobs) > 0 || len(d.ObservationTokenIDs) > 0
}

// strippedRec is the stored form of a turn whose token arrays stay in the
// facts log.
func strippedRec(pos projections.FactPosition, id string, d *events.TurnGenerated) ([]byte, error) {
	t := *d
	t.TokenIDs, t.Logprobs, t.ObservationTokenIDs = nil, nil, nil
	v, err := json.Marshal(strippedTurn{ID: id, T: t})
	if err != nil {
		return nil, err
	}
	return rawRec(pos, append([]byte{turnInLog}, v...)), nil
}

// readTurn decodes a stored turn; id is its event's id, and inLog says
// its token arrays are in the facts log at pos, not here.
func readTurn(v []byte) (pos projections.FactPosition, d *events.TurnGenerated, id string, inLog bool, err error) {
	if len(v) > 20 && v[20] == turnInLog {
		pos, _, _ = readPos(v)
		var st strippedTurn
		if err := json.Unmarshal(v[21:], &st); err != nil {
			return pos, nil, "", false, fmt.Errorf("explore: stored turn at %d/%d: %w", pos.Partition, pos.Offset, err)
		}
		return pos, &st.T, st.ID, true, nil
	}
	pos, ev, err := readRaw(v)
	if err != nil {
		return pos, nil, "", false, err
	}
	d, ok := ev.Data.(*events.TurnGenerated)
	if !ok {
		return pos, nil, "", false, fmt.Errorf("explore: stored turn at %d/%d is a %s", pos.Partition, pos.Offset, ev.Type)
	}
	return pos, d, ev.ID, false, nil
}

// readPos is the position rawRec wrote at the front of v.
func readPos(v []byte) (projections.FactPosition, []byte, error) {
	if len(v) < 20 {
		return projections.FactPosition{}, nil, fmt.Errorf("explore: stored fact of %d bytes", len(v))
	}
	return projections.FactPosition{Partition: int32(binary.BigEndian.Uint32(v)), Offset: int64(binary.BigEndian.Uint64(v[4:])),
		Seq: binary.BigEndian.Uint64(v[12:])}, v[20:], nil
}

// readRaw decodes what rawRec wrote.
func readRaw(v []byte) (projections.FactPosition, events.Event, error) {
	pos, value, err := readPos(v)
	if err != nil {
		return pos, events.Event{}, err
	}
	ev, err := events.Decode(value)
	if err != nil {
		return pos, ev, fmt.Errorf("explore: stored fact at %d/%d: %w", pos.Partition, pos.Offset, err)
	}
	return pos, ev, nil
}

// A sortedGetter reads many keys through one iterator moving forward: a
// page of a list reads thousands of records, and each point read pays
// again for the tables' filters and indexes, which at tens of millions
// of facts no longer stay in the block cache (docs/design.md §15.7).
type sortedGetter interface {
	// GetSorted calls fn with each of keys, in increasing order, and its
	// value, nil when absent, valid only during the call.
	GetSorted(keys [][]byte, fn func(i int, v []byte) error) error
}

// getMany calls fn with the value of each of keys (nil when absent), in
// key order, through r's GetSorted when it has one.
func getMany(r Reader, keys [][]byte, fn func(i int, v []byte) error) error {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	sorted := make([][]byte, len(keys))
	for j, i := range order {
		sorted[j] = keys[i]
	}
	if sg, ok := r.(sortedGetter); ok {
		return sg.GetSorted(sorted, func(j int, v []byte) error { return fn(order[j], v) })
	}
	for j, k := range sorted {
		v, _, err := r.Get(k)
		if err != nil {
			return err
		}
		if err := fn(order[j], v); err != nil {
			return err
		}
	}
	return nil
}

func getJSON[T any](r Reader, k []byte) (*T, error) {
	v, ok, err := r.Get(k)
	if err != nil || !ok {
		return nil, err
	}
	return decodeJSON[T](k, v)
}

// decodeJSON decodes the record v stored under k.
func decodeJSON[T any](k, v []byte) (*T, error) {
	out := new(T)
	if err := json.Unmarshal(v, out); err != nil {
		return nil, fmt.Errorf("explore: record %q: %w", k, err)
	}
	return out, nil
}

// memKV is a [Reader] and a [projections.Store] in memory, for a [Model].
type memKV struct {
	m      map[string][]byte
	keys   []string // in order, when sorted
	sorted bool
}

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

func (s *memKV) Get(k []byte) ([]byte, bool, error) {
	v, ok := s.m[string(k)]
	return v, ok, nil
}

func (s *memKV) Set(k, v []byte) error {
	if _, ok := s.m[string(k)]; !ok {
		s.sorted = false
	}
	s.m[string(k)] = append([]byte(nil), v...)
	return nil
}

func (s *memKV) Delete(k []byte) error {
	if _, ok := s.m[string(k)]; ok {
		delete(s.m, string(k))
		s.sorted = false
	}
	return nil
}

func (s *memKV) Scan(prefix, after []byte, fn func(k, v []byte) (bool, error)) error {
	if !s.sorted {
		s.keys = s.keys[:0]
		for k := range s.m {
			s.keys = append(s.keys, k)
		}
		slices.Sort(s.keys)
		s.sorted = true
	}
	from := string(prefix)
	if after != nil && bytes.Compare(after, prefix) > 0 {
		from = string(after) + "\x00"
	}
	i, _ := slices.BinarySearch(s.keys, from)
	for ; i < len(s.keys) && strings.HasPrefix(s.keys[i], string(prefix)); i++ {
		more, err := fn([]byte(s.keys[i]), s.m[s.keys[i]])
		if err != nil || !more {
			return err
		}
	}
	return nil
}
