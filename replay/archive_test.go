package replay

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

func TestArchiveRoundTrip(t *testing.T) {
	src := planSource(t, smallRun, "archive-rt")
	a := export(t, src)
	m := a.Manifest()
	if m.Facts != uint64(len(src.facts)) || m.Decisions != uint64(len(src.decisions)) || m.Leaves != m.Facts {
		t.Fatalf("manifest counts %d facts, %d decisions, %d leaves; want %d, %d, %d", m.Facts, m.Decisions, m.Leaves, len(src.facts), len(src.decisions), len(src.facts))
	}
	if m.RuleVersion != projections.RuleVersion || len(m.Heads) < 5 || m.FinalHead.Size != m.Facts {
		t.Errorf("manifest: rule version %d, %d heads, final head %+v", m.RuleVersion, len(m.Heads), m.FinalHead)
	}
	var got []Fact
	if err := a.Facts(context.Background(), func(f Fact) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(src.facts) {
		t.Fatalf("read %d facts, want %d", len(got), len(src.facts))
	}
	for i, f := range got {
		w := src.facts[i]
		if f.Seq != w.Seq || f.Partition != w.Partition || f.Offset != w.Offset || !bytes.Equal(f.Value, w.Value) {
			t.Fatalf("fact %d: got %d %d/%d, want %d %d/%d (or a different value)", i, f.Seq, f.Partition, f.Offset, w.Seq, w.Partition, w.Offset)
		}
	}
	var decs []Recorded
	if err := a.Decisions(context.Background(), func(r Recorded) error { decs = append(decs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, d := range decs {
		if w := src.decisions[i]; d.Offset != w.Offset || !bytes.Equal(d.Value, w.Value) {
			t.Fatalf("decision %d differs", i)
		}
	}
	// The same history exports to the same bytes.
	b1, _ := os.ReadFile(a.Path())
	b2, _ := os.ReadFile(export(t, src).Path())
	if !bytes.Equal(b1, b2) {
		t.Error("two exports of one history differ")
	}
}

// Damage to the file itself is found on open, and named.
func TestArchiveOpenFindsDamage(t *testing.T) {
	src := planSource(t, smallRun, "archive-damage")
	good, err := os.ReadFile(export(t, src).Path())
	if err != nil {
		t.Fatal(err)
	}
	// The 100th fact's value: find its bytes in the file.
	at := bytes.Index(good, src.facts[99].Value)
	if at < 0 {
		t.Fatal("fact 100 not found in the archive")
	}
	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		wantSeq uint64
	}{
		{"a byte of fact 100", func(b []byte) []byte { b[at+40] ^= 1; return b }, 0},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, 0},
		{"trailer digest", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }, 0},
		{"empty", func(b []byte) []byte { return nil }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.rla")
			if err := os.WriteFile(path, tc.damage(bytes.Clone(good)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := OpenArchive(path)
			var ae *ArchiveError
			if !errors.As(err, &ae) || !errors.Is(err, ErrCorruptArchive) {
				t.Fatalf("got %v, want an ArchiveError", err)
			}
			if ae.Offset < 0 || ae.Offset > int64(len(good)) {
				t.Errorf("error names byte %d", ae.Offset)
			}
			t.Log(err)
		})
	}
	// A flipped byte in a fact names the frame that holds it.
	path := filepath.Join(t.TempDir(), "flip.rla")
	b := bytes.Clone(good)
	b[at+40] ^= 1
	os.WriteFile(path, b, 0o644)
	_, err = OpenArchive(path)
	var ae *ArchiveError
	if errors.As(err, &ae); ae == nil || ae.Seq != 100 || ae.Offset > int64(at) || int64(at)-ae.Offset > 64 {
		t.Errorf("got %v, want the frame of fact 100 (value at byte %d) named", err, at)
	}
}
