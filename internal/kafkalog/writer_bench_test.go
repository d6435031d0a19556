package kafkalog_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// BenchmarkAppend appends records of 1 KiB and of 16 KiB (a turn with its
// tokens) over 24 keys to 12 partitions from 8 goroutines in 64-record
// appends, as the ingest's HTTP workers do, through the ledger's Writer
// and through kafka-go's own Writer with the same settings (acks=all,
// lz4): the ratio of the two is what the ledger's use of its client adds
// or saves.
//
//	go test -run='^$' -bench=Append -benchtime=100000x ./internal/kafkalog/
func BenchmarkAppend(b *testing.B) {
	kc := testenv.RealKafka(b)
	kc.Partitions = 12
	ctx := context.Background()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		b.Fatal(err)
	}
	defer kafkalog.DeleteTopics(context.Background(), kc, kc.FactsTopic(), kc.DecisionsTopic())
	keys := make([][]byte, 24)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench-run-%02d", i)
	}
	for _, size := range []int{1 << 10, 16 << 10} {
		var values [][]byte
		if size <= 1<<10 {
			value := make([]byte, size)
			for i := range value {
				value[i] = 'a' + byte(i*7919%26)
			}
			values = [][]byte{value}
		} else {
			// A turn's bytes are mostly the base64 of its token ids and
			// log-probs, which compress about as little as these, and no
			// two turns are alike.
			r := rand.New(rand.NewPCG(uint64(size), 7))
			values = make([][]byte, 256)
			for v := range values {
				raw := make([]byte, size*3/4)
				for i := range raw {
					raw[i] = byte(r.Uint32N(256))
				}
				values[v] = []byte(base64.StdEncoding.EncodeToString(raw))
			}
		}
		chunk := func(i int) []kafkalog.Record {
			recs := make([]kafkalog.Record, 64)
			for j := range recs {
				recs[j] = kafkalog.Record{Key: keys[(i*64+j)%len(keys)], Value: values[(i*64+j)%len(values)], Headers: kafkalog.TypeHeaders("turn.generated", 2)}
			}
			return recs
		}
		run := func(b *testing.B, appendChunk func(i int) error) {
			if err := appendChunk(0); err != nil {
				b.Fatal(err)
			}
			chunks := max(1, b.N/64)
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for range 8 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(chunks) {
							return
						}
						if err := appendChunk(int(i)); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(chunks*64)/time.Since(start).Seconds(), "records/s")
		}
		b.Run(fmt.Sprintf("%dKiB/kafkalog", size>>10), func(b *testing.B) {
			w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
			defer w.Close()
			run(b, func(i int) error {
				_, err := w.Append(ctx, chunk(i))
				return err
			})
		})
		b.Run(fmt.Sprintf("%dKiB/kafka-go", size>>10), func(b *testing.B) {
			w := KafkaGoWriter(kc, kc.FactsTopic())
			defer w.Close()
			run(b, func(i int) error {
				recs := chunk(i)
				msgs := make([]kafka.Message, len(recs))
				for j, r := range recs {
					msgs[j] = kafka.Message{Key: r.Key, Value: r.Value, Headers: []kafka.Header{kafka.Header(r.Headers[0]), kafka.Header(r.Headers[1])}}
				}
				return w.WriteMessages(ctx, msgs...)
			})
		})
	}
}

// KafkaGoWriter is kafka-go's own Writer with the settings the ledger's
// Writer had when it was one: acks=all, lz4, batches of up to 4,096
// records closed after 2 ms, records placed by [kafkalog.PartitionOf].
func KafkaGoWriter(c kafkalog.Config, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(c.Brokers...), Topic: topic,
		Balancer: kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
			return partitions[kafkalog.PartitionOf(m.Key, len(partitions))]
		}),
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, BatchSize: 4096, BatchBytes: kafkalog.MaxMessageBytes / 2,
		WriteTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, MaxAttempts: 5, Compression: compress.Lz4,
	}
}
