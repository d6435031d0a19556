package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
)

// tinyRun is a simulated run of a few hundred facts with two sealed
// batches, each committing to a tree head.
var tinyRun = simulate.Options{Seed: 3, Tasks: 8, Steps: 2, BatchGroups: 2, GroupSize: 4, MaxTurns: 12}

// rawFrame is one frame of an archive, as the bytes lie.
type rawFrame struct {
	kind    byte
	payload []byte
	at      int64 // byte offset in the file it was read from
}

// readFrames splits an archive file into its frames.
func readFrames(t *testing.T, b []byte) []rawFrame {
	t.Helper()
	var out []rawFrame
	off := int64(len(archiveMagic))
	end := int64(len(b) - trailerSize)
	for off < end {
		kind := b[off]
		n, k := binary.Uvarint(b[off+1:])
		start := off + 1 + int64(k)
		out = append(out, rawFrame{kind: kind, payload: bytes.Clone(b[start : start+int64(n)]), at: off})
		off = start + int64(n) + 4
	}
	return out
}

// writeFrames writes frames as an archive whose every checksum, section
// offset and SHA-256 is recomputed: what a forger who knows the format
// writes. It returns the path and each frame's byte offset.
func writeFrames(t *testing.T, frames []rawFrame) (string, []int64) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(archiveMagic)
	starts := map[byte]int64{}
	var at []int64
	for _, f := range frames {
		off := int64(b.Len())
		at = append(at, off)
		if _, ok := starts[f.kind]; !ok {
			starts[f.kind] = off
		}
		head := binary.AppendUvarint([]byte{f.kind}, uint64(len(f.payload)))
		b.Write(head)
		b.Write(f.payload)
		crc := crc32.New(castagnoli)
		crc.Write(head)
		crc.Write(f.payload)
		b.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	}
	section := func(kinds ...byte) int64 {
		for _, k := range kinds {
			if off, ok := starts[k]; ok {
				return off
			}
		}
		return int64(b.Len())
	}
	sum := sha256.Sum256(b.Bytes())
	var tr [trailerSize]byte
	binary.LittleEndian.PutUint64(tr[0:], uint64(section(frameDecision, frameLeaves, frameManifest)))
	binary.LittleEndian.PutUint64(tr[8:], uint64(section(frameLeaves, frameManifest)))
	binary.LittleEndian.PutUint64(tr[16:], uint64(section(frameManifest)))
	copy(tr[24:], sum[:])
	copy(tr[24+sha256.Size:], trailerMagic)
	b.Write(tr[:])
	path := filepath.Join(t.TempDir(), "forged.rla")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, at
}

// leafAt returns the frame index and byte index in its payload of leaf
// seq of an archive's leaf index.
func leafAt(t *testing.T, frames []rawFrame, seq uint64) (int, int) {
	t.Helper()
	for i, f := range frames {
		if f.kind != frameLeaves {
			continue
		}
		first, n := binary.Uvarint(f.payload)
		count := uint64(len(f.payload)-n) / sha256.Size
		if seq >= first && seq < first+count {
			return i, n + int(seq-first)*sha256.Size
		}
	}
	t.Fatalf("no leaf %d in the archive", seq)
	return 0, 0
}

