package replay

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"

	"github.com/rolloutledger/rolloutledger/projections"
)

// Locating a change to the history (docs/design.md §14.3).
//
// Every recorded head {size, root} is the root of the tree of the run's
// first size facts. Heads are monotone in what they can tell: once the
// history differs at fact p, every head of size p or more differs, and
// every smaller one agrees. So the largest recorded head that the facts
// reproduce, and the next one, bound the first change: after fact From, at
// or before fact To. A head that does not match while a larger one does is
// a recorded decision that is wrong, not a history that changed; the
// decision check reports it.
//
// Heads alone cannot say which fact between From and To changed. An
// archive also carries its exporter's leaf index; every leaf of it is
// compared with the leaf recomputed from the fact at its position, so an
// index that differs from the facts is reported even when every head
// matches (see [HistoryIndex]); once the index is shown
// to reproduce every recorded head it covers, it is the history the
// projector committed to, leaf for leaf, and the first leaf where it and
// the facts part names the fact exactly. The leaves around it tell a
// changed fact from a dropped, an inserted or a moved one.

// What a history problem is.
const (
	HistoryChanged   = "changed"
	HistoryDropped   = "dropped"
	HistoryInserted  = "inserted"
	HistoryMoved     = "moved"
	HistoryUnlocated = "unlocated" // bounded by the heads, not named exactly
	// HistoryIndex is an archive whose leaf index differs from the leaves
	// of the facts it holds while the facts reproduce every recorded head:
	// the index, not the history, was altered (or, with no head to tell,
	// one of them was).
	HistoryIndex = "index"
	// HistoryManifest is an archive whose manifest lists tree heads other
	// than those its recorded decisions carry.
	HistoryManifest = "manifest"
)

