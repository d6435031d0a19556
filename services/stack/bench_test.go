package stack_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// BenchmarkSealLatency measures, under a simulated run pushed at a steady
// rate (5,000 and 10,000 facts/s), the time from Kafka's acknowledgment of the fact that
// completes a batch (its watermark) to the trainer holding that batch's
// manifest from GET .../batches/next. The trainer long-polls, so the figure
// includes one HTTP round trip and, when the trainer was still busy with the
// previous batch, that wait too: it is an upper bound on the seal latency.
//
//	go test -run='^$' -bench=SealLatency -benchtime=1x ./services/stack/
func BenchmarkSealLatency(b *testing.B) {
	for _, be := range testenv.KafkaBackends() {
		for _, rate := range []float64{5000, 10000} {
			b.Run(fmt.Sprintf("%s/%.0f-facts-per-s", be.Name, rate), func(b *testing.B) { sealLatency(b, be, rate) })
		}
	}
}

func sealLatency(b *testing.B, be testenv.Backend, rate float64) {
	{
		{
			kc := be.Kafka(b)
			s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			var mu sync.Mutex
			acked := map[projections.LogPosition]time.Time{}
			var lat []float64
			var facts int
			var elapsed time.Duration
			for i := 0; b.Loop(); i++ {
				res, err := simulate.Run(context.Background(), simulate.Options{
					URL: s.URL(), Seed: uint64(100 + i), Tasks: 96, Steps: 40, BatchGroups: 4, Trainer: true, Rate: rate,
					OnAck: func(acks []simulate.Ack) {
						mu.Lock()
						defer mu.Unlock()
						for _, a := range acks {
							acked[projections.LogPosition{Partition: a.Partition, Offset: a.Offset}] = a.At
						}
					},
				})
				if err != nil {
					b.Fatal(err)
				}
				facts += res.Events
				elapsed += res.Duration
				mu.Lock()
				for _, st := range res.Steps {
					if at, ok := acked[st.Watermark]; ok {
						lat = append(lat, float64(st.Received.Sub(at).Microseconds())/1000)
					}
				}
				mu.Unlock()
			}
			if len(lat) == 0 {
				b.Fatal("no batch latency measured")
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
			b.ReportMetric(float64(len(lat)), "batches")
			b.ReportMetric(float64(facts)/elapsed.Seconds(), "facts/s")
		}
	}
}
