package projections

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/rolloutledger/rolloutledger/events"
)

// State key layout. Every key the fold writes starts with one of these
// prefixes; entity ids cannot contain NUL, so NUL separates the parts.
//
//	h                        header: fact and decision counters, batch cursor
//	tree                     right edge of the run's fact tree (tree.go)
//	cfg                      the run's resolved config (JSON), once run.started was seen
//	ev\x00<event id>         SHA-256 of the first record with that id (dedup index)
//	task\x00<task>           registration and probe tally of a task
//	grp\x00<group>           a group: its declaration, members, closed/done
//	att\x00<attempt>         an attempt: its group, reward, turn metadata, compactions
//	turn\x00<attempt>\x00<n> inline tokens of turn n, until its batch is sealed
//	open\x00<i>              the i-th group (0-based) placed in the open batch
//	drop\x00<i>              the i-th train group dropped since the last seal
//	sealed\x00<k>            digest of sealed batch k (for gradient.applied)
const (
	keyHeader = "h"
	keyConfig = "cfg"
	pfxEvent  = "ev\x00"
	pfxTask   = "task\x00"
	pfxGroup  = "grp\x00"
	pfxAtt    = "att\x00"
	pfxTurn   = "turn\x00"
	pfxOpen   = "open\x00"
	pfxDrop   = "drop\x00"
	pfxSealed = "sealed\x00"
)

// HeaderKey is the key of a fold's header in its Store: there once the
// fold has applied a record.
const HeaderKey = keyHeader

func eventKey(id string) []byte        { return appendEventKey(nil, id) }
func taskKey(task string) []byte       { return []byte(pfxTask + task) }
func groupKey(group string) []byte     { return []byte(pfxGroup + group) }
func attemptKey(attempt string) []byte { return []byte(pfxAtt + attempt) }
func openKey(i uint64) []byte          { return strconv.AppendUint([]byte(pfxOpen), i, 10) }
func dropKey(i uint64) []byte          { return strconv.AppendUint([]byte(pfxDrop), i, 10) }
func sealedKey(k uint64) []byte        { return strconv.AppendUint([]byte(pfxSealed), k, 10) }

// appendEventKey appends the dedup key of event id to b.
func appendEventKey(b []byte, id string) []byte { return append(append(b, pfxEvent...), id...) }

// IsPayloadKey reports whether key holds a turn's inline tokens: a value
// of kilobytes or more, set once when the turn arrives, read when its batch
// is sealed (or its samples exported) and deleted then or when its attempt
// is dropped. A Store may keep such values apart from the others.
func IsPayloadKey(key []byte) bool { return bytes.HasPrefix(key, []byte(pfxTurn)) }

func turnKey(attempt string, turn int64) []byte {
	k := make([]byte, 0, len(pfxTurn)+len(attempt)+1+4)
	k = append(k, pfxTurn...)
	k = append(k, attempt...)
	k = append(k, 0)
	return strconv.AppendInt(k, turn, 10)
}

// ErrCorruptState is wrapped by every error about a stored value the fold
// cannot read back.
var ErrCorruptState = errors.New("projections: corrupt state")

// stateVersion leads every binary state record, so a later layout can be
// told apart from this one.
const stateVersion = 1

// header is the run-wide cursor, read and written once per record.
type header struct {
	facts      uint64 // the run's fact sequence number of the last record applied
	configured bool   // run.started was applied
	findings   uint64 // seq of the last audit.finding
	admitted   uint64 // seq of the last task.admitted
	rejected   uint64 // seq of the last task.rejected
	sealed     uint64 // batches sealed so far
	open       uint64 // groups placed in batch sealed+1
	drops      uint64 // train groups dropped since the last seal
	// rules is the rule version the run is folded under, fixed by its
	// first record; 0 in a header written before it was recorded, which
	// is a run of rule version 3.
	rules uint64
}

func (h *header) encode() []byte {
	var w wbuf
	w.byte(stateVersion)
	w.uvarint(h.facts)
	w.bool(h.configured)
	w.uvarint(h.findings)
	w.uvarint(h.admitted)
	w.uvarint(h.rejected)
	w.uvarint(h.sealed)
	w.uvarint(h.open)
	w.uvarint(h.drops)
	if h.rules != 0 {
		w.uvarint(h.rules)
	}
	return w.b
}

