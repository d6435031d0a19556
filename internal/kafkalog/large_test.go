package kafkalog_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// A batch.sealed decision of a large batch carries a manifest of ~17 KB
// per group: 256 groups are ~4.3 MB, over the 1 MiB Kafka allows by
// default and over what the writer used to batch. Such a record must be
// appended and read back whole, on every backend.
func TestLargeRecordRoundTrip(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			w := kafkalog.NewWriter(kc, kc.DecisionsTopic(), kafkalog.WriterOptions{})
			defer w.Close()
			// Manifest-like JSON: repetitive, as real manifests are, but not
			// trivially so, so compression does not make it small.
			var value bytes.Buffer
			for i := 0; value.Len() < 6<<20; i++ {
				value.WriteString(`{"group":"g-`)
				value.WriteString(time.Duration(i * 7919).String())
				value.WriteString(`","turns":[1,2,3],"advantage":-0.125},`)
			}
			pos, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("big-run"), Value: value.Bytes()}})
			if err != nil {
				t.Fatalf("appending a %d-byte record: %v", value.Len(), err)
			}
			var got []byte
			err = kafkalog.ReadPartition(ctx, kc, kc.DecisionsTopic(), int(pos[0].Partition), pos[0].Offset, pos[0].Offset+1, func(m kafkalog.Message) error {
				got = m.Value
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, value.Bytes()) {
				t.Fatalf("read back %d bytes, want the %d appended", len(got), value.Len())
			}
		})
	}
}
