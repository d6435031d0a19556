package replay

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
)

// tinyArchiveBytes is a valid archive small enough to damage at every
// position: the first facts and decisions of a simulated run.
func tinyArchiveBytes(t testing.TB) []byte {
	t.Helper()
	src := planSource(t, simulate.Options{Seed: 3, Tasks: 2, Steps: 1, BatchGroups: 1, MaxTurns: 8}, "archive-fuzz")
	src.facts = src.facts[:12]
	src.decisions = src.decisions[:2]
	b, err := os.ReadFile(export(t, src).Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openBytes writes b to a file and opens it as an archive; when it opens,
// every section is read through.
func openBytes(t *testing.T, path string, b []byte) error {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := OpenArchive(path)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := a.Facts(ctx, func(Fact) error { return nil }); err != nil {
		t.Fatalf("an archive that opened fails to read its facts: %v", err)
	}
	if err := a.Decisions(ctx, func(Recorded) error { return nil }); err != nil {
		t.Fatalf("an archive that opened fails to read its decisions: %v", err)
	}
	if err := a.Leaves(ctx, func(uint64, []byte) error { return nil }); err != nil {
		t.Fatalf("an archive that opened fails to read its leaves: %v", err)
	}
	return nil
}

func checkArchiveRefusal(t *testing.T, err error) {
	t.Helper()
	var ae *ArchiveError
	if !errors.As(err, &ae) || !errors.Is(err, ErrCorruptArchive) {
		t.Fatalf("got %T %v, want an *ArchiveError", err, err)
	}
	if ae.Detail == "" || ae.Offset < 0 {
		t.Fatalf("refusal without a place or a reason: %+v", ae)
	}
}

// Single-bit flips and truncations of an archive are found on open: nothing in the file is outside the trailer's SHA-256 or checked
// against it.
func TestArchiveRefusesFlipsAndTruncations(t *testing.T) {
	good := tinyArchiveBytes(t)
	path := filepath.Join(t.TempDir(), "a.rla")
	t.Logf("archive of %d bytes", len(good))
	if err := openBytes(t, path, good); err != nil {
		t.Fatalf("the undamaged archive: %v", err)
	}
	// Every byte of the magic, the header and the trailer, and a spread of
	// the rest (FuzzOpenArchive goes further).
	for i := 0; i < len(good); i++ {
		if i >= 100 && i < len(good)-2*trailerSize && i%37 != 0 {
			continue
		}
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(good)
			b[i] ^= bit
			err := openBytes(t, path, b)
			if err == nil {
				t.Fatalf("flipping bit %#x of byte %d went unnoticed", bit, i)
			}
			checkArchiveRefusal(t, err)
		}
		checkArchiveRefusal(t, openBytes(t, path, good[:i]))
	}
	// Bytes added at the end move the trailer.
	checkArchiveRefusal(t, openBytes(t, path, append(bytes.Clone(good), 0)))
}

// FuzzOpenArchive damages a valid archive at will: opening it either
// refuses with an *ArchiveError, or succeeds and every section reads
// through; it never panics, and never allocates what the file cannot hold.
func FuzzOpenArchive(f *testing.F) {
	good := tinyArchiveBytes(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(bytes.Clone(good[:len(good)-trailerSize-1]), good[len(good)-trailerSize:]...))
	// One file per fuzz process, rewritten by each input.
	path := filepath.Join(f.TempDir(), "a.rla")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := openBytes(t, path, b); err != nil {
			checkArchiveRefusal(t, err)
		}
	})
}
