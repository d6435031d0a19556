package replay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	"github.com/rolloutledger/rolloutledger/internal/slab"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Archive format, version 1: one file, written once, read sequentially.
//
//	file    = magic header fact* decision* leaves* manifest trailer
//	magic   = "RLARCHV1"                                       (8 bytes)
//	frame   = kind:1 len:uvarint payload:len crc:4
//	header  = frame 'H', payload: JSON {"format","version","run"}
//	fact    = frame 'F', payload: seq:uvarint partition:varint offset:varint value
//	decision= frame 'D', payload: partition:varint offset:varint value
//	leaves  = frame 'L', payload: first:uvarint leaf-hash:32 × n   (n ≤ 4096)
//	manifest= frame 'M', payload: JSON [ArchiveManifest]
//	trailer = decisions:u64 leaves:u64 manifest:u64 sha256:32 "RLARCEND"  (64 bytes)
//
// crc is the CRC-32C (Castagnoli), little endian, of kind, len and payload.
// The trailer's three offsets say where the first decision frame, the first
// leaves frame and the manifest frame start (the decision and leaf sections
// may be empty: the offset of what follows), little endian; sha256 covers
// every byte before the trailer. Facts are numbered 1, 2, ... in log order;
// their partition and offset are their original positions in the facts
// topic, a decision's in the decisions topic (a partition is 0 to 2^31-1,
// an offset not negative; anything else is refused). The leaf index holds the RFC
// 6962 leaf hash of every fact as the exporter computed it (see
// [LeafIndexer]).
//
// [OpenArchive] verifies all of it before it returns: the trailer, every
// frame's CRC, the order of the sections, the facts' numbering, the
// SHA-256 of the file, and the manifest's counts and final head against
// the facts recomputed. An archive that passes is a faithful copy of what
// was exported; whether what was exported is the history the projector
// decided on is [Verify]'s question.

// ArchiveFormat and ArchiveVersion name the format in the header and
// manifest.
const (
	ArchiveFormat  = "rolloutledger-archive"
	ArchiveVersion = 1
)

const (
	archiveMagic  = "RLARCHV1"
	trailerMagic  = "RLARCEND"
	trailerSize   = 3*8 + sha256.Size + 8 // offsets, SHA-256, trailerMagic
	leavesPerLeaf = 4096                  // leaves per 'L' frame
	// maxFrame bounds a frame's payload: a fact is at most 2 MiB raw (the
	// decoder's bound), a leaves frame 128 KiB, a manifest a few MB.
	maxFrame = 64 << 20
)

const (
	frameHeader   = 'H'
	frameFact     = 'F'
	frameDecision = 'D'
	frameLeaves   = 'L'
	frameManifest = 'M'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptArchive is wrapped by every [ArchiveError].
var ErrCorruptArchive = errors.New("replay: corrupt archive")

// ArchiveError is a problem found in an archive file: where it lies, and
// which fact when it lies in one.
type ArchiveError struct {
	Path   string
	Offset int64  // byte offset in the file
	Seq    uint64 // the fact concerned, 0 when none
	Detail string
}

func (e *ArchiveError) Error() string {
	if e.Seq > 0 {
		return fmt.Sprintf("replay: archive %s: fact %d (byte %d): %s", e.Path, e.Seq, e.Offset, e.Detail)
	}
	return fmt.Sprintf("replay: archive %s: byte %d: %s", e.Path, e.Offset, e.Detail)
}

func (e *ArchiveError) Unwrap() error { return ErrCorruptArchive }

// ArchiveManifest describes an archive: what it holds and where it came
// from. It carries no clock, so the same history exports to the same
// bytes.
type ArchiveManifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Run     string `json:"run"`
	// RuleVersion is the rule version the recorded decisions name (0 when
	// none was recorded).
	RuleVersion int `json:"rule_version"`
	// Source names what the archive was exported from.
	Source string `json:"source"`

	Facts       uint64                   `json:"facts"`
	FactBytes   uint64                   `json:"fact_bytes"`
	FactsByType []projections.TypeCount  `json:"facts_by_type"`
	FirstFact   *projections.LogPosition `json:"first_fact,omitempty"`
	LastFact    *projections.LogPosition `json:"last_fact,omitempty"`
	// Skipped lists records of the run's partition the projector does not
	// fold (undecodable), which the archive leaves out as well.
	Skipped []Skipped `json:"skipped,omitempty"`

	// Decisions counts the decision records, identical re-emissions
	// included; DecisionsByKind the distinct decisions.
	Decisions       uint64                  `json:"decisions"`
	DecisionsByKind projections.NamedCounts `json:"decisions_by_kind"`
	// Heads are the tree heads the recorded decisions carry, by size.
	Heads []RecordedHead `json:"heads"`
	// FinalHead is the head of the tree of all the archive's facts.
	FinalHead projections.TreeHead `json:"final_head"`
	Leaves    uint64               `json:"leaves"`
}

