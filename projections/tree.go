package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"math/bits"
	"sync"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/rolloutledger/rolloutledger/internal/slab"
)

// The run's fact tree (docs/design.md §9).
//
// Every record applied to a fold, duplicates and undecodable ones included,
// is the next leaf of an RFC 6962 Merkle tree: leaf n−1 is the record with
// fact sequence number n, and its hash is SHA-256(0x00 || record value).
// The fold keeps only the tree's right edge — the roots of the perfect
// subtrees that cover leaves [0, size), one per set bit of size, at most 64
// hashes — under the key "tree", so the state stays O(log n) however long
// the run and the head can be read at any position: batch.sealed carries it
// at its watermark, audit.checkpoint every [CheckpointInterval] facts.

// CheckpointInterval is how many facts of a run lie between two
// audit.checkpoint decisions: checkpoint n is caused by fact n ×
// CheckpointInterval.
const CheckpointInterval = 10_000

// Checkpoint is the data of an audit.checkpoint decision.
type Checkpoint struct {
	// Tree is the head of the fact tree after the checkpoint's fact.
	Tree TreeHead `json:"tree"`
	// Decisions counts the run's decisions of each kind issued up to and
	// including the checkpoint's fact, so that a decision missing from the
	// record before it is noticed even where nothing else refers to it.
	Decisions DecisionCounts `json:"decisions"`
}

// DecisionCounts counts decisions by kind.
type DecisionCounts struct {
	BatchSealed  uint64 `json:"batch.sealed"`
	TaskAdmitted uint64 `json:"task.admitted"`
	TaskRejected uint64 `json:"task.rejected"`
	AuditFinding uint64 `json:"audit.finding"`
}

// keyTree holds the fold's fact tree (see tree.go).
const keyTree = "tree"

// LeafHash is the RFC 6962 leaf hash of a record value: SHA-256(0x00 ||
// value), as rfc6962.DefaultHasher.HashLeaf computes it, with a pooled
// digest because the fold hashes every record.
func LeafHash(value []byte) []byte {
	d := digests.Get().(hash.Hash)
	d.Reset()
	d.Write(leafPrefix[:])
	d.Write(value)
	out := d.Sum(make([]byte, 0, sha256.Size))
	digests.Put(d)
	return out
}

var leafPrefix = [1]byte{rfc6962.RFC6962LeafHashPrefix}

var digests = sync.Pool{New: func() any { return sha256.New() }}

// HashChildren is the RFC 6962 hash of an interior node: SHA-256(0x01 ||
// left || right).
func HashChildren(left, right []byte) []byte {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = rfc6962.RFC6962NodeHashPrefix
	if len(left) != sha256.Size || len(right) != sha256.Size {
		return rfc6962.DefaultHasher.HashChildren(left, right)
	}
	copy(buf[1:], left)
	copy(buf[1+sha256.Size:], right)
	sum := sha256.Sum256(buf[:])
	return sum[:]
}

// Tree is the right edge of a run's fact tree: enough to append leaves and
// compute the head at every size, in O(log size) memory. Its zero value is
// not usable; use [NewTree].
type Tree struct {
	r *compact.Range
	// hashes is where the tree's hashes are cut from. The range keeps the
	// hashes it is given and those it computes, a leaf's and about one
	// interior node's a fact: one allocation each would be two of the few
	// a replay makes per fact.
	hashes slab.Bytes
}

// treeSlab is the size of the blocks a tree's hashes are cut from. The
// range holds at most one hash per level, 64 at most; each can keep its
// block alive, so a tree holds at most 64 blocks no longer needed.
const treeSlab = 128 * sha256.Size

// hash returns room for one hash.
func (t *Tree) hash() []byte { return t.hashes.Cut(sha256.Size) }

// hashChildren is HashChildren into the tree's slab.
func (t *Tree) hashChildren(left, right []byte) []byte {
	if len(left) != sha256.Size || len(right) != sha256.Size {
		return HashChildren(left, right)
	}
	var buf [1 + 2*sha256.Size]byte
	buf[0] = rfc6962.RFC6962NodeHashPrefix
	copy(buf[1:], left)
	copy(buf[1+sha256.Size:], right)
	sum := sha256.Sum256(buf[:])
	h := t.hash()
	copy(h, sum[:])
	return h
}

// newRange makes t's range from size and hashes (nil: empty), hashing
// into t's slab.
func (t *Tree) newRange(size uint64, hashes [][]byte) error {
	f := &compact.RangeFactory{Hash: t.hashChildren}
	if size == 0 && hashes == nil {
		t.r = f.NewEmptyRange(0)
		return nil
	}
	r, err := f.NewRange(0, size, hashes)
	t.r = r
	return err
}

// NewTree returns the empty tree.
func NewTree() *Tree {
	t := &Tree{hashes: slab.Bytes{Block: treeSlab}}
	_ = t.newRange(0, nil) // an empty range cannot fail
	return t
}

// Append adds the leaf with the given leaf hash. The tree keeps a copy:
// leaf may be reused when Append returns.
func (t *Tree) Append(leaf []byte) {
	if len(leaf) == sha256.Size {
		leaf = append(t.hash()[:0], leaf...)
	} else {
		leaf = bytes.Clone(leaf)
	}
	// Append fails only for a corrupt range, which a Tree never holds.
	if err := t.r.Append(leaf, nil); err != nil {
		panic(fmt.Sprintf("projections: fact tree: %v", err))
	}
}

// AppendValue adds the leaf of a record value.
func (t *Tree) AppendValue(value []byte) { t.Append(LeafHash(value)) }

