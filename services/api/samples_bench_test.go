package api

import (
	"bufio"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// BenchmarkArrowSamples measures the server's side of a trainer's fetch
// of a batch without a stored body, without the store: canonical chunks of
// about 1 MiB (as the projector stores them) planned and rendered column
// after column into the Arrow IPC body, to io.Discard.
func BenchmarkArrowSamples(b *testing.B) {
	const samples, tokens = 128, 50_000 // one attempt per sample: 6.4 M tokens
	var chunks [][]byte
	var chunk []byte
	for i := range samples {
		s := projections.Sample{Group: fmt.Sprintf("g%03d", i/8), Attempt: fmt.Sprintf("g%03d/a%d", i/8, i%8), Advantage: 0.5,
			TokenIDs: make([]int32, tokens), LossMask: make([]uint8, tokens), RolloutLogprobs: make([]float32, tokens), PolicyVersions: make([]int64, tokens)}
		var err error
		if chunk, err = projections.AppendSample(chunk, &s); err != nil {
			b.Fatal(err)
		}
		if len(chunk) >= 1<<20 {
			chunks, chunk = append(chunks, chunk), nil
		}
	}
	if len(chunk) > 0 {
		chunks = append(chunks, chunk)
	}
	src := func(fn func([]byte) error) error {
		for _, c := range chunks {
			if err := fn(c); err != nil {
				return err
			}
		}
		return nil
	}
	meta := arrow.NewMetadata([]string{"run"}, []string{"bench"})
	b.SetBytes(samples * tokens * 17)
	for b.Loop() {
		body, err := projector.PlanArrowBody(meta, src)
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(io.Discard, samplesWriteBuffer)
		if err := body.Render(bw, src); err != nil {
			b.Fatal(err)
		}
	}
}
