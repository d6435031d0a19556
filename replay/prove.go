package replay

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Proofs (docs/design.md §9.3). An inclusion proof shows that one fact is leaf i
// of the tree whose head a batch or checkpoint recorded; a consistency
// proof that a later recorded head extends an earlier one. Both are the
// RFC 6962 proofs (github.com/transparency-dev/merkle), and both can be
// checked with nothing but the proof and the head(s) the checker trusts:
// O(log n) hashes, not the log.

// ProofFormat names the proof file format.
const ProofFormat = "rolloutledger-proof"

// Proof kinds.
const (
	ProofInclusion   = "inclusion"
	ProofConsistency = "consistency"
)

// Proof is a proof file.
type Proof struct {
	Format string `json:"format"`
	Kind   string `json:"kind"`
	Run    string `json:"run"`
	// Hasher is always "rfc6962-sha256".
	Hasher string `json:"hasher"`
	// Fact is the fact an inclusion proof proves, Head the head it proves
	// it against.
	Fact *ProvenFact   `json:"fact,omitempty"`
	Head *RecordedHead `json:"head,omitempty"`
	// Old and New are the heads of a consistency proof.
	Old *RecordedHead `json:"old,omitempty"`
	New *RecordedHead `json:"new,omitempty"`
	// Hashes are the proof's node hashes, hex, in RFC 6962 order.
	Hashes []string `json:"hashes"`
}