// Size is the number of leaves.
func (t *Tree) Size() uint64 { return t.r.End() }

// Root is the tree's root hash; the empty tree's is SHA-256 of nothing.
func (t *Tree) Root() []byte {
	if t.r.End() == 0 {
		return rfc6962.DefaultHasher.EmptyRoot()
	}
	root, err := t.r.GetRootHash(nil)
	if err != nil {
		panic(fmt.Sprintf("projections: fact tree: %v", err))
	}
	return root
}

// Head is the tree's head: its size and hex root.
func (t *Tree) Head() TreeHead {
	return TreeHead{Size: t.Size(), Root: hex.EncodeToString(t.Root())}
}

func (t *Tree) encode() []byte { return t.appendEncoded(nil) }

func (t *Tree) appendEncoded(b []byte) []byte {
	hashes := t.r.Hashes()
	w := wbuf{b: b}
	w.byte(stateVersion)
	w.uvarint(t.r.End())
	for _, h := range hashes {
		w.b = append(w.b, h...)
	}
	return w.b
}

func decodeTree(b []byte) (*Tree, error) {
	r := rbuf{b: b, what: "fact tree"}
	r.version()
	size := r.uvarint()
	if r.err != nil {
		return nil, r.err
	}
	n := bits.OnesCount64(size)
	if len(r.b) != 32*n {
		return nil, fmt.Errorf("%w: fact tree of %d leaves with %d bytes of hashes, want %d", ErrCorruptState, size, len(r.b), 32*n)
	}
	// The Store lends b only until its next write: copy the hashes out.
	own := bytes.Clone(r.b)
	hashes := make([][]byte, n)
	for i := range hashes {
		hashes[i] = own[32*i : 32*(i+1) : 32*(i+1)]
	}
	t := &Tree{hashes: slab.Bytes{Block: treeSlab}}
	if err := t.newRange(size, hashes); err != nil {
		return nil, fmt.Errorf("%w: fact tree: %v", ErrCorruptState, err)
	}
	return t, nil
}

// appendLeaf adds the record being applied to the run's fact tree. The
// tree's size must be the fact sequence number before this record: a state
// written before the fold kept a tree cannot be continued.
func (c *applyCtx) appendLeaf(leaf []byte) error {
	if c.wb != nil && c.cache.tree != nil {
		// A write-back fold's tree is the cached one (writeback.go).
		t := c.cache.tree
		if t.Size() != c.pos.Seq-1 {
			return fmt.Errorf("%w: the fact tree holds %d leaves at fact %d", ErrCorruptState, t.Size(), c.pos.Seq)
		}
		t.Append(leaf)
		c.tree, c.wb.treeDirty = t, true
		return nil
	}
	b, ok, err := c.s.Get([]byte(keyTree))
	if err != nil {
		return err
	}
	t := c.cache.tree
	switch {
	case !ok:
		t = NewTree()
	case t == nil || !bytes.Equal(b, c.cache.enc):
		if t, err = decodeTree(b); err != nil {
			return err
		}
	}
	if t.Size() != c.pos.Seq-1 {
		c.cache.tree = nil
		return fmt.Errorf("%w: the fact tree holds %d leaves at fact %d (state from a build without the tree: rebuild it)", ErrCorruptState, t.Size(), c.pos.Seq)
	}
	t.Append(leaf)
	c.tree = t
	if c.wb != nil {
		c.cache.tree, c.cache.enc, c.wb.treeDirty = t, nil, true
		return nil
	}
	c.cache.tree, c.cache.enc = t, t.appendEncoded(c.cache.enc[:0])
	return c.s.Set([]byte(keyTree), c.cache.enc)
}

// treeCache keeps the last tree a fold wrote and its stored form, so that
// the next record need not decode it again: it is used only while the
// Store still holds exactly those bytes, which keeps it a pure function of
// the Store.
type treeCache struct {
	tree *Tree
	enc  []byte
}

// checkpoint emits audit.checkpoint when the record just applied is a
// multiple of CheckpointInterval. It runs after the record's other
// decisions, which its counts include.
func (c *applyCtx) checkpoint() error {
	if c.pos.Seq%CheckpointInterval != 0 {
		return nil
	}
	return c.emit(KindAuditCheckpoint, c.pos.Seq/CheckpointInterval, Checkpoint{
		Tree: c.tree.Head(),
		Decisions: DecisionCounts{
			BatchSealed: c.h.sealed, TaskAdmitted: c.h.admitted, TaskRejected: c.h.rejected, AuditFinding: c.h.findings,
		},
	}, nil)
}

// CheckpointOf decodes the data of an audit.checkpoint decision value.
func CheckpointOf(value []byte) (Checkpoint, error) {
	env, err := envelopeOfKind(value, KindAuditCheckpoint)
	if err != nil {
		return Checkpoint{}, err
	}
	var cp Checkpoint
	err = unmarshalData(env, &cp)
	return cp, err
}

// HeadOf reads the head of the fact tree a fold keeps in s: the head after
// the last record applied.
func HeadOf(s Store) (TreeHead, error) {
	t, err := treeOf(s)
	if t == nil {
		return TreeHead{}, err
	}
	return t.Head(), err
}

// treeOf reads the fact tree a fold keeps in s: empty when s holds none,
// nil when what it holds does not decode.
func treeOf(s Store) (*Tree, error) {
	b, ok, err := s.Get([]byte(keyTree))
	if err != nil || !ok {
		return NewTree(), err
	}
	return decodeTree(b)
}