// An archive whose leaf index was altered, with every checksum recomputed,
// opens (the file is consistent) but does not verify: every leaf of the
// index is compared with the leaf of the fact at its position, whether or
// not a head covers it, and whether or not the run has any head at all.
func TestVerifyFindsAnAlteredLeafIndex(t *testing.T) {
	src := planSource(t, tinyRun, "leaf-index")
	good, err := os.ReadFile(export(t, src).Path())
	if err != nil {
		t.Fatal(err)
	}
	frames := readFrames(t, good)
	a, err := OpenArchive(func() string { p, _ := writeFrames(t, frames); return p }())
	if err != nil {
		t.Fatalf("the rewritten archive does not open: %v", err)
	}
	if rep := verify(t, a); !rep.OK() || rep.HeadsChecked < 2 {
		t.Fatalf("the untouched archive: OK %v with %d heads checked, want OK with at least 2: %v", rep.OK(), rep.HeadsChecked, rep.History)
	}
	heads := a.Manifest().Heads
	firstHead, lastHead := heads[0].Size, heads[len(heads)-1].Size
	facts := uint64(len(src.facts))
	if lastHead >= facts {
		t.Fatalf("the run's last head covers all %d facts; the test needs facts after it", facts)
	}
	noDecisions := func(fs []rawFrame) []rawFrame {
		var out []rawFrame
		for _, f := range fs {
			if f.kind != frameDecision {
				out = append(out, f)
			}
		}
		// The manifest still counts the decisions: recount.
		var m ArchiveManifest
		last := &out[len(out)-1]
		if err := json.Unmarshal(last.payload, &m); err != nil {
			t.Fatal(err)
		}
		m.Decisions, m.DecisionsByKind, m.Heads, m.RuleVersion = 0, nil, nil, 0
		last.payload, _ = json.Marshal(m)
		return out
	}
	for _, tc := range []struct {
		name  string
		edit  func([]rawFrame) []rawFrame
		seq   uint64 // the first leaf named
		what  string
		heads bool // the recorded decisions, and their heads, are kept
	}{
		{"a leaf under the first head changed", func(fs []rawFrame) []rawFrame {
			i, j := leafAt(t, fs, firstHead/2)
			fs[i].payload[j] ^= 1
			return fs
		}, firstHead / 2, HistoryIndex, true},
		{"the last leaf a head covers changed", func(fs []rawFrame) []rawFrame {
			i, j := leafAt(t, fs, lastHead)
			fs[i].payload[j+31] ^= 0x80
			return fs
		}, lastHead, HistoryIndex, true},
		{"two leaves swapped", func(fs []rawFrame) []rawFrame {
			i, j := leafAt(t, fs, 5)
			k, l := leafAt(t, fs, 6)
			a, b := bytes.Clone(fs[i].payload[j:j+32]), bytes.Clone(fs[k].payload[l:l+32])
			copy(fs[i].payload[j:], b)
			copy(fs[k].payload[l:], a)
			return fs
		}, 5, HistoryIndex, true},
		{"a leaf after the last head changed", func(fs []rawFrame) []rawFrame {
			i, j := leafAt(t, fs, facts)
			fs[i].payload[j] ^= 1
			return fs
		}, facts, HistoryChanged, true},
		{"a leaf changed in a run with no heads", func(fs []rawFrame) []rawFrame {
			fs = noDecisions(fs)
			i, j := leafAt(t, fs, 7)
			fs[i].payload[j] ^= 1
			return fs
		}, 7, HistoryIndex, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := readFrames(t, good)
			path, _ := writeFrames(t, tc.edit(fs))
			a, err := OpenArchive(path)
			if err != nil {
				t.Fatalf("the forged archive does not open: %v", err)
			}
			rep := verify(t, a)
			if rep.OK() || rep.History == nil {
				t.Fatalf("verified OK (history %v, first divergence %v), want the altered index found", rep.History, rep.First)
			}
			if h := rep.History; h.What != tc.what || h.Seq != tc.seq {
				t.Errorf("got %s at %d (%s), want %s at leaf %d", h.What, h.Seq, h.Detail, tc.what, tc.seq)
			}
			if tc.heads && rep.First != nil {
				t.Errorf("a decision diverges (%v): the facts and decisions are untouched", rep.First)
			}
			if tc.heads && rep.HeadsChecked < 2 {
				t.Errorf("%d heads checked, want every recorded head", rep.HeadsChecked)
			}
			t.Log(rep.History.Detail)
		})
	}
}