// ProvenFact is the fact of an inclusion proof: where it is, and its
// record value, whose leaf hash the proof starts from.
type ProvenFact struct {
	Seq       uint64      `json:"seq"`
	LeafIndex uint64      `json:"leaf_index"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	ID        string      `json:"id,omitempty"`
	Type      events.Type `json:"type,omitempty"`
	LeafHash  string      `json:"leaf_hash"`
	// Value is the record value (base64 in JSON).
	Value []byte `json:"value"`
}

// HeadRef names a recorded head: that of batch N, of checkpoint N, or the
// first batch or checkpoint at or after fact N (Kind "fact").
type HeadRef struct {
	Kind string // "batch", "checkpoint" or "fact"
	N    uint64
}

// ParseHeadRef reads "batch:K" (or a bare K), "checkpoint:N" or "fact:S".
func ParseHeadRef(s string) (HeadRef, error) {
	kind, num, ok := strings.Cut(s, ":")
	if !ok {
		kind, num = "batch", s
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 || (kind != "batch" && kind != "checkpoint" && kind != "fact") {
		return HeadRef{}, fmt.Errorf("replay: head %q: want batch:K (or K), checkpoint:N or fact:S, numbers from 1", s)
	}
	return HeadRef{Kind: kind, N: n}, nil
}

func (r HeadRef) String() string { return fmt.Sprintf("%s:%d", r.Kind, r.N) }

// ErrNoSuchHead and ErrNoSuchFact are returned when a reference names
// nothing in the run.
var (
	ErrNoSuchHead = errors.New("replay: no such head")
	ErrNoSuchFact = errors.New("replay: no such fact")
)

// recordedHeads lists the heads src's decisions carry.
func recordedHeads(ctx context.Context, src Source) ([]RecordedHead, error) {
	var heads []RecordedHead
	seen := map[string]bool{}
	err := src.Decisions(ctx, func(r Recorded) error {
		d, err := parseRecorded(r)
		if err != nil || d.Head == nil || seen[d.ID] {
			return nil
		}
		seen[d.ID] = true
		heads = append(heads, RecordedHead{Kind: string(d.Type), Seq: d.Seq, TreeHead: *d.Head})
		return nil
	})
	return heads, err
}

func findHead(heads []RecordedHead, ref HeadRef) (RecordedHead, error) {
	var best *RecordedHead
	for i := range heads {
		h := &heads[i]
		switch ref.Kind {
		case "batch":
			if h.Kind == string(projections.KindBatchSealed) && h.Seq == ref.N {
				return *h, nil
			}
		case "checkpoint":
			if h.Kind == string(projections.KindAuditCheckpoint) && h.Seq == ref.N {
				return *h, nil
			}
		case "fact":
			if h.Size >= ref.N && (best == nil || h.Size < best.Size) {
				best = h
			}
		}
	}
	if best != nil {
		return *best, nil
	}
	if ref.Kind == "fact" {
		return RecordedHead{}, fmt.Errorf("%w: no batch or checkpoint committed to fact %d yet", ErrNoSuchHead, ref.N)
	}
	return RecordedHead{}, fmt.Errorf("%w: %s was not recorded", ErrNoSuchHead, ref)
}

// FactRef names a fact by its event id, or by its position ("seq:S").
type FactRef struct {
	ID  string
	Seq uint64
}

// ParseFactRef reads an event id or "seq:S".
func ParseFactRef(s string) (FactRef, error) {
	if rest, ok := strings.CutPrefix(s, "seq:"); ok {
		n, err := strconv.ParseUint(rest, 10, 64)
		if err != nil || n == 0 {
			return FactRef{}, fmt.Errorf("replay: fact %q: want seq:S, S from 1", s)
		}
		return FactRef{Seq: n}, nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return FactRef{}, fmt.Errorf("replay: fact %q: want an event id (UUID) or seq:S", s)
	}
	return FactRef{ID: id.String()}, nil
}

// nodeCollector appends leaves to a compact range and keeps the hashes of
// the tree nodes a proof needs as the range forms them.
type nodeCollector struct {
	r    *compact.Range
	want map[compact.NodeID]int
	got  [][]byte
}

func newCollector(ids []compact.NodeID) *nodeCollector {
	c := &nodeCollector{r: (&compact.RangeFactory{Hash: projections.HashChildren}).NewEmptyRange(0),
		want: map[compact.NodeID]int{}, got: make([][]byte, len(ids))}
	for i, id := range ids {
		c.want[id] = i
	}
	return c
}

func (c *nodeCollector) visit(id compact.NodeID, hash []byte) {
	if i, ok := c.want[id]; ok {
		c.got[i] = hash
	}
}

func (c *nodeCollector) append(leaf []byte) error { return c.r.Append(leaf, c.visit) }

func (c *nodeCollector) root() string {
	root, _ := c.r.GetRootHash(nil)
	if c.r.End() == 0 {
		root = rfc6962.DefaultHasher.EmptyRoot()
	}
	return hex.EncodeToString(root)
}

// leavesUpTo feeds the leaves of facts from..to (1-based, inclusive) to
// add: from the source's leaf index when it has one — checked in the end
// against the recorded root, so nothing is taken on trust — else hashed
// from the facts.
func leavesUpTo(ctx context.Context, src Source, to uint64, add func(seq uint64, leaf []byte) error) error {
	stop := func(seq uint64, leaf []byte) error {
		if seq > to {
			return errFound
		}
		return add(seq, leaf)
	}
	var err error
	if li, ok := src.(LeafIndexer); ok {
		err = li.Leaves(ctx, stop)
	} else {
		err = rawFactsOf(ctx, src, func(f Fact) error { return stop(f.Seq, projections.LeafHash(f.Value)) })
	}
	if err != nil && !errors.Is(err, errFound) {
		return err
	}
	return nil
}

// ProveInclusion proves that the fact ref names is in the history the head
// at headRef committed to. A zero headRef means the first batch or
// checkpoint that committed to the fact.
func ProveInclusion(ctx context.Context, src Source, ref FactRef, headRef HeadRef) (*Proof, error) {
	var fact *ProvenFact
	err := rawFactsOf(ctx, src, func(f Fact) error {
		if ref.Seq != 0 && f.Seq != ref.Seq {
			return nil
		}
		// A canonical record starts with its id: skip others undecoded.
		if ref.ID != "" && bytes.HasPrefix(f.Value, []byte(`{"id":"`)) && !bytes.HasPrefix(f.Value[len(`{"id":"`):], []byte(ref.ID)) {
			return nil
		}
		id, typ := "", events.Type("")
		if ev, err := eventOf(f); err == nil {
			id, typ = ev.ID, ev.Type
		}
		if ref.ID != "" && id != ref.ID {
			return nil
		}
		fact = &ProvenFact{Seq: f.Seq, LeafIndex: f.Seq - 1, Partition: f.Partition, Offset: f.Offset,
			ID: id, Type: typ, LeafHash: hex.EncodeToString(projections.LeafHash(f.Value)), Value: f.Value}
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, err
	}
	if fact == nil {
		if ref.ID != "" {
			return nil, fmt.Errorf("%w: no fact of run %s has id %s", ErrNoSuchFact, src.Run(), ref.ID)
		}
		return nil, fmt.Errorf("%w: run %s has no fact %d", ErrNoSuchFact, src.Run(), ref.Seq)
	}
	heads, err := recordedHeads(ctx, src)
	if err != nil {
		return nil, err
	}
	if headRef.Kind == "" {
		headRef = HeadRef{Kind: "fact", N: fact.Seq}
	}
	head, err := findHead(heads, headRef)
	if err != nil {
		return nil, err
	}
	if fact.Seq > head.Size {
		return nil, fmt.Errorf("%w: fact %d comes after the %d facts %s %d committed to", ErrNoSuchFact, fact.Seq, head.Size, head.Kind, head.Seq)
	}
	nodes, err := proof.Inclusion(fact.LeafIndex, head.Size)
	if err != nil {
		return nil, err
	}
	c := newCollector(nodes.IDs)
	if err := leavesUpTo(ctx, src, head.Size, func(_ uint64, leaf []byte) error { return c.append(leaf) }); err != nil {
		return nil, err
	}
	if c.r.End() != head.Size || c.root() != head.Root {
		return nil, fmt.Errorf("replay: the history read does not reproduce the head %s %d recorded (size %d): run replay --verify", head.Kind, head.Seq, head.Size)
	}
	hashes, err := nodes.Rehash(c.got, projections.HashChildren)
	if err != nil {
		return nil, err
	}
	p := &Proof{Format: ProofFormat, Kind: ProofInclusion, Run: src.Run(), Hasher: "rfc6962-sha256", Fact: fact, Head: &head, Hashes: hexAll(hashes)}
	if err := CheckProof(p, head.TreeHead); err != nil {
		return nil, fmt.Errorf("replay: the proof made does not check: %w", err)
	}
	return p, nil
}

// ProveConsistency proves that the head at b extends the head at a.
func ProveConsistency(ctx context.Context, src Source, a, b HeadRef) (*Proof, error) {
	heads, err := recordedHeads(ctx, src)
	if err != nil {
		return nil, err
	}
	old, err := findHead(heads, a)
	if err != nil {
		return nil, err
	}
	cur, err := findHead(heads, b)
	if err != nil {
		return nil, err
	}
	if old.Size > cur.Size {
		return nil, fmt.Errorf("replay: %s (size %d) is larger than %s (size %d): a consistency proof goes from the smaller head", a, old.Size, b, cur.Size)
	}
	nodes, err := proof.Consistency(old.Size, cur.Size)
	if err != nil {
		return nil, err
	}
	c := newCollector(nodes.IDs)
	var oldRoot string
	err = leavesUpTo(ctx, src, cur.Size, func(seq uint64, leaf []byte) error {
		if err := c.append(leaf); err != nil {
			return err
		}
		if seq == old.Size {
			oldRoot = c.root()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if oldRoot != old.Root || c.r.End() != cur.Size || c.root() != cur.Root {
		return nil, fmt.Errorf("replay: the history read does not reproduce the recorded heads (sizes %d and %d): run replay --verify", old.Size, cur.Size)
	}
	hashes, err := nodes.Rehash(c.got, projections.HashChildren)
	if err != nil {
		return nil, err
	}
	p := &Proof{Format: ProofFormat, Kind: ProofConsistency, Run: src.Run(), Hasher: "rfc6962-sha256", Old: &old, New: &cur, Hashes: hexAll(hashes)}
	if err := CheckProof(p, old.TreeHead, cur.TreeHead); err != nil {
		return nil, fmt.Errorf("replay: the proof made does not check: %w", err)
	}
	return p, nil
}

// ErrProof wraps every reason a proof does not check.
var ErrProof = errors.New("replay: proof does not check")

// CheckProof checks p against the heads the checker trusts — one for an
// inclusion proof, the old and the new for a consistency proof — and
// nothing else: the heads written in the proof are only labels.
func CheckProof(p *Proof, trusted ...projections.TreeHead) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrProof, fmt.Sprintf(format, args...))
	}
	if p.Format != ProofFormat || p.Hasher != "rfc6962-sha256" {
		return fail("format %q hasher %q, want %s and rfc6962-sha256", p.Format, p.Hasher, ProofFormat)
	}
	hashes := make([][]byte, len(p.Hashes))
	for i, h := range p.Hashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			return fail("hash %d is not 32 bytes of hex", i)
		}
		hashes[i] = b
	}
	roots := make([][]byte, len(trusted))
	for i, h := range trusted {
		b, err := hex.DecodeString(h.Root)
		if err != nil || len(b) != 32 {
			return fail("trusted head %d's root is not 32 bytes of hex", i+1)
		}
		roots[i] = b
	}
	switch p.Kind {
	case ProofInclusion:
		if len(trusted) != 1 || p.Fact == nil {
			return fail("an inclusion proof checks against one head")
		}
		leaf := projections.LeafHash(p.Fact.Value)
		if hex.EncodeToString(leaf) != p.Fact.LeafHash {
			return fail("the fact's value hashes to leaf %x, the proof names %s", leaf, p.Fact.LeafHash)
		}
		if p.Fact.Seq != p.Fact.LeafIndex+1 {
			return fail("fact %d is not leaf %d", p.Fact.Seq, p.Fact.LeafIndex)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Fact.LeafIndex, trusted[0].Size, leaf, hashes, roots[0]); err != nil {
			return fail("fact %d in the tree of size %d with root %s: %v", p.Fact.Seq, trusted[0].Size, trusted[0].Root, err)
		}
	case ProofConsistency:
		if len(trusted) != 2 {
			return fail("a consistency proof checks against two heads")
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, trusted[0].Size, trusted[1].Size, hashes, roots[0], roots[1]); err != nil {
			return fail("from size %d to size %d: %v", trusted[0].Size, trusted[1].Size, err)
		}
	default:
		return fail("unknown kind %q", p.Kind)
	}
	return nil
}

// ParseHead reads a head written SIZE:ROOT.
func ParseHead(s string) (projections.TreeHead, error) {
	size, root, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(size, 10, 64)
	if b, herr := hex.DecodeString(root); !ok || err != nil || herr != nil || len(b) != 32 {
		return projections.TreeHead{}, fmt.Errorf("replay: head %q: want SIZE:ROOT, ROOT 64 hex digits", s)
	}
	return projections.TreeHead{Size: n, Root: strings.ToLower(root)}, nil
}

func hexAll(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = hex.EncodeToString(b)
	}
	return out
}

// eventOf decodes f unless the source did.
func eventOf(f Fact) (events.Event, error) {
	if f.Event.Type != "" {
		return f.Event, nil
	}
	return events.Decode(f.Value)
}
