package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// ArchiveWriter writes an archive (format in archive.go): every fact, in
// order, then every decision, then Close. It writes to a temporary file
// beside the destination and renames it into place only when Close
// succeeds, so a failed export leaves nothing that looks like an archive.
type ArchiveWriter struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	sum  hash.Hash
	off  int64
	crc  hash.Hash32
	// spool holds the leaf index until the facts are all written; leaves
	// counts what it holds.
	spool   *os.File
	spoolW  *bufio.Writer
	leaves  uint64
	tree    *projections.Tree
	m       ArchiveManifest
	byType  map[events.Type]int
	kinds   map[string]uint64
	seen    map[string][sha256.Size]byte
	heads   map[string]RecordedHead
	section byte
	// decisionsAt and leavesAt are the section starts once known.
	decisionsAt, leavesAt int64
	closed                bool
}

// CreateArchive starts an archive of run at path. source names what it is
// exported from, for the manifest.
func CreateArchive(path, run, source string) (*ArchiveWriter, error) {
	if !events.ValidRunID(run) {
		return nil, fmt.Errorf("replay: %q is not a run id", run)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	spool, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.leaves")
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("replay: %w", err)
	}
	w := &ArchiveWriter{
		path: path, f: f, bw: bufio.NewWriterSize(f, 1<<20), sum: sha256.New(), crc: crc32.New(castagnoli),
		spool: spool, spoolW: bufio.NewWriterSize(spool, 1<<16), tree: projections.NewTree(),
		m:      ArchiveManifest{Format: ArchiveFormat, Version: ArchiveVersion, Run: run, Source: source},
		byType: map[events.Type]int{}, kinds: map[string]uint64{}, seen: map[string][sha256.Size]byte{},
		heads: map[string]RecordedHead{}, section: frameFact,
	}
	if err := w.write([]byte(archiveMagic)); err != nil {
		w.Abort()
		return nil, err
	}
	h, _ := json.Marshal(archiveHeader{Format: ArchiveFormat, Version: ArchiveVersion, Run: run})
	if err := w.frame(frameHeader, h); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

func (w *ArchiveWriter) write(b []byte) error {
	w.sum.Write(b)
	w.off += int64(len(b))
	if _, err := w.bw.Write(b); err != nil {
		return fmt.Errorf("replay: write archive: %w", err)
	}
	return nil
}

func (w *ArchiveWriter) frame(kind byte, payload []byte) error {
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = kind
	n := 1 + binary.PutUvarint(head[1:], uint64(len(payload)))
	w.crc.Reset()
	w.crc.Write(head[:n])
	w.crc.Write(payload)
	var crc [4]byte
	binary.LittleEndian.PutUint32(crc[:], w.crc.Sum32())
	if err := w.write(head[:n]); err != nil {
		return err
	}
	if err := w.write(payload); err != nil {
		return err
	}
	return w.write(crc[:])
}

// AddFact appends the next fact; its Seq must follow the last one's.
func (w *ArchiveWriter) AddFact(f Fact) error {
	if w.section != frameFact {
		return errors.New("replay: archive: a fact after the decisions")
	}
	if f.Seq != w.m.Facts+1 {
		return fmt.Errorf("replay: archive: fact numbered %d after %d", f.Seq, w.m.Facts)
	}
	if f.Partition < 0 || f.Offset < 0 {
		return fmt.Errorf("replay: archive: fact %d at partition %d offset %d: not a Kafka position", f.Seq, f.Partition, f.Offset)
	}
	p := make([]byte, 0, 3*binary.MaxVarintLen64+len(f.Value))
	p = binary.AppendUvarint(p, f.Seq)
	p = binary.AppendVarint(p, int64(f.Partition))
	p = binary.AppendVarint(p, f.Offset)
	p = append(p, f.Value...)
	if err := w.frame(frameFact, p); err != nil {
		return err
	}
	leaf := projections.LeafHash(f.Value)
	w.tree.Append(leaf)
	if _, err := w.spoolW.Write(leaf); err != nil {
		return fmt.Errorf("replay: spool leaf index: %w", err)
	}
	w.leaves++
	w.m.Facts++
	w.m.FactBytes += uint64(len(f.Value))
	pos := &projections.LogPosition{Partition: f.Partition, Offset: f.Offset}
	if w.m.FirstFact == nil {
		w.m.FirstFact = pos
	}
	w.m.LastFact = pos
	t := f.Event.Type
	if t == "" {
		t = quickType(f.Value)
	}
	w.byType[t]++
	return nil
}

// quickType reads a canonical event's type without decoding it: the first
// "type" member is the envelope's, since no id or run can hold a quote.
func quickType(value []byte) events.Type {
	const key = `"type":"`
	i := bytes.Index(value, []byte(key))
	if i < 0 {
		return ""
	}
	rest := value[i+len(key):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ""
	}
	return events.Type(rest[:end])
}

// AddDecision appends the next recorded decision.
func (w *ArchiveWriter) AddDecision(r Recorded) error {
	if r.Partition < 0 || r.Offset < 0 {
		return fmt.Errorf("replay: archive: decision %d at partition %d offset %d: not a Kafka position", w.m.Decisions+1, r.Partition, r.Offset)
	}
	if w.section == frameFact {
		w.section, w.decisionsAt = frameDecision, w.off
	}
	p := make([]byte, 0, 2*binary.MaxVarintLen64+len(r.Value))
	p = binary.AppendVarint(p, int64(r.Partition))
	p = binary.AppendVarint(p, r.Offset)
	p = append(p, r.Value...)
	if err := w.frame(frameDecision, p); err != nil {
		return err
	}
	w.m.Decisions++
	d, err := parseRecorded(r)
	if err != nil {
		// Kept as recorded; Verify reports it.
		return nil
	}
	sum := sha256.Sum256(r.Value)
	if _, ok := w.seen[d.ID]; !ok {
		w.seen[d.ID] = sum
		w.kinds[string(d.Type)]++
	}
	w.m.RuleVersion = max(w.m.RuleVersion, d.RuleVersion)
	if d.Head != nil {
		key := fmt.Sprintf("%s/%d", d.Type, d.Seq)
		if _, ok := w.heads[key]; !ok {
			w.heads[key] = RecordedHead{Kind: string(d.Type), Seq: d.Seq, TreeHead: *d.Head}
		}
	}
	return nil
}

// SetSkipped records the records of the run's partition left out.
func (w *ArchiveWriter) SetSkipped(s []Skipped) { w.m.Skipped = slices.Clone(s) }

// Close writes the leaf index, the manifest and the trailer, syncs the
// file and renames it into place.
func (w *ArchiveWriter) Close() (ArchiveManifest, error) {
	if w.closed {
		return ArchiveManifest{}, errors.New("replay: archive already closed")
	}
	m, err := w.finish()
	if err != nil {
		w.Abort()
		return ArchiveManifest{}, err
	}
	w.closed = true
	return m, nil
}

func (w *ArchiveWriter) finish() (ArchiveManifest, error) {
	if w.section == frameFact {
		w.decisionsAt = w.off
	}
	w.leavesAt = w.off
	if err := w.spoolW.Flush(); err != nil {
		return ArchiveManifest{}, err
	}
	if _, err := w.spool.Seek(0, io.SeekStart); err != nil {
		return ArchiveManifest{}, err
	}
	r := bufio.NewReaderSize(w.spool, 1<<16)
	chunk := make([]byte, leavesPerLeaf*sha256.Size)
	for first := uint64(1); first <= w.leaves; first += leavesPerLeaf {
		n := min(uint64(leavesPerLeaf), w.leaves-first+1)
		if _, err := io.ReadFull(r, chunk[:n*sha256.Size]); err != nil {
			return ArchiveManifest{}, fmt.Errorf("replay: read back leaf index: %w", err)
		}
		p := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(chunk)), first)
		if err := w.frame(frameLeaves, append(p, chunk[:n*sha256.Size]...)); err != nil {
			return ArchiveManifest{}, err
		}
		w.m.Leaves += n
	}

	m := w.m
	m.FinalHead = w.tree.Head()
	for _, t := range events.FactTypes() {
		m.FactsByType = append(m.FactsByType, projections.TypeCount{Type: t, N: w.byType[t]})
	}
	for t, n := range w.byType {
		if !slices.Contains(events.FactTypes(), t) {
			m.FactsByType = append(m.FactsByType, projections.TypeCount{Type: t, N: n})
		}
	}
	slices.SortStableFunc(m.FactsByType[len(events.FactTypes()):], func(a, b projections.TypeCount) int { return cmp.Compare(a.Type, b.Type) })
	for _, k := range slices.Sorted(maps.Keys(w.kinds)) {
		m.DecisionsByKind = append(m.DecisionsByKind, projections.NamedCount{Name: k, N: int(w.kinds[k])})
	}
	m.Heads = make([]RecordedHead, 0, len(w.heads))
	for _, h := range w.heads {
		m.Heads = append(m.Heads, h)
	}
	slices.SortFunc(m.Heads, func(a, b RecordedHead) int {
		return cmp.Or(cmp.Compare(a.Size, b.Size), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Seq, b.Seq))
	})
	manifestAt := w.off
	body, err := json.Marshal(m)
	if err != nil {
		return ArchiveManifest{}, err
	}
	if err := w.frame(frameManifest, body); err != nil {
		return ArchiveManifest{}, err
	}
	var tr [trailerSize]byte
	binary.LittleEndian.PutUint64(tr[0:], uint64(w.decisionsAt))
	binary.LittleEndian.PutUint64(tr[8:], uint64(w.leavesAt))
	binary.LittleEndian.PutUint64(tr[16:], uint64(manifestAt))
	copy(tr[24:], w.sum.Sum(nil))
	copy(tr[24+sha256.Size:], trailerMagic)
	if _, err := w.bw.Write(tr[:]); err != nil {
		return ArchiveManifest{}, err
	}
	if err := w.bw.Flush(); err != nil {
		return ArchiveManifest{}, err
	}
	// CreateTemp made the file private; an archive is for sharing.
	if err := w.f.Chmod(0o644); err != nil {
		return ArchiveManifest{}, err
	}
	if err := w.f.Sync(); err != nil {
		return ArchiveManifest{}, err
	}
	if err := w.f.Close(); err != nil {
		return ArchiveManifest{}, err
	}
	w.spool.Close()
	os.Remove(w.spool.Name())
	if err := os.Rename(w.f.Name(), w.path); err != nil {
		return ArchiveManifest{}, fmt.Errorf("replay: %w", err)
	}
	return m, nil
}

// Abort discards what was written.
func (w *ArchiveWriter) Abort() {
	w.closed = true
	w.f.Close()
	os.Remove(w.f.Name())
	w.spool.Close()
	os.Remove(w.spool.Name())
}