func decodeHeader(b []byte) (header, error) {
	r := rbuf{b: b, what: "header"}
	r.version()
	h := header{
		facts: r.uvarint(), configured: r.bool(), findings: r.uvarint(),
		admitted: r.uvarint(), rejected: r.uvarint(), sealed: r.uvarint(),
		open: r.uvarint(), drops: r.uvarint(),
	}
	if r.err == nil && len(r.b) > 0 {
		h.rules = r.uvarint()
	}
	return h, r.done()
}

// Decisions of a task's admission.
const (
	admissionPending  = 0
	admissionAdmitted = 1
	admissionRejected = 2
)

type taskState struct {
	registered bool
	probes     int64 // rewarded probe attempts of completed probe groups
	passes     int64
	decision   uint8
}

func (t *taskState) encode() []byte {
	var w wbuf
	w.byte(stateVersion)
	w.bool(t.registered)
	w.varint(t.probes)
	w.varint(t.passes)
	w.byte(t.decision)
	return w.b
}

func decodeTask(b []byte) (taskState, error) {
	r := rbuf{b: b, what: "task"}
	r.version()
	t := taskState{registered: r.bool(), probes: r.varint(), passes: r.varint(), decision: r.byte()}
	return t, r.done()
}

// groupState is a group while it collects its inputs. Once done, members
// are cleared: a completed group is only a marker that makes later facts
// about it late.
type groupState struct {
	started bool // group.started applied
	closed  bool // group.closed applied
	done    bool // completed (used, dropped, or counted as probes)
	task    string
	purpose string
	size    int64
	// members are the attempts that named the group in attempt.started, in
	// log order.
	members []string
}

func (g *groupState) encode() []byte {
	var w wbuf
	w.byte(stateVersion)
	w.bool(g.started)
	w.bool(g.closed)
	w.bool(g.done)
	w.str(g.task)
	w.str(g.purpose)
	w.varint(g.size)
	w.uvarint(uint64(len(g.members)))
	for _, m := range g.members {
		w.str(m)
	}
	return w.b
}

func decodeGroup(b []byte) (groupState, error) {
	r := rbuf{b: b, what: "group"}
	r.version()
	g := groupState{started: r.bool(), closed: r.bool(), done: r.bool(), task: r.str(), purpose: r.str(), size: r.varint()}
	n := r.count()
	for range n {
		g.members = append(g.members, r.str())
	}
	return g, r.done()
}

// turnMeta is what the fold keeps of a turn outside its payload.
type turnMeta struct {
	turn int64
	// version is the policy version of the turn's first version segment;
	// later holds the segments after the first, nil for the usual turn of
	// one segment, so that only turns spanning a weight update pay for them.
	version    int64
	later      []events.VersionSegment
	completion int64
	partition  int32
	offset     int64
	payload    bool // inline tokens stored under turnKey
	// shape is how a version 3 turn's tokens extend the attempt's earlier
	// ones (nil for older turns); refused says it carries the refused tag.
	shape   *turnShape
	refused bool
}

// turnShape is what rule version 4 reads of a version 3 turn to cut whole
// sequences (samples.go).
type turnShape struct {
	// Parent is the parent turn's index, -1 without one; Prefix the prompt
	// tokens shared with it; Prompt the turn's prompt tokens.
	Parent int64 `json:"parent"`
	Prefix int64 `json:"prefix"`
	Prompt int64 `json:"prompt"`
	// Diverged says the turn records a divergence from an earlier turn.
	Diverged bool `json:"diverged,omitempty"`
	// Temperature is the turn's sampling temperature, 1 when not known.
	Temperature float32 `json:"temperature"`
}

// segments is the turn's version segments, the first included.
func (t *turnMeta) segments() []events.VersionSegment {
	out := make([]events.VersionSegment, 0, 1+len(t.later))
	out = append(out, events.VersionSegment{Start: 0, PolicyVersion: t.version})
	return append(out, t.later...)
}

// lastVersion is the policy version of the turn's last token.
func (t *turnMeta) lastVersion() int64 {
	if n := len(t.later); n > 0 {
		return t.later[n-1].PolicyVersion
	}
	return t.version
}

