package kafkalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// Appends from many goroutines at once share produce requests; each record
// must still land where its Append reported, on the partition its key maps
// to, with the headers it was given, and the records of one goroutine —
// each Append started after its previous one returned — in the order they
// were appended within every partition. Close sends what is queued and
// then refuses Appends.
func TestConcurrentAppendsLandWhereReported(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
			if err != nil {
				t.Fatal(err)
			}
			w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
			const writers, appends, perAppend = 8, 25, 13
			var mu sync.Mutex
			at := map[kafkalog.Position]written{}
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for g := range writers {
				wg.Go(func() {
					for a := range appends {
						recs := make([]kafkalog.Record, perAppend)
						for i := range recs {
							key := fmt.Sprintf("run-%d", (g*perAppend+i)%17)
							recs[i] = kafkalog.Record{Key: []byte(key), Value: fmt.Appendf(nil, "w%d a%03d r%02d", g, a, i),
								Headers: kafkalog.TypeHeaders("turn.generated", 2)}
						}
						pos, err := w.Append(ctx, recs)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						for i, p := range pos {
							if want := kafkalog.PartitionOf(recs[i].Key, len(ends)); int(p.Partition) != want {
								errs <- fmt.Errorf("%s landed on partition %d, its key maps to %d", recs[i].Value, p.Partition, want)
							}
							if _, dup := at[p]; dup {
								errs <- fmt.Errorf("two records reported at %d/%d", p.Partition, p.Offset)
							}
							at[p] = written{string(recs[i].Key), string(recs[i].Value)}
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if _, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("late"), Value: []byte("late")}}); err == nil {
				t.Error("an Append after Close succeeded")
			}
			if len(at) != writers*appends*perAppend {
				t.Fatalf("%d positions reported, want %d", len(at), writers*appends*perAppend)
			}
			for part := range ends {
				last := map[string]string{} // per goroutine, the last value read
				err := kafkalog.ReadPartition(ctx, kc, kc.FactsTopic(), part, 0, endOf(at, part), func(m kafkalog.Message) error {
					want, ok := at[kafkalog.Position{Partition: int32(part), Offset: m.Offset}]
					if !ok || want.value != string(m.Value) || want.key != string(m.Key) {
						return fmt.Errorf("%d/%d holds %s %q, its Append reported %q %q", part, m.Offset, m.Key, m.Value, want.key, want.value)
					}
					if v, _ := kafkalog.HeaderValue(m.Headers, kafkalog.HeaderType); string(v) != "turn.generated" {
						return fmt.Errorf("%d/%d: type header %q", part, m.Offset, v)
					}
					g := want.value[:2]
					if prev := last[g]; prev >= want.value {
						return fmt.Errorf("partition %d: %q after %q, appended in the other order", part, want.value, prev)
					}
					last[g] = want.value
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// written is what an Append reported writing at a position.
type written struct{ key, value string }

// endOf is the offset past the last position reported on part.
func endOf(at map[kafkalog.Position]written, part int) int64 {
	var end int64
	for p := range at {
		if int(p.Partition) == part {
			end = max(end, p.Offset+1)
		}
	}
	return end
}
