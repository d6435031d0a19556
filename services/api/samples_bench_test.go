package api

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// BenchmarkArrowSamples measures the server's side of a trainer's fetch
// of a batch without a stored body, without the store (and what the
// projector does to store each body at seal): canonical chunks of about 1
// MiB (as the projector stores them) planned and rendered column after
// column into the Arrow IPC body, to io.Discard, uncompressed and with
// LZ4. The samples are shaped as a run's: random token ids and log-probs,
// 2,000-token turns of 500 observation tokens then completion tokens, a
// policy version per sample and a temperature per turn.
//
//	go test ./services/api -run '^$' -bench ArrowSamples -benchmem
func BenchmarkArrowSamples(b *testing.B) {
	const samples, tokens, turn = 128, 50_000, 2_000 // one attempt per sample: 6.4 M tokens
	rng := rand.New(rand.NewPCG(1, 1))
	var chunks [][]byte
	var chunk []byte
	for i := range samples {
		s := projections.Sample{Group: fmt.Sprintf("g%03d", i/8), Attempt: fmt.Sprintf("g%03d/a%d", i/8, i%8), Advantage: 0.5,
			TokenIDs: make([]int32, tokens), LossMask: make([]uint8, tokens), RolloutLogprobs: make([]float32, tokens),
			PolicyVersions: make([]int64, tokens), Temperatures: make([]float32, tokens)}
		for k := range tokens {
			s.TokenIDs[k] = rng.Int32N(151_936)
			s.RolloutLogprobs[k] = -rng.Float32() * 3
			s.LossMask[k] = uint8(min(1, k%turn/500))
			s.PolicyVersions[k] = int64(i / 16)
			s.Temperatures[k] = 0.6 + float32(k/turn%3)/10
		}
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
	meta := arrow.NewMetadata([]string{"run", "rule_version"}, []string{"bench", "4"})
	for _, c := range []projector.Compression{projector.Uncompressed, projector.LZ4} {
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(samples * tokens * 21)
			var size int64
			for b.Loop() {
				body, err := projector.PlanCompressedArrowBody(meta, src, c)
				if err != nil {
					b.Fatal(err)
				}
				bw := bufio.NewWriterSize(io.Discard, samplesWriteBuffer)
				if err := body.Render(bw, src); err != nil {
					b.Fatal(err)
				}
				size = body.Size()
			}
			b.ReportMetric(float64(size)/(samples*tokens), "body-B/token")
		})
	}
}
