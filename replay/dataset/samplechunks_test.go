package dataset

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rolloutledger/rolloutledger/projections"
)

// A batch's samples are cut into chunks of whole samples, none past the
// bound but one sample larger than it, and read in order they give back
// every sample; samples that do not read stay one chunk, for the reader
// to say why.
func TestChunkSamples(t *testing.T) {
	var all []byte
	var want []int
	for i, n := range []int{10, 300, 5, 5, 900, 40, 40, 40, 2, 700} {
		s := projections.Sample{Group: fmt.Sprint("g", i), Attempt: fmt.Sprint("a", i), Segment: int64(i), Advantage: 0.5}
		for j := range n {
			s.TokenIDs = append(s.TokenIDs, int32(j))
			s.LossMask = append(s.LossMask, 1)
			s.RolloutLogprobs = append(s.RolloutLogprobs, -0.25)
			s.PolicyVersions = append(s.PolicyVersions, 3)
			s.Temperatures = append(s.Temperatures, 1)
		}
		var err error
		if all, err = projections.AppendSample(all, &s); err != nil {
			t.Fatal(err)
		}
		want = append(want, n)
	}
	defer func(n int) { sampleChunkBytes = n }(sampleChunkBytes)
	sampleChunkBytes = 10_000 // about 400 tokens
	chunks := chunkSamples(all)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks of %d bytes, want several of at most %d", len(chunks), len(all), sampleChunkBytes)
	}
	var got []int
	off := 0
	for i, n := range chunks {
		sr := projections.NewSampleReader(all[off : off+n])
		samples := 0
		for sr.Next() {
			got = append(got, sr.Sample().Len)
			samples++
		}
		if err := sr.Err(); err != nil {
			t.Fatalf("chunk %d (%d bytes) does not end on a sample: %v", i, n, err)
		}
		if n > sampleChunkBytes && samples > 1 {
			t.Errorf("chunk %d holds %d samples in %d bytes, past the bound of %d", i, samples, n, sampleChunkBytes)
		}
		off += n
	}
	if off != len(all) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("chunks read back %d bytes, samples of %v tokens; want %d, %v", off, got, len(all), want)
	}
	bad := append(bytes.Clone(all), 0xff)
	if c := chunkSamples(bad); len(c) != 1 || c[0] != len(bad) {
		t.Errorf("malformed samples cut into %v, want one chunk of %d bytes", c, len(bad))
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