// Flags of a turn in an attempt record. A layout-1 record wrote the byte as
// a bool (0 or 1), which reads the same.
const (
	turnPayload  = 1 << iota // inline tokens stored under turnKey
	turnSegments             // the segments after the first follow
	turnShaped               // a version 3 turn's shape follows
	turnRefused              // the turn carries the refused tag
)

// attemptState is everything known about an attempt, whether or not its
// attempt.started has been seen yet.
type attemptState struct {
	started  bool // attempt.started applied
	group    string
	task     string
	retryOf  string
	rewarded bool
	passed   bool
	// testsPassed and testsTotal are the verifier's counts.
	testsPassed int64
	testsTotal  int64
	// completedSeq is the fact sequence number at which the attempt had
	// both its attempt.finished and its reward (0 before): the attempt
	// that completed first holds a slot two attempts complete.
	completedSeq uint64
	finished     bool // attempt.finished applied
	failed       bool // attempt.failed applied
	// done says the attempt's group completed: the attempt is frozen and
	// later facts about it are late.
	done bool
	// late says a late fact about the attempt was reported.
	late bool
	// unstarted says inline tokens sent before the attempt started were
	// reported (and not kept).
	unstarted bool
	// turns are sorted by turn index, one entry per index.
	turns []turnMeta
	// compactions are the turn indices after which the context was
	// compacted, sorted and distinct.
	compactions []int64
}

const (
	attStarted = 1 << iota
	attRewarded
	attPassed
	attFinished
	attFailed
	attDone
	attLate
	attUnstarted
)

func (a *attemptState) encode() []byte {
	var w wbuf
	w.byte(stateVersion)
	var flags uint64
	set := func(bit uint64, on bool) {
		if on {
			flags |= bit
		}
	}
	set(attStarted, a.started)
	set(attRewarded, a.rewarded)
	set(attPassed, a.passed)
	set(attFinished, a.finished)
	set(attFailed, a.failed)
	set(attDone, a.done)
	set(attLate, a.late)
	set(attUnstarted, a.unstarted)
	w.uvarint(flags)
	w.str(a.group)
	w.str(a.task)
	w.str(a.retryOf)
	w.varint(a.testsPassed)
	w.varint(a.testsTotal)
	w.uvarint(a.completedSeq)
	w.uvarint(uint64(len(a.turns)))
	for _, t := range a.turns {
		w.varint(t.turn)
		w.varint(t.version)
		w.varint(t.completion)
		w.varint(int64(t.partition))
		w.varint(t.offset)
		flags := uint8(0)
		if t.payload {
			flags |= turnPayload
		}
		if len(t.later) > 0 {
			flags |= turnSegments
		}
		if t.shape != nil {
			flags |= turnShaped
		}
		if t.refused {
			flags |= turnRefused
		}
		w.byte(flags)
		if len(t.later) > 0 {
			w.uvarint(uint64(len(t.later)))
			for _, s := range t.later {
				w.varint(s.Start)
				w.varint(s.PolicyVersion)
			}
		}
		if sh := t.shape; sh != nil {
			w.varint(sh.Parent)
			w.varint(sh.Prefix)
			w.varint(sh.Prompt)
			w.bool(sh.Diverged)
			w.b = binary.LittleEndian.AppendUint32(w.b, math.Float32bits(sh.Temperature))
		}
	}
	w.uvarint(uint64(len(a.compactions)))
	for _, c := range a.compactions {
		w.varint(c)
	}
	return w.b
}

