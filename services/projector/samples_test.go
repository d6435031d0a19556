package projector

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

// storeSamples writes canonical samples as the fold does, through a
// chunkWriter, in writes that cut samples anywhere (the fold writes a
// sample's header and columns apart), and returns the chunks stored.
func storeSamples(tb testing.TB, p *Projector, run string, seq uint64, canonical []byte) uint32 {
	tb.Helper()
	w := newChunkWriter(p.db, run, seq, nil)
	sizes := []int{1, 7, 4096, 3, 1 << 16, 250_000}
	for i := 0; len(canonical) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(canonical))
		if _, err := w.Write(canonical[:n]); err != nil {
			tb.Fatal(err)
		}
		canonical = canonical[n:]
	}
	chunks, err := w.finish()
	if err != nil {
		tb.Fatal(err)
	}
	return chunks
}

// A batch's samples are stored in chunks of whole samples, about
// SampleChunkBytes each, whose concatenation is the canonical form.
func TestSampleChunks(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := &Projector{db: db}
	sample := func(n int) []byte {
		s := projections.Sample{Group: "g", Attempt: "a", TokenIDs: make([]int32, n), LossMask: make([]uint8, n),
			RolloutLogprobs: make([]float32, n), PolicyVersions: make([]int64, n)}
		for i := range n {
			s.TokenIDs[i] = int32(i)
		}
		b, err := projections.AppendSample(nil, &s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := SampleChunkBytes/17 + 10 // one sample over a chunk
	for i, tc := range []struct {
		name    string
		samples []int // tokens of each sample
		chunks  int
	}{
		{"empty", nil, 1},
		{"one small", []int{3}, 1},
		// 680 KB each: a chunk closes once it holds 1 MiB or more.
		{"many small", []int{40000, 40000, 40000, 40000, 40000, 40000, 40000}, 4},
		{"one over a chunk", []int{big}, 1},
		{"small, big, small", []int{10, big, 10}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var canonical []byte
			for _, n := range tc.samples {
				canonical = append(canonical, sample(n)...)
			}
			seq := uint64(10 + i)
			if n := storeSamples(t, p, "r", seq, canonical); n != uint32(tc.chunks) {
				t.Errorf("the writer says %d chunks; want %d", n, tc.chunks)
			}
			// Stored ahead of the part that seals the batch, the chunks
			// are not the batch's samples until its decision is committed.
			if found, err := p.SampleChunks("r", seq, func([]byte) error { return nil }); found || err != nil {
				t.Fatalf("chunks of a batch whose seal is not committed: found %v, %v; want not found", found, err)
			}
			sealDecision(t, p, "r", seq)
			var got []byte
			chunks := 0
			found, err := p.SampleChunks("r", seq, func(c []byte) error {
				if _, _, err := projections.CountSamples(c); err != nil {
					t.Errorf("chunk %d is not whole samples: %v", chunks, err)
				}
				got = append(got, c...)
				chunks++
				return nil
			})
			if err != nil || !found || chunks != tc.chunks || !bytes.Equal(got, canonical) {
				t.Fatalf("found %v, %d chunks (%v), %d bytes; want found, %d chunks, the %d bytes stored",
					found, chunks, err, len(got), tc.chunks, len(canonical))
			}
		})
	}
	if found, err := p.SampleChunks("r", 8, func([]byte) error { return nil }); found || err != nil {
		t.Fatalf("a batch never stored: found %v, %v", found, err)
	}
}

// A part folded again after a failure writes its batch's chunks again; if
// that fold seals the batch with fewer chunks than the first (a projector
// upgraded in between), the part's commit deletes the chunks past them, so
// the batch reads as the samples its decision covers. Other batches'
// chunks stay.
func TestSampleChunksOfAnEarlierFold(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := &Projector{db: db}
	samples := func(n, tokens int) []byte {
		var out []byte
		for i := range n {
			s := projections.Sample{Group: "g", Attempt: fmt.Sprintf("a-%d", i), TokenIDs: make([]int32, tokens), LossMask: make([]uint8, tokens),
				RolloutLogprobs: make([]float32, tokens), PolicyVersions: make([]int64, tokens)}
			var err error
			if out, err = projections.AppendSample(out, &s); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	first, again, next := samples(3, SampleChunkBytes/17+1), samples(2, 10), samples(1, 5)
	if n := storeSamples(t, p, "r", 5, first); n != 3 {
		t.Fatalf("the first fold stored %d chunks; want 3", n)
	}
	storeSamples(t, p, "r", 6, next)
	rf := newRunFolds()
	rf.stored[storedKey{"r", 5}] = storeSamples(t, p, "r", 5, again)
	b := db.NewBatch()
	chunks, err := rf.takeSamples(db, b, "r", 5)
	if err != nil || chunks != 1 {
		t.Fatalf("takeSamples: %d chunks, %v; want 1", chunks, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	sealDecision(t, p, "r", 5)
	sealDecision(t, p, "r", 6)
	read := func(seq uint64) []byte {
		var got []byte
		if _, err := p.SampleChunks("r", seq, func(c []byte) error { got = append(got, c...); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(5); !bytes.Equal(got, again) {
		t.Errorf("batch 5 reads %d bytes; want the %d of the last fold", len(got), len(again))
	}
	if got := read(6); !bytes.Equal(got, next) {
		t.Errorf("batch 6 reads %d bytes; want its %d", len(got), len(next))
	}
	if _, err := rf.takeSamples(db, db.NewBatch(), "r", 5); err == nil {
		t.Error("a seal whose samples were not written (or were taken already) is not an error")
	}
}

// A seal whose samples would leave the state directory's filesystem with
// less than MinFreeBytes free stops the fold with ErrDiskFull before any
// chunk is written, as the part's commit is checked (Pebble aborts the
// process on a write it cannot log); with the check off the same window
// stores them.
func TestSealSamplesOnAFullDisk(t *testing.T) {
	plan, err := simulate.Generate(simulate.Options{Seed: 3, Tasks: 8, Steps: 1, BatchGroups: 2, MaxTurns: 10, Tokens: true}, "full-disk")
	if err != nil {
		t.Fatal(err)
	}
	window := windowOf(t, plan.All())
	for _, full := range []bool{false, true} {
		min := int64(-1)
		if full {
			min = 1 << 62
		}
		p, err := Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: t.TempDir(), MinFreeBytes: min, ArrowBodyBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		b := p.db.NewIndexedBatch()
		ds, _, err := p.foldInto(b, newRunFolds(), window)
		sealed := 0
		for _, d := range ds {
			if d.Kind == projections.KindBatchSealed {
				sealed++
			}
		}
		stored, serr := p.sampleBytes("full-disk", 1)
		if serr != nil {
			t.Fatal(serr)
		}
		switch {
		case full && (!errors.Is(err, ErrDiskFull) || stored != 0):
			t.Errorf("a full disk: %v, %d bytes of samples stored; want ErrDiskFull and none", err, stored)
		case !full && (err != nil || sealed == 0 || stored == 0):
			t.Errorf("with the check off: %v, %d batches sealed, %d bytes of samples; want a batch's samples stored", err, sealed, stored)
		}
		b.Close()
		p.Close()
	}
}

// windowOf is evs encoded as a window of records at offsets from 0.
func windowOf(tb testing.TB, evs []events.Event) []kafkalog.Message {
	tb.Helper()
	window := make([]kafkalog.Message, len(evs))
	for i, ev := range evs {
		v, err := events.Encode(ev)
		if err != nil {
			tb.Fatal(err)
		}
		window[i] = kafkalog.Message{Value: v, Offset: int64(i)}
	}
	return window
}

// sealDecision commits a batch.sealed decision for batch seq of run, as
// the part that seals it does.
func sealDecision(tb testing.TB, p *Projector, run string, seq uint64) {
	tb.Helper()
	if err := p.db.Set(decisionKey(run, projections.KindBatchSealed, seq), []byte("{}"), pebble.Sync); err != nil {
		tb.Fatal(err)
	}
}
