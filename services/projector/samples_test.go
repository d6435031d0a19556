package projector

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/rolloutledger/rolloutledger/projections"
)

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
			b := db.NewBatch()
			seq := uint64(10 + i)
			if err := storeSamples(b, "r", seq, canonical); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(pebble.Sync); err != nil {
				t.Fatal(err)
			}
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