// RecordedHead is a tree head a recorded decision committed to.
type RecordedHead struct {
	Kind string `json:"kind"`
	Seq  uint64 `json:"seq"`
	projections.TreeHead
}

type archiveHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Run     string `json:"run"`
}

// Archive is an opened, verified archive. It is a [Source] and a
// [LeafIndexer]; each pass reads the file anew, so passes may run one
// after another or side by side.
type Archive struct {
	path     string
	manifest ArchiveManifest
	// Section starts, and the end of the frames (the trailer's start).
	facts, decisions, leaves, manifestAt, body int64
}

// OpenArchive opens the archive at path read-only and verifies it (see the
// format above). Errors about the content are [*ArchiveError]s.
func OpenArchive(path string) (*Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	bad := func(off int64, seq uint64, format string, args ...any) error {
		return &ArchiveError{Path: path, Offset: off, Seq: seq, Detail: fmt.Sprintf(format, args...)}
	}
	size := st.Size()
	if size < int64(len(archiveMagic)+trailerSize) {
		return nil, bad(0, 0, "%d bytes is too short for an archive", size)
	}
	var tr [trailerSize]byte
	if _, err := f.ReadAt(tr[:], size-trailerSize); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	body := size - trailerSize
	if string(tr[trailerSize-len(trailerMagic):]) != trailerMagic {
		return nil, bad(body, 0, "no archive trailer (the file is truncated or not an archive)")
	}
	a := &Archive{path: path, body: body,
		decisions:  int64(binary.LittleEndian.Uint64(tr[0:])),
		leaves:     int64(binary.LittleEndian.Uint64(tr[8:])),
		manifestAt: int64(binary.LittleEndian.Uint64(tr[16:])),
	}
	wantSum := tr[24 : 24+sha256.Size]

	sum := sha256.New()
	fr := newFrameReader(io.TeeReader(io.NewSectionReader(f, 0, body), sum), path, body)
	magic := make([]byte, len(archiveMagic))
	if _, err := io.ReadFull(fr.r, magic); err != nil || string(magic) != archiveMagic {
		return nil, bad(0, 0, "not an archive (magic %q)", magic)
	}
	fr.off = int64(len(archiveMagic))

	kind, payload, err := fr.next()
	if err == io.EOF {
		return nil, bad(fr.off, 0, "the archive ends after its magic, without a header")
	}
	if err != nil {
		return nil, err
	}
	var h archiveHeader
	if kind != frameHeader || json.Unmarshal(payload, &h) != nil {
		return nil, bad(fr.at, 0, "the first frame is not the archive header")
	}
	if h.Format != ArchiveFormat || h.Version != ArchiveVersion {
		return nil, bad(fr.at, 0, "format %q version %d, this build reads %s version %d", h.Format, h.Version, ArchiveFormat, ArchiveVersion)
	}

	tree := projections.NewTree()
	var facts, decisions, leaves uint64
	a.facts = fr.off
	// starts are the trailer's offsets of the sections after the facts, by
	// rank; a section that is empty starts where the next one does.
	starts := [4]int64{a.facts, a.decisions, a.leaves, a.manifestAt}
	section := 0
	var manifest []byte
	for manifest == nil {
		kind, payload, err := fr.next()
		if err == io.EOF {
			return nil, bad(fr.off, 0, "the archive ends without a manifest")
		}
		var ae *ArchiveError
		if errors.As(err, &ae) && section == 0 {
			ae.Seq = facts + 1 // the frame after the last good fact
		}
		if err != nil {
			return nil, err
		}
		r := rank(kind)
		if r < 0 {
			return nil, bad(fr.at, 0, "unknown frame kind %q", kind)
		}
		if r < section {
			return nil, bad(fr.at, 0, "a %q frame after the %q section", kind, sectionKinds[section])
		}
		for ; section < r; section++ {
			if starts[section+1] != fr.at {
				return nil, bad(fr.at, 0, "the %q section starts at byte %d, the trailer says %d", sectionKinds[section+1], fr.at, starts[section+1])
			}
		}
		switch kind {
		case frameFact:
			seq, _, _, value, err := parseFact(payload)
			if err != nil {
				return nil, bad(fr.at, facts+1, "%v", err)
			}
			if seq != facts+1 {
				return nil, bad(fr.at, facts+1, "numbered %d", seq)
			}
			facts++
			tree.AppendValue(value)
		case frameDecision:
			if _, _, _, err := parseDecision(payload); err != nil {
				return nil, bad(fr.at, 0, "decision %d: %v", decisions+1, err)
			}
			decisions++
		case frameLeaves:
			first, hashes, err := parseLeaves(payload)
			if err != nil || first != leaves+1 {
				return nil, bad(fr.at, 0, "leaf frame from leaf %d, want %d (%v)", first, leaves+1, err)
			}
			leaves += uint64(len(hashes) / sha256.Size)
		case frameManifest:
			manifest = payload
		}
	}
	if fr.off != body {
		return nil, bad(fr.off, 0, "%d bytes between the manifest and the trailer", body-fr.off)
	}
	if got := sum.Sum(nil); !bytes.Equal(got, wantSum) {
		return nil, bad(body, 0, "SHA-256 of the file is %x, the trailer says %x", got, wantSum)
	}
	if err := json.Unmarshal(manifest, &a.manifest); err != nil {
		return nil, bad(a.manifestAt, 0, "manifest: %v", err)
	}
	m := &a.manifest
	switch {
	case m.Format != ArchiveFormat || m.Version != ArchiveVersion || m.Run != h.Run:
		return nil, bad(a.manifestAt, 0, "the manifest describes %s version %d of run %q, the header %s version %d of %q", m.Format, m.Version, m.Run, h.Format, h.Version, h.Run)
	case m.Facts != facts:
		return nil, bad(a.manifestAt, 0, "the manifest counts %d facts, the archive holds %d", m.Facts, facts)
	case m.Decisions != decisions:
		return nil, bad(a.manifestAt, 0, "the manifest counts %d decisions, the archive holds %d", m.Decisions, decisions)
	case m.Leaves != leaves:
		return nil, bad(a.manifestAt, 0, "the manifest counts %d leaves, the archive holds %d", m.Leaves, leaves)
	case m.FinalHead != tree.Head():
		return nil, bad(a.manifestAt, 0, "the manifest's final head is %d:%s, the facts give %d:%s", m.FinalHead.Size, m.FinalHead.Root, tree.Size(), tree.Head().Root)
	}
	return a, nil
}