func decodeAttempt(b []byte) (attemptState, error) {
	r := rbuf{b: b, what: "attempt"}
	r.version()
	flags := r.uvarint()
	a := attemptState{
		started: flags&attStarted != 0, rewarded: flags&attRewarded != 0, passed: flags&attPassed != 0,
		finished: flags&attFinished != 0, failed: flags&attFailed != 0, done: flags&attDone != 0,
		late: flags&attLate != 0, unstarted: flags&attUnstarted != 0,
	}
	a.group, a.task, a.retryOf = r.str(), r.str(), r.str()
	a.testsPassed, a.testsTotal, a.completedSeq = r.varint(), r.varint(), r.uvarint()
	n := r.count()
	if n > 0 {
		a.turns = make([]turnMeta, 0, n)
	}
	for range n {
		t := turnMeta{turn: r.varint(), version: r.varint(), completion: r.varint()}
		t.partition = int32(r.varint())
		t.offset = r.varint()
		flags := r.byte()
		if flags&^(turnPayload|turnSegments|turnShaped|turnRefused) != 0 {
			r.fail()
		}
		t.payload = flags&turnPayload != 0
		t.refused = flags&turnRefused != 0
		if flags&turnSegments != 0 {
			m := r.count()
			t.later = make([]events.VersionSegment, 0, m)
			for range m {
				t.later = append(t.later, events.VersionSegment{Start: r.varint(), PolicyVersion: r.varint()})
			}
		}
		if flags&turnShaped != 0 {
			t.shape = &turnShape{Parent: r.varint(), Prefix: r.varint(), Prompt: r.varint(), Diverged: r.bool()}
			t.shape.Temperature = math.Float32frombits(r.uint32())
		}
		a.turns = append(a.turns, t)
	}
	n = r.count()
	for range n {
		a.compactions = append(a.compactions, r.varint())
	}
	return a, r.done()
}

// payload is the inline token data of one turn. Token ids and log-probs are
// stored as little-endian 32-bit words, so they come back bit for bit.
type payload struct {
	observation []int32
	tokens      []int32
	logprobs    []float32
}

func (p *payload) encode() []byte {
	w := wbuf{b: make([]byte, 0, 1+3*binary.MaxVarintLen32+4*(len(p.observation)+len(p.tokens)+len(p.logprobs)))}
	w.byte(stateVersion)
	w.uvarint(uint64(len(p.observation)))
	for _, t := range p.observation {
		w.b = binary.LittleEndian.AppendUint32(w.b, uint32(t))
	}
	w.uvarint(uint64(len(p.tokens)))
	for _, t := range p.tokens {
		w.b = binary.LittleEndian.AppendUint32(w.b, uint32(t))
	}
	w.uvarint(uint64(len(p.logprobs)))
	for _, l := range p.logprobs {
		w.b = binary.LittleEndian.AppendUint32(w.b, math.Float32bits(l))
	}
	return w.b
}

// payloadWords reads a stored payload without copying it: the
// observation ids, completion ids and log-probs as little-endian 32-bit
// words, slices of b.
func payloadWords(b []byte) (observation, tokens, logprobs []byte, err error) {
	r := rbuf{b: b, what: "turn payload"}
	r.version()
	observation, tokens, logprobs = r.wordBytes(), r.wordBytes(), r.wordBytes()
	return observation, tokens, logprobs, r.done()
}

// wbuf appends a binary state record.
type wbuf struct{ b []byte }

func (w *wbuf) byte(v uint8)     { w.b = append(w.b, v) }
func (w *wbuf) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *wbuf) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *wbuf) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }
func (w *wbuf) bool(v bool) {
	if v {
		w.byte(1)
	} else {
		w.byte(0)
	}
}

// rbuf reads a binary state record; the first problem sticks and is
// reported by done.
type rbuf struct {
	b    []byte
	what string
	err  error
}

func (r *rbuf) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: unreadable %s record", ErrCorruptState, r.what)
	}
	r.b = nil
}

func (r *rbuf) version() {
	if v := r.byte(); r.err == nil && v != stateVersion {
		r.err = fmt.Errorf("%w: %s record of layout %d, want %d", ErrCorruptState, r.what, v, stateVersion)
	}
}

func (r *rbuf) byte() uint8 {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *rbuf) bool() bool { return r.byte() == 1 }

func (r *rbuf) uint32() uint32 {
	if len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *rbuf) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length and checks it against the bytes left, each element
// taking at least one byte.
func (r *rbuf) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *rbuf) str() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// wordBytes reads a count of 32-bit words and returns their bytes.
func (r *rbuf) wordBytes() []byte {
	n := r.count()
	if r.err != nil || len(r.b) < 4*n {
		r.fail()
		return nil
	}
	words := r.b[: 4*n : 4*n]
	r.b = r.b[4*n:]
	return words
}

func (r *rbuf) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes after a %s record", ErrCorruptState, len(r.b), r.what)
	}
	return r.err
}