// A manifest that lists heads its recorded decisions do not carry is
// found by verify.
func TestVerifyComparesTheManifestsHeads(t *testing.T) {
	src := planSource(t, tinyRun, "manifest-heads")
	good, err := os.ReadFile(export(t, src).Path())
	if err != nil {
		t.Fatal(err)
	}
	fs := readFrames(t, good)
	last := &fs[len(fs)-1]
	var m ArchiveManifest
	if err := json.Unmarshal(last.payload, &m); err != nil || len(m.Heads) == 0 {
		t.Fatalf("manifest: %v, %d heads", err, len(m.Heads))
	}
	m.Heads[0].Root = strings.Repeat("0", 64)
	last.payload, _ = json.Marshal(m)
	path, _ := writeFrames(t, fs)
	a, err := OpenArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	rep := verify(t, a)
	if rep.OK() || rep.History == nil || rep.History.What != HistoryManifest {
		t.Fatalf("got OK %v, history %v; want the manifest's head named", rep.OK(), rep.History)
	}
	t.Log(rep.History.Detail)
}

// Positions outside Kafka's ranges are refused on open, naming the byte
// of the frame, instead of a partition above 2^31-1 truncated into
// another one or a negative offset taken as given.
func TestOpenArchiveRefusesImpossiblePositions(t *testing.T) {
	src := planSource(t, tinyRun, "positions")
	good, err := os.ReadFile(export(t, src).Path())
	if err != nil {
		t.Fatal(err)
	}
	// setPosition rewrites the partition and offset of a fact (after its
	// number) or a decision frame.
	setPosition := func(f *rawFrame, part, off int64) {
		var seq []byte
		p := f.payload
		if f.kind == frameFact {
			_, n := binary.Uvarint(p)
			seq, p = p[:n], p[n:]
		}
		_, n := binary.Varint(p)
		_, m := binary.Varint(p[n:])
		out := append(bytes.Clone(seq), binary.AppendVarint(binary.AppendVarint(nil, part), off)...)
		f.payload = append(out, p[n+m:]...)
	}
	nth := func(fs []rawFrame, kind byte, n int) int {
		for i, f := range fs {
			if f.kind == kind {
				if n--; n == 0 {
					return i
				}
			}
		}
		t.Fatalf("no frame %q number %d", kind, n)
		return 0
	}
	for _, tc := range []struct {
		name      string
		kind      byte
		n         int
		part, off int64
		want      string
	}{
		{"fact partition above int32", frameFact, 42, math.MaxInt32 + 6, 100, "partition 2147483653"},
		{"fact partition 2^32+5, which truncates to 5", frameFact, 42, 1<<32 + 5, 100, "partition 4294967301"},
		{"negative fact partition", frameFact, 42, -1, 100, "partition -1"},
		{"negative fact offset", frameFact, 42, 5, -7, "offset -7"},
		{"negative decision offset", frameDecision, 2, 5, -1, "offset -1"},
		{"decision partition above int32", frameDecision, 2, math.MaxInt64, 0, "partition 9223372036854775807"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := readFrames(t, good)
			i := nth(fs, tc.kind, tc.n)
			setPosition(&fs[i], tc.part, tc.off)
			path, at := writeFrames(t, fs)
			_, err := OpenArchive(path)
			var ae *ArchiveError
			if !errors.As(err, &ae) || !errors.Is(err, ErrCorruptArchive) {
				t.Fatalf("got %v, want an ArchiveError", err)
			}
			if ae.Offset != at[i] || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q at byte %d, want the frame at byte %d named, with %q", err, ae.Offset, at[i], tc.want)
			}
			if tc.kind == frameFact && ae.Seq != uint64(tc.n) {
				t.Errorf("got fact %d, want fact %d", ae.Seq, tc.n)
			}
		})
	}
	// The writer refuses such positions in the first place.
	w, err := CreateArchive(filepath.Join(t.TempDir(), "w.rla"), src.run, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	f := src.facts[0]
	f.Offset = -1
	if err := w.AddFact(f); err == nil {
		t.Error("the writer took a fact at offset -1")
	}
}
