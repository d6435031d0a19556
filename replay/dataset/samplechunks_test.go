package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A batch's samples are read back in chunks of whole samples, none past
// the window or twice the largest sample, and in order they give back
// every sample, whatever their sizes and wherever the batch sits in the
// file; samples that do not read are the reader's error, after the whole
// samples before them.
func TestEachSampleChunk(t *testing.T) {
	var all []byte
	var want []int
	largest := 0
	for i, n := range []int{10, 300, 5, 5, 900, 40, 40, 40, 2, 700} {
		s := projections.Sample{Group: fmt.Sprint("g", i), Attempt: fmt.Sprint("a", i), Segment: int64(i), Advantage: 0.5}
		for j := range n {
			s.TokenIDs = append(s.TokenIDs, int32(j))
			s.LossMask = append(s.LossMask, 1)
			s.RolloutLogprobs = append(s.RolloutLogprobs, -0.25)
			s.PolicyVersions = append(s.PolicyVersions, 3)
			s.Temperatures = append(s.Temperatures, 1)
		}
		before := len(all)
		var err error
		if all, err = projections.AppendSample(all, &s); err != nil {
			t.Fatal(err)
		}
		want, largest = append(want, n), max(largest, len(all)-before)
	}
	f, err := os.CreateTemp(t.TempDir(), "samples")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bad := append(bytes.Clone(all), 0xff)
	// Another batch before it, and the malformed copy after.
	if _, err := f.Write(append(append(bytes.Repeat([]byte{7}, 33), all...), bad...)); err != nil {
		t.Fatal(err)
	}
	r := &Run{Run: "r", samples: f}
	defer func(n int) { sampleChunkBytes = n }(sampleChunkBytes)
	sampleChunkBytes = 10_000 // about 400 tokens
	var got []int
	chunks := 0
	_, err = r.EachSampleChunk(&Batch{samplesAt: 33, samplesLen: len(all)}, nil, func(data []byte) error {
		chunks++
		sr := projections.NewSampleReader(data)
		samples := 0
		for sr.Next() {
			got = append(got, sr.Sample().Len)
			samples++
		}
		if err := sr.Err(); err != nil {
			t.Fatalf("chunk %d (%d bytes) does not end on a sample: %v", chunks, len(data), err)
		}
		if len(data) > max(sampleChunkBytes, 2*largest) {
			t.Errorf("chunk %d holds %d samples in %d bytes, past the window of %d and twice the largest sample (%d bytes)", chunks, samples, len(data), sampleChunkBytes, largest)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if chunks < 4 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%d chunks gave samples of %v tokens; want several, giving %v", chunks, got, want)
	}
	got = nil
	_, err = r.EachSampleChunk(&Batch{samplesAt: 33 + int64(len(all)), samplesLen: len(bad)}, nil, func(data []byte) error {
		for sr := projections.NewSampleReader(data); sr.Next(); {
			got = append(got, sr.Sample().Len)
		}
		return nil
	})
	if !errors.Is(err, projections.ErrMalformedSamples) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a malformed byte after the samples: error %v after samples of %v tokens; want ErrMalformedSamples after %v", err, got, want)
	}
}

// A Parquet export writes the same bytes whether a batch's samples are
// read back whole or a few at a time.
func TestSamplesTableByChunks(t *testing.T) {
	src := planSource(t, textRun, "chunks", false)
	whole := readAll(t, exportTo(t, src, FormatParquet, outPath(t.TempDir(), FormatParquet)).Out)
	defer func(n int) { sampleChunkBytes = n }(sampleChunkBytes)
	sampleChunkBytes = 1
	chunked := readAll(t, exportTo(t, src, FormatParquet, outPath(t.TempDir(), FormatParquet)).Out)
	if !bytes.Equal(whole["samples.parquet"], chunked["samples.parquet"]) || len(whole["samples.parquet"]) < 1000 {
		t.Errorf("samples.parquet differs when read a sample at a time (%d bytes against %d)", len(chunked["samples.parquet"]), len(whole["samples.parquet"]))
	}
}
