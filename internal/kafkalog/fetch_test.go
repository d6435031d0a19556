package kafkalog_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// A fetcher returns the records at the offsets asked, in the order asked,
// repeats included, wherever they sit: next to each other (one fetch
// answers them), far apart, after records larger than one fetch's bytes;
// an offset the log does not hold is nil.
func TestFetcherValuesAt(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			kc.Partitions = 2
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			value := func(i int) []byte {
				v := fmt.Appendf(nil, "record %04d;", i)
				if i%25 == 3 {
					// Past a third of a fetch's bytes: a run of these needs
					// several fetches.
					v = append(v, bytes.Repeat([]byte{byte(i)}, 400<<10)...)
				}
				return v
			}
			const n = 300
			w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
			defer w.Close()
			part := -1
			// Seven records an append: a fetch's answer starts at the batch
			// that holds the offset asked, before it.
			for i := 0; i < n; i += 7 {
				var recs []kafkalog.Record
				for j := i; j < min(n, i+7); j++ {
					recs = append(recs, kafkalog.Record{Key: []byte("fetch-run"), Value: value(j), Headers: kafkalog.TypeHeaders("test", 1)})
				}
				pos, err := w.Append(ctx, recs)
				if err != nil {
					t.Fatal(err)
				}
				if pos[0].Offset != int64(i) {
					t.Fatalf("record %d went to offset %d", i, pos[0].Offset)
				}
				part = int(pos[0].Partition)
			}
			f := kafkalog.NewFetcher(kc)
			defer f.Close()
			tp := kafkalog.TopicPartition{Topic: kc.FactsTopic(), Partition: part}
			offsets := []int64{299, 0, 1, 2, 3, 4, 28, 53, 54, 55, 150, 3, 298, n + 5, 78, 103, 128, 129}
			got, err := f.ValuesAt(ctx, tp, offsets)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(offsets) {
				t.Fatalf("%d values for %d offsets", len(got), len(offsets))
			}
			for i, off := range offsets {
				var want []byte
				if off < n {
					want = value(int(off))
				}
				if !bytes.Equal(got[i], want) {
					t.Errorf("offset %d: got %d bytes (%.12q), want %d (%.12q)", off, len(got[i]), got[i], len(want), want)
				}
			}
			none, err := f.ValuesAt(ctx, tp, nil)
			if err != nil || len(none) != 0 {
				t.Errorf("no offsets: %d values, %v", len(none), err)
			}
		})
	}
}
