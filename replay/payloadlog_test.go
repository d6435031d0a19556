package replay

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/projections"
)

// The log gives back what it was given, whether still in its buffer or
// in a file, and removes a segment once its last value is deleted: what a
// replay with tokens relies on to read a batch's turns at its seal and to
// keep its disk to the tokens in flight.
func TestPayloadLog(t *testing.T) {
	defer func(n int64) { payloadSegment = n }(payloadSegment)
	payloadSegment = 10_000
	dir := t.TempDir()
	l := newPayloadLog(dir)
	defer l.close()
	value := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 1000+i) }
	var refs []payloadRef
	for i := range 40 {
		ref, err := l.append(value(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
		// The value just written is still in the writer's buffer.
		got, err := l.read(ref[:])
		if err != nil || !bytes.Equal(got, value(i)) {
			t.Fatalf("value %d read back at once: %d bytes, %v", i, len(got), err)
		}
	}
	if n := l.segments(); n < 4 {
		t.Fatalf("%d segments for 40 KB in segments of 10 KB", n)
	}
	for i, ref := range refs {
		got, err := l.read(ref[:])
		if err != nil || !bytes.Equal(got, value(i)) {
			t.Fatalf("value %d read back: %d bytes, %v", i, len(got), err)
		}
	}
	// Deleting every value but the last segment's leaves that segment only.
	for _, ref := range refs[:30] {
		if err := l.release(ref[:]); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.segments(); n > 2 {
		t.Errorf("%d segments open with the values of the first 30 deleted; want the last one or two", n)
	}
	for i, ref := range refs[30:] {
		got, err := l.read(ref[:])
		if err != nil || !bytes.Equal(got, value(30+i)) {
			t.Fatalf("value %d read back after others were deleted: %d bytes, %v", 30+i, len(got), err)
		}
	}
	// A value of a removed segment, or a reference that is not one, is an
	// error, not another value.
	if _, err := l.read(refs[0][:]); err == nil {
		t.Error("read a value of a removed segment")
	}
	if err := l.release(refs[0][:]); err == nil {
		t.Error("released a value of a removed segment twice")
	}
	if _, err := l.read([]byte("short")); err == nil || !strings.Contains(err.Error(), "reference") {
		t.Errorf("a 5-byte reference: %v", err)
	}
	// The segments are unlinked as they are made: nothing is left in the
	// directory, even before close.
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Errorf("directory holds %d entries (%v)", len(es), err)
	}
}

// The scratch store keeps a turn's tokens in the log and a reference in
// the spill: a Get gives the tokens back, a second Set replaces them, and
// a Delete frees their place, so the log's last segment goes with it.
func TestScratchKeepsPayloadsInTheLog(t *testing.T) {
	s, err := openScratch(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := []byte("turn\x00a1\x003")
	if !projections.IsPayloadKey(k) {
		t.Fatalf("%q is not a turn's key", k)
	}
	tokens := bytes.Repeat([]byte("tok"), 5000)
	if err := s.Set(k, tokens); err != nil {
		t.Fatal(err)
	}
	if ref, ok, err := s.Spill.Get(k); err != nil || !ok || len(ref) != payloadRefLen {
		t.Fatalf("the spill holds %d bytes for the turn (%v %v), want a %d-byte reference", len(ref), ok, err, payloadRefLen)
	}
	if got, ok, err := s.Get(k); err != nil || !ok || !bytes.Equal(got, tokens) {
		t.Fatalf("turn read back: %d bytes, %v %v", len(got), ok, err)
	}
	again := []byte("replaced")
	if err := s.Set(k, again); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Get(k); err != nil || !bytes.Equal(got, again) {
		t.Fatalf("turn read back after a second Set: %q %v", got, err)
	}
	if live := s.payloads.segs[s.payloads.cur].live; live != int64(len(again)) {
		t.Errorf("the log counts %d bytes live, want %d: the replaced value was not released", live, len(again))
	}
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(k); err != nil || ok {
		t.Fatalf("deleted turn: %v %v", ok, err)
	}
	if live := s.payloads.segs[s.payloads.cur].live; live != 0 {
		t.Errorf("the log counts %d bytes live after the delete", live)
	}
	// Deleting a turn that holds no tokens is no error.
	if err := s.Delete([]byte("turn\x00a1\x004")); err != nil {
		t.Fatal(err)
	}
}

// A run with inline tokens verifies against decisions folded in memory,
// its turns' tokens read back from the log at each seal, across segments
// made and removed as the run goes.
func TestVerifyReadsTokensFromTheLog(t *testing.T) {
	defer func(n int64) { payloadSegment = n }(payloadSegment)
	payloadSegment = 64 << 10
	src := planSource(t, simulate.Options{Seed: 19, Tasks: 6, Steps: 3, BatchGroups: 2, MaxTurns: 10, Tokens: true}, "log-run")
	rep, err := Verify(context.Background(), src, VerifyOptions{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	seals := 0
	for _, d := range src.decisions {
		if bytes.Contains(d.Value, []byte(`"type":"batch.sealed"`)) {
			seals++
		}
	}
	if !rep.OK() || seals < 3 || rep.Matched != len(src.decisions) {
		t.Fatalf("verify of a run with tokens: ok %v, %d of %d decisions matched (%d seals), first problem %v", rep.OK(), rep.Matched, len(src.decisions), seals, rep.First)
	}
}