// sectionKinds are the frame kinds of the sections, in order.
var sectionKinds = [4]byte{frameFact, frameDecision, frameLeaves, frameManifest}

// rank orders the sections; -1 for a kind that has no section.
func rank(kind byte) int {
	switch kind {
	case frameFact:
		return 0
	case frameDecision:
		return 1
	case frameLeaves:
		return 2
	case frameManifest:
		return 3
	}
	return -1
}

// Manifest is the archive's manifest.
func (a *Archive) Manifest() ArchiveManifest { return a.manifest }

// Path is where the archive lies.
func (a *Archive) Path() string { return a.path }

// Run is the archived run.
func (a *Archive) Run() string { return a.manifest.Run }

// Describe names the archive.
func (a *Archive) Describe() string {
	return fmt.Sprintf("archive %s (%d facts, %d decisions, head %d:%s)", a.path, a.manifest.Facts, a.manifest.Decisions,
		a.manifest.FinalHead.Size, a.manifest.FinalHead.Root)
}

// section reads the frames of one kind from start, calling fn with each
// payload, and stops at the first frame of another kind.
func (a *Archive) section(ctx context.Context, start int64, kind byte, fn func(at int64, payload []byte) error) error {
	f, err := os.Open(a.path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	fr := newFrameReader(io.NewSectionReader(f, start, a.body-start), a.path, a.body)
	fr.off = start
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		k, payload, err := fr.next()
		if err != nil {
			return err
		}
		if k != kind {
			return nil
		}
		if err := fn(fr.at, payload); err != nil {
			return err
		}
	}
}

// FactsBound is the number of facts the archive holds ([FactsBounder]).
func (a *Archive) FactsBound() uint64 { return a.manifest.Facts }

// Facts reads the archived facts.
func (a *Archive) Facts(ctx context.Context, fn func(Fact) error) error {
	return a.section(ctx, a.facts, frameFact, func(at int64, p []byte) error {
		seq, part, off, value, err := parseFact(p)
		if err != nil {
			return &ArchiveError{Path: a.path, Offset: at, Detail: err.Error()}
		}
		return fn(Fact{Seq: seq, Partition: part, Offset: off, Value: value})
	})
}

// Decisions reads the archived decisions.
func (a *Archive) Decisions(ctx context.Context, fn func(Recorded) error) error {
	return a.section(ctx, a.decisions, frameDecision, func(at int64, p []byte) error {
		part, off, value, err := parseDecision(p)
		if err != nil {
			return &ArchiveError{Path: a.path, Offset: at, Detail: err.Error()}
		}
		return fn(Recorded{Partition: part, Offset: off, Value: value})
	})
}

