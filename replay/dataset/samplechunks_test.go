package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A batch's samples are read back by windows, none past the window or
// twice the largest sample, and give back every sample in order, whatever
// their sizes and wherever the batch sits in the file, until told to
// stop; samples that do not read are the reader's error, after the whole
// samples before them.
func TestEachSample(t *testing.T) {
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
	buf, err := r.EachSample(&Batch{samplesAt: 33, samplesLen: len(all)}, nil, func(v *projections.SampleView) bool {
		got = append(got, v.Len)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples of %v tokens, want %v", got, want)
	}
	// Windows, not the batch whole: what was read at once is bounded.
	if c := cap(buf); c >= len(all) || c > max(sampleChunkBytes, 2*largest) {
		t.Errorf("a %d-byte buffer read the %d-byte batch, past the window of %d and twice the largest sample (%d bytes)", c, len(all), sampleChunkBytes, largest)
	}
	got = nil
	_, err = r.EachSample(&Batch{samplesAt: 33, samplesLen: len(all)}, nil, func(v *projections.SampleView) bool {
		got = append(got, v.Len)
		return len(got) < 3
	})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want[:3]) {
		t.Errorf("stopped after the third sample: samples of %v tokens, error %v; want %v", got, err, want[:3])
	}
	got = nil
	_, err = r.EachSample(&Batch{samplesAt: 33 + int64(len(all)), samplesLen: len(bad)}, nil, func(v *projections.SampleView) bool {
		got = append(got, v.Len)
		return true
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