// HistoryProblem is the first place a history differs from what the
// recorded heads (or, past the last of them, the leaf index) committed to.
type HistoryProblem struct {
	What string `json:"what"`
	// Seq is the first fact position affected; Record says whether the
	// history read has a fact there, at Partition and Offset.
	Seq       uint64 `json:"seq"`
	Record    bool   `json:"record"`
	Partition int32  `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	// From and To bound the first change by the recorded heads: after
	// fact From and at or before fact To. Committed is false for a change
	// after the last recorded head, which only the leaf index locates.
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
	Committed bool   `json:"committed"`
	// Head is the first recorded head the facts do not reproduce, and
	// Recomputed the root the facts give at its size (empty when they end
	// before it).
	Head       *RecordedHead `json:"head,omitempty"`
	Recomputed string        `json:"recomputed,omitempty"`
	Detail     string        `json:"detail"`
}

func (h *HistoryProblem) String() string { return h.Detail }

// window is how many leaves around the first difference are kept to tell
// what happened there.
const window = 8

// historyCheck follows a pass over the facts: it compares the tree the
// fold keeps with every recorded head as the pass reaches its size, and,
// for a source with a leaf index, the facts' leaves with the index's.
type historyCheck struct {
	heads   []RecordedHead // in order of size
	next    int
	match   []bool
	roots   []string // recomputed root at each head's size
	checked int

	leaves *leafStream
	// indexTree is the tree of the index's leaves once they part from
	// the facts' (nil until then): up to that leaf the two trees are one,
	// the fold's, and the index's heads are the fold's. A pass over an
	// archive whose index agrees with its facts, every honest one, thus
	// hashes the tree once, not twice.
	indexTree *projections.Tree
	indexSize uint64 // leaves read from the index
	indexOK   []bool // whether the index tree reproduces each head
	indexNext int    // the first head the index tree has not reached
	// diffAt is the first position (1-based) where index and facts part;
	// from it on, up to window leaves of each side are kept.
	diffAt     uint64
	winA, winB [][]byte
	winPos     []projections.FactPosition
}

func newHistoryCheck(ctx context.Context, src Source, heads []RecordedHead) *historyCheck {
	h := &historyCheck{heads: heads, match: make([]bool, len(heads)), roots: make([]string, len(heads)), indexOK: make([]bool, len(heads))}
	if li, ok := src.(LeafIndexer); ok {
		h.leaves = startLeaves(ctx, li)
	}
	return h
}

func (h *historyCheck) close() {
	if h.leaves != nil {
		h.leaves.close()
	}
}

// leaf reads the index's leaf for f and compares the two, before fold
// folds f into store: at the first leaf where they part, the index's tree
// starts from the fold's as it is before f.
func (h *historyCheck) leaf(f *Fact, fold *projections.Fold, store projections.Store) error {
	if h.leaves == nil {
		return nil
	}
	b := f.leaf()
	a, ok, err := h.leaves.next()
	if err != nil {
		return err
	}
	if h.indexTree == nil && (!ok || !bytes.Equal(a, b)) {
		if err := h.part(fold, store); err != nil {
			return err
		}
	}
	if ok {
		h.indexLeaf(a)
	}
	h.compareLeaf(f.Seq, a, ok, b, true, factOf(*f))
	return nil
}

// part gives the index a tree of its own, a copy of the fold's: the index
// held the same leaves so far, and reproduced the heads of those sizes
// exactly when the facts did.
func (h *historyCheck) part(fold *projections.Fold, store projections.Store) error {
	t, err := fold.Tree(store)
	if err != nil {
		return err
	}
	if t.Size() != h.indexSize {
		return fmt.Errorf("replay: the fold's tree holds %d leaves where the leaf index's held %d", t.Size(), h.indexSize)
	}
	h.indexTree = t
	for ; h.indexNext < len(h.heads) && h.heads[h.indexNext].Size <= h.indexSize; h.indexNext++ {
		h.indexOK[h.indexNext] = h.match[h.indexNext]
	}
	return nil
}

// fact is called after fold folded f into store.
func (h *historyCheck) fact(f Fact, fold *projections.Fold, store projections.Store) error {
	// A recorded head of size 0 names no fact: it cannot match.
	for h.next < len(h.heads) && h.heads[h.next].Size < f.Seq {
		h.next++
	}
	for h.next < len(h.heads) && h.heads[h.next].Size == f.Seq {
		head, err := fold.Head(store)
		if err != nil {
			return err
		}
		h.roots[h.next] = head.Root
		h.match[h.next] = head.Root == h.heads[h.next].Root
		h.checked++
		h.next++
	}
	return nil
}

// indexLeaf adds the index's next leaf to its tree and checks the heads
// of that size against it. The heads are in order of size, so a cursor
// finds them: a leaf costs the same at the run's end as at its start.
//
// Until the index parts from the facts, its leaves are the fold's and so
// is its tree: part fills in the heads from the fold's.
func (h *historyCheck) indexLeaf(a []byte) {
	h.indexSize++
	if h.indexTree == nil {
		return
	}
	h.indexTree.Append(a)
	n := h.indexTree.Size()
	for h.indexNext < len(h.heads) && h.heads[h.indexNext].Size < n {
		h.indexNext++
	}
	for ; h.indexNext < len(h.heads) && h.heads[h.indexNext].Size == n; h.indexNext++ {
		h.indexOK[h.indexNext] = hex.EncodeToString(h.indexTree.Root()) == h.heads[h.indexNext].Root
	}
}

func (h *historyCheck) compareLeaf(seq uint64, a []byte, aok bool, b []byte, bok bool, pos projections.FactPosition) {
	if h.diffAt == 0 {
		if aok && bok && bytes.Equal(a, b) {
			return
		}
		h.diffAt = seq
	}
	if len(h.winA) < window && aok {
		h.winA = append(h.winA, a)
	}
	if len(h.winB) < window && bok {
		// b may be a fact's own digest, which the caller reuses.
		h.winB = append(h.winB, bytes.Clone(b))
		h.winPos = append(h.winPos, pos)
	}
}

func (h *historyCheck) uncommitted(facts uint64) uint64 {
	var last uint64
	for i, hd := range h.heads {
		if h.match[i] {
			last = max(last, hd.Size)
		}
	}
	if facts < last {
		return 0
	}
	return facts - last
}

// finish drains the leaf index and concludes; fold has folded every fact
// into store.
func (h *historyCheck) finish(facts uint64, fold *projections.Fold, store projections.Store) (*HistoryProblem, error) {
	if h.leaves != nil {
		for seq := facts + 1; ; seq++ {
			a, ok, err := h.leaves.next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if h.indexTree == nil {
				if err := h.part(fold, store); err != nil {
					return nil, err
				}
			}
			h.indexLeaf(a)
			h.compareLeaf(seq, a, true, nil, false, projections.FactPosition{})
		}
		if h.indexTree == nil {
			// The index is the facts' leaves, leaf for leaf.
			if err := h.part(fold, store); err != nil {
				return nil, err
			}
		}
	}
	if len(h.heads) == 0 {
		return h.indexAltered(facts), nil
	}
	// The history is intact up to the largest head if that head matches.
	last := len(h.heads) - 1
	if h.match[last] {
		if h.indexTrusted() && h.diffAt > h.heads[last].Size {
			p := h.locate()
			p.From, p.To = h.heads[last].Size, 0
			p.Detail += fmt.Sprintf(" (after fact %d, the last one a recorded head covers; located by the leaf index alone)", p.From)
			return p, nil
		}
		return h.indexAltered(facts), nil
	}
	bad := last
	for bad > 0 && !h.match[bad-1] {
		bad--
	}
	var from uint64
	if bad > 0 {
		from = h.heads[bad-1].Size
	}
	head := h.heads[bad]
	to := head.Size
	var p *HistoryProblem
	if h.indexTrusted() && h.diffAt > from && h.diffAt <= to {
		p = h.locate()
	} else {
		p = &HistoryProblem{What: HistoryUnlocated, Seq: from + 1}
		switch {
		case facts < to:
			p.Detail = fmt.Sprintf("the history ends at fact %d but %s %d committed to %d facts; the first change lies after fact %d", facts, head.Kind, head.Seq, to, from)
		default:
			p.Detail = fmt.Sprintf("the history differs from what %s %d committed to: the first change lies after fact %d and at or before fact %d", head.Kind, head.Seq, from, to)
		}
		if h.leaves != nil {
			p.Detail += "; the archive's leaf index does not reproduce the recorded heads either, so it cannot name the fact"
		}
	}
	p.From, p.To, p.Committed = from, to, true
	p.Head, p.Recomputed = &head, h.roots[bad]
	return p, nil
}

// indexAltered reports a leaf index that parts from the facts while no
// recorded head says the facts changed; nil when every leaf matched.
func (h *historyCheck) indexAltered(facts uint64) *HistoryProblem {
	if h.leaves == nil || h.diffAt == 0 {
		return nil
	}
	p := &HistoryProblem{What: HistoryIndex, Seq: h.diffAt}
	if len(h.winPos) > 0 {
		p.Record, p.Partition, p.Offset = true, h.winPos[0].Partition, h.winPos[0].Offset
	}
	var what string
	switch {
	case len(h.winA) == 0:
		what = fmt.Sprintf("the leaf index ends after leaf %d, the archive holds %d facts", h.diffAt-1, facts)
	case len(h.winB) == 0:
		what = fmt.Sprintf("the leaf index holds leaves past the archive's %d facts", facts)
	default:
		what = fmt.Sprintf("leaf %d of the index is %x, fact %d hashes to %x", h.diffAt, h.winA[0], h.diffAt, h.winB[0])
	}
	if len(h.heads) == 0 {
		p.Detail = "the archive's leaf index differs from its facts: " + what + "; no recorded head says which of them is the history"
	} else {
		p.Detail = "the archive's leaf index was altered: " + what + ", while the facts reproduce every recorded head"
	}
	return p
}

// indexTrusted says the leaf index reproduces every recorded head it
// covers, and covers at least one.
func (h *historyCheck) indexTrusted() bool {
	if h.indexTree == nil {
		return false
	}
	covered := 0
	for i, hd := range h.heads {
		if hd.Size <= h.indexTree.Size() {
			if !h.indexOK[i] {
				return false
			}
			covered++
		}
	}
	return covered > 0
}

// locate names the first difference between the index (a) and the facts
// (b) from the leaves kept around it.
func (h *historyCheck) locate() *HistoryProblem {
	a, b, seq := h.winA, h.winB, h.diffAt
	p := &HistoryProblem{Seq: seq}
	if len(h.winPos) > 0 {
		p.Record, p.Partition, p.Offset = true, h.winPos[0].Partition, h.winPos[0].Offset
	}
	eq := func(x [][]byte, i int, y [][]byte, j int) bool {
		return i < len(x) && j < len(y) && bytes.Equal(x[i], y[j])
	}
	at := func() string {
		if !p.Record {
			return fmt.Sprintf("fact %d", seq)
		}
		return fmt.Sprintf("fact %d (partition %d, offset %d)", seq, p.Partition, p.Offset)
	}
	switch {
	case len(b) == 0:
		p.What = HistoryDropped
		p.Detail = fmt.Sprintf("the history ends after fact %d: %d committed fact(s) from fact %d on were dropped", seq-1, len(a), seq)
	case len(a) == 0:
		p.What = HistoryInserted
		p.Detail = fmt.Sprintf("%s and what follows were appended: the committed history ends before it", at())
	case eq(b, 0, a, 1) && eq(b, 1, a, 0):
		p.What = HistoryMoved
		p.Detail = fmt.Sprintf("facts %d and %d were swapped: %s is the fact committed at %d", seq, seq+1, at(), seq+1)
	case eq(b, 0, a, 1):
		p.What = HistoryDropped
		p.Detail = fmt.Sprintf("fact %d was dropped: %s is the fact committed at %d", seq, at(), seq+1)
	case eq(b, 1, a, 0):
		p.What = HistoryInserted
		p.Detail = fmt.Sprintf("%s was inserted: the fact committed at %d follows it", at(), seq)
	default:
		p.What = HistoryChanged
		for j := 2; j < len(a); j++ {
			if eq(b, 0, a, j) {
				p.What = HistoryMoved
				p.Detail = fmt.Sprintf("%s is the fact committed at %d, moved earlier", at(), seq+uint64(j))
				break
			}
		}
		for j := 2; j < len(b) && p.What == HistoryChanged; j++ {
			if eq(b, j, a, 0) {
				p.What = HistoryMoved
				p.Detail = fmt.Sprintf("the fact committed at %d was moved later, to %d", seq, seq+uint64(j))
			}
		}
		if p.What == HistoryChanged {
			p.Detail = fmt.Sprintf("%s was changed: its leaf is %x, the committed one %x", at(), b[0], a[0])
		}
	}
	return p
}

// leafStream reads a leaf index beside the pass over the facts.
type leafStream struct {
	ch     chan leafChunk
	cur    []byte
	cancel context.CancelFunc
	done   bool
}

type leafChunk struct {
	b   []byte
	err error
}

func startLeaves(ctx context.Context, li LeafIndexer) *leafStream {
	ctx, cancel := context.WithCancel(ctx)
	ls := &leafStream{ch: make(chan leafChunk, 4), cancel: cancel}
	go func() {
		defer close(ls.ch)
		const chunk = 4096 * 32
		buf := make([]byte, 0, chunk)
		send := func(c leafChunk) error {
			select {
			case ls.ch <- c:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := li.Leaves(ctx, func(_ uint64, leaf []byte) error {
			buf = append(buf, leaf...)
			if len(buf) == chunk {
				if err := send(leafChunk{b: buf}); err != nil {
					return err
				}
				buf = make([]byte, 0, chunk)
			}
			return nil
		})
		if err == nil && len(buf) > 0 {
			err = send(leafChunk{b: buf})
		}
		if err != nil && ctx.Err() == nil {
			_ = send(leafChunk{err: err})
		}
	}()
	return ls
}

// next returns the index's next leaf, ok false at its end.
func (ls *leafStream) next() ([]byte, bool, error) {
	for len(ls.cur) == 0 {
		if ls.done {
			return nil, false, nil
		}
		c, ok := <-ls.ch
		if !ok {
			ls.done = true
			return nil, false, nil
		}
		if c.err != nil {
			return nil, false, c.err
		}
		ls.cur = c.b
	}
	leaf := ls.cur[:32:32]
	ls.cur = ls.cur[32:]
	return leaf, true, nil
}

func (ls *leafStream) close() {
	ls.cancel()
	for range ls.ch {
	}
}