// Leaves reads the exporter's leaf index.
func (a *Archive) Leaves(ctx context.Context, fn func(seq uint64, leaf []byte) error) error {
	return a.section(ctx, a.leaves, frameLeaves, func(at int64, p []byte) error {
		first, hashes, err := parseLeaves(p)
		if err != nil {
			return &ArchiveError{Path: a.path, Offset: at, Detail: err.Error()}
		}
		for i := 0; i < len(hashes); i += sha256.Size {
			if err := fn(first+uint64(i/sha256.Size), hashes[i:i+sha256.Size:i+sha256.Size]); err != nil {
				return err
			}
		}
		return nil
	})
}

// frameReader reads frames, checking each CRC. Payloads are fresh
// allocations, the caller's to keep.
type frameReader struct {
	r    *bufio.Reader
	path string
	off  int64 // offset of the next frame
	at   int64 // offset of the frame last read
	end  int64 // offset where the frames end
	// head holds a frame's kind and length as written, for its CRC: a
	// field, since a local passed to the CRC would move to the heap at
	// every frame.
	head [1 + binary.MaxVarintLen64]byte
	// payloads is where frames' payloads and CRCs are cut from: a replay
	// reads one frame a fact, and the fold holds each fact's value only
	// until it has applied it, so a block lives as long as the facts cut
	// from it are in flight.
	payloads slab.Bytes
}

// frameSlab is the size of the blocks frames' payloads are cut from.
const frameSlab = 256 << 10

func newFrameReader(r io.Reader, path string, end int64) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 1<<20), path: path, end: end, payloads: slab.Bytes{Block: frameSlab}}
}

func (fr *frameReader) next() (byte, []byte, error) {
	fr.at = fr.off
	bad := func(format string, args ...any) error {
		return &ArchiveError{Path: fr.path, Offset: fr.at, Detail: fmt.Sprintf(format, args...)}
	}
	kind, err := fr.r.ReadByte()
	if err == io.EOF {
		return 0, nil, io.EOF
	}
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(fr.r)
	if err != nil {
		return 0, nil, bad("frame %q: unreadable length", kind)
	}
	if n > maxFrame {
		return 0, nil, bad("frame %q of %d bytes, more than %d", kind, n, maxFrame)
	}
	// The kind and the length as written, which the CRC covers.
	fr.head[0] = kind
	h := fr.head[:1+binary.PutUvarint(fr.head[1:], n)]
	// A damaged length must not make the reader allocate what the file
	// cannot hold.
	if fr.at+int64(len(h))+int64(n)+4 > fr.end {
		return 0, nil, bad("frame %q of %d bytes runs past the end of the frames at byte %d", kind, n, fr.end)
	}
	payload := fr.payloads.Cut(int(n) + 4)
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		return 0, nil, bad("frame %q: truncated", kind)
	}
	crc := crc32.Update(crc32.Update(0, castagnoli, h), castagnoli, payload[:n])
	if want := binary.LittleEndian.Uint32(payload[n:]); crc != want {
		return 0, nil, bad("frame %q: CRC-32C %08x, recorded %08x", kind, crc, want)
	}
	fr.off += int64(len(h)) + int64(n) + 4
	return kind, payload[:n:n], nil
}

func parseFact(p []byte) (seq uint64, part int32, off int64, value []byte, err error) {
	seq, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, 0, 0, nil, errors.New("unreadable fact number")
	}
	part, off, value, err = parsePosition(p[n:])
	return seq, part, off, value, err
}

func parseDecision(p []byte) (part int32, off int64, value []byte, err error) {
	return parsePosition(p)
}

// parsePosition reads the partition and offset a record had in Kafka,
// then its value. Both are refused outside Kafka's ranges rather than
// truncated or taken as given: a partition is 0 to 2^31-1, an offset is not
// negative.
func parsePosition(p []byte) (part int32, off int64, value []byte, err error) {
	pt, n := binary.Varint(p)
	if n <= 0 {
		return 0, 0, nil, errors.New("unreadable partition")
	}
	if pt < 0 || pt > math.MaxInt32 {
		return 0, 0, nil, fmt.Errorf("partition %d is not a Kafka partition (0 to %d)", pt, math.MaxInt32)
	}
	p = p[n:]
	off, n = binary.Varint(p)
	if n <= 0 {
		return 0, 0, nil, errors.New("unreadable offset")
	}
	if off < 0 {
		return 0, 0, nil, fmt.Errorf("offset %d is negative", off)
	}
	return int32(pt), off, p[n:], nil
}

func parseLeaves(p []byte) (first uint64, hashes []byte, err error) {
	first, n := binary.Uvarint(p)
	if n <= 0 || first == 0 || (len(p)-n)%sha256.Size != 0 {
		return 0, nil, errors.New("malformed leaf frame")
	}
	return first, p[n:], nil
}
