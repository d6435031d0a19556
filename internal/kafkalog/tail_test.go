package kafkalog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// appendKeyed appends n records per key, values "<key>/<i>", and returns
// the partition each key went to.
func appendKeyed(t *testing.T, ctx context.Context, kc kafkalog.Config, keys []string, n int) map[string]int {
	t.Helper()
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	parts := map[string]int{}
	for i := range n {
		var recs []kafkalog.Record
		for _, k := range keys {
			recs = append(recs, kafkalog.Record{Key: []byte(k), Value: fmt.Appendf(nil, "%s/%03d", k, i), Headers: kafkalog.TypeHeaders("test", 1)})
		}
		pos, err := w.Append(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		for j, k := range keys {
			parts[k] = int(pos[j].Partition)
		}
	}
	return parts
}

// A Tail reads every record of its partitions from the given offsets once,
// each partition in order, in windows within the bounds; caught up, it
// returns an empty window after Idle.
func TestTailWindows(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			kc.Partitions = 4
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			counts, err := kafkalog.EnsureTopics(ctx, kc)
			if err != nil {
				t.Fatal(err)
			}
			keys := []string{"run-a", "run-b", "run-c", "run-d", "run-e"}
			parts := appendKeyed(t, ctx, kc, keys, 40)
			for _, k := range keys {
				if want := kafkalog.PartitionOf([]byte(k), counts[kc.FactsTopic()]); parts[k] != want {
					t.Errorf("key %s went to partition %d, PartitionOf says %d", k, parts[k], want)
				}
			}
			ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
			if err != nil {
				t.Fatal(err)
			}
			// Every partition from offset 3: the first three records of
			// each partition are not read.
			from := map[kafkalog.TopicPartition]int64{}
			var want int64
			for p, end := range ends {
				from[kafkalog.TopicPartition{Topic: kc.FactsTopic(), Partition: p}] = min(3, end)
				want += max(end-3, 0)
			}
			tail, err := kafkalog.NewTail(ctx, kc, from, kafkalog.TailOptions{Window: kafkalog.WindowOptions{
				MaxRecords: 7, MaxBytes: 40, QuietGap: 20 * time.Millisecond, MaxAge: time.Second, Idle: 2 * time.Second, // long enough that a loaded machine's fetch never looks idle
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer tail.Close()
			next := map[int]int64{}
			for p := range ends {
				next[p] = min(3, ends[p])
			}
			var got int64
			for got < want {
				w, err := tail.Window(ctx)
				if err != nil {
					t.Fatalf("after %d of %d records: %v", got, want, err)
				}
				if len(w) == 0 {
					t.Fatalf("an empty window after %d of %d records", got, want)
				}
				size := 0
				for _, m := range w {
					if m.Offset != next[m.Partition] {
						t.Fatalf("partition %d: read offset %d, want %d", m.Partition, m.Offset, next[m.Partition])
					}
					next[m.Partition]++
					if m.Topic != kc.FactsTopic() || m.HighWaterMark < m.Offset+1 || m.Time.IsZero() {
						t.Errorf("record %d/%d: topic %q, high watermark %d, time %v", m.Partition, m.Offset, m.Topic, m.HighWaterMark, m.Time)
					}
					if v, _ := kafkalog.HeaderValue(m.Headers, kafkalog.HeaderType); string(v) != "test" {
						t.Errorf("record %d/%d: type header %q, want test", m.Partition, m.Offset, v)
					}
					size += len(m.Value)
				}
				if len(w) > 7 || (len(w) > 1 && size-len(w[len(w)-1].Value) >= 40) {
					t.Errorf("a window of %d records, %d bytes: over the bounds 7 records, 40 bytes", len(w), size)
				}
				got += int64(len(w))
				tail.Release(w)
			}
			start := time.Now()
			w, err := tail.Window(ctx)
			if err != nil || len(w) != 0 {
				t.Fatalf("caught up: got %d records, %v; want an empty window", len(w), err)
			}
			if d := time.Since(start); d < 1900*time.Millisecond {
				t.Errorf("the empty window came after %v, want the idle time, 2s", d)
			}
		})
	}
}

// A record over the topic's max.message.bytes fails the append with
// ErrRecordTooLarge (and ErrNotAcknowledged): callers stop rather than
// retry what cannot succeed.
func TestAppendTooLarge(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl := &kafka.Client{Addr: kafka.TCP(kc.Brokers...), Timeout: 30 * time.Second}
			resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
				Topic: kc.DecisionsTopic(), NumPartitions: 1, ReplicationFactor: 1,
				ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "256"}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			for name, err := range resp.Errors {
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
			}
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			w := kafkalog.NewWriter(kc, kc.DecisionsTopic(), kafkalog.WriterOptions{MaxAttempts: 1})
			defer w.Close()
			if _, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("k"), Value: []byte("small")}}); err != nil {
				t.Fatalf("a small record: %v", err)
			}
			big := make([]byte, 4096)
			for i := range big {
				big[i] = byte(i * 7919 >> 3)
			}
			_, err = w.Append(ctx, []kafkalog.Record{{Key: []byte("k"), Value: big}})
			if !errors.Is(err, kafkalog.ErrRecordTooLarge) || !errors.Is(err, kafkalog.ErrNotAcknowledged) {
				t.Fatalf("appending %d bytes to a 256-byte topic: got %v, want ErrRecordTooLarge and ErrNotAcknowledged", len(big), err)
			}
			// What the broker said is kept, and unrelated failures are not
			// called too large.
			if !errors.Is(err, kafka.MessageSizeTooLarge) {
				t.Errorf("got %v, want it to wrap the broker's MessageSizeTooLarge", err)
			}
		})
	}
}

// A Tail behind the log cuts its windows by the bounds, not by pauses in
// its own reading: the records exist, so a window waits for them however
// slowly the reader runs (records of 200 KB take several fetches, each a
// pause far longer than the quiet gap). Caught up, a window is cut by the
// quiet gap as before, without waiting for the catch-up bound.
func TestTailCatchesUpInWholeWindows(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			kc.Partitions = 1
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
			defer w.Close()
			const n, size = 30, 200 << 10
			for i := range n {
				v := make([]byte, size)
				v[0] = byte(i)
				if _, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("run"), Value: v}}); err != nil {
					t.Fatal(err)
				}
			}
			tp := kafkalog.TopicPartition{Topic: kc.FactsTopic(), Partition: 0}
			tail, err := kafkalog.NewTail(ctx, kc, map[kafkalog.TopicPartition]int64{tp: 0}, kafkalog.TailOptions{Window: kafkalog.WindowOptions{
				MaxRecords: 100, QuietGap: time.Nanosecond, MaxAge: time.Microsecond, CatchUp: time.Hour,
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer tail.Close()
			win, err := tail.Window(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(win) != n {
				t.Fatalf("the first window behind a log of %d records holds %d; want all of them", n, len(win))
			}
			tail.Release(win)

			if _, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("run"), Value: []byte("last")}}); err != nil {
				t.Fatal(err)
			}
			got := make(chan int, 1)
			go func() {
				win, err := tail.Window(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- len(win)
			}()
			select {
			case k := <-got:
				if k != 1 {
					t.Fatalf("caught up, the window holds %d records, want 1", k)
				}
			case <-ctx.Done():
				t.Fatal("caught up, the window waited for records the log does not hold")
			}
		})
	}
}
