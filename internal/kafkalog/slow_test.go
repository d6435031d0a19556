package kafkalog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// slowBroker starts a broker that answers every fetch late by what
// lateBy says of it, as a broker (or a client process) on a loaded
// machine does. It is kfake, the broker the embedded one runs: the real
// broker cannot be slowed on demand. It reports how many fetches it
// delayed.
func slowBroker(t *testing.T, lateBy func(*kmsg.FetchRequest) time.Duration) (kafkalog.Config, *atomic.Int64) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kc := kafkalog.Config{Brokers: c.ListenAddrs(), TopicPrefix: testenv.UniquePrefix(t), Partitions: 2}
	if _, err := kafkalog.EnsureTopics(context.Background(), kc); err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
		d := lateBy(req.(*kmsg.FetchRequest))
		c.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false
	})
	return kc, &fetches
}

// A bounded read finishes once its records exist, however late the
// broker's answers come: a reply arriving after the broker's wait is read,
// not dropped and fetched again for ever. Before, an answer later than a
// quarter of the 250 ms wait cut the connection, and a read of [0, 50)
// never finished.
func TestReadsFinishWhenFetchesAnswerLate(t *testing.T) {
	const n = 50
	kc, fetches := slowBroker(t, func(*kmsg.FetchRequest) time.Duration { return 400 * time.Millisecond })
	ctx := context.Background()
	parts := appendKeyed(t, ctx, kc, []string{"late-run"}, n)
	p := parts["late-run"]
	want := func(i int) string { return fmt.Sprintf("late-run/%03d", i) }

	for _, c := range []struct {
		name string
		read func(ctx context.Context) ([]string, error)
	}{
		{"ReadPartition", func(ctx context.Context) ([]string, error) {
			var got []string
			err := kafkalog.ReadPartition(ctx, kc, kc.FactsTopic(), p, 0, n, func(m kafkalog.Message) error {
				got = append(got, string(m.Value))
				return nil
			})
			return got, err
		}},
		{"ReadAt", func(ctx context.Context) ([]string, error) {
			m, ok, err := kafkalog.ReadAt(ctx, kc, kafkalog.TopicPartition{Topic: kc.FactsTopic(), Partition: p}, n-1)
			if err != nil || !ok {
				return nil, fmt.Errorf("ok %v: %w", ok, err)
			}
			return []string{string(m.Value)}, nil
		}},
		{"Tail", func(ctx context.Context) ([]string, error) {
			tail, err := kafkalog.NewTail(ctx, kc, map[kafkalog.TopicPartition]int64{{Topic: kc.FactsTopic(), Partition: p}: 0}, kafkalog.TailOptions{})
			if err != nil {
				return nil, err
			}
			defer tail.Close()
			var got []string
			for len(got) < n {
				w, err := tail.Window(ctx)
				if err != nil {
					return got, err
				}
				for _, m := range w {
					got = append(got, string(m.Value))
				}
				tail.Release(w)
			}
			return got, nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The bound is generous: the read needs a few fetches, each
			// answered 400 ms late.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			before := fetches.Load()
			got, err := c.read(ctx)
			if err != nil {
				t.Fatalf("read after %d late fetches: %v (%d records read)", fetches.Load()-before, err, len(got))
			}
			first := 0
			if c.name == "ReadAt" {
				first = n - 1
			}
			if len(got) != n-first {
				t.Fatalf("got %d records, want %d", len(got), n-first)
			}
			for i, v := range got {
				if v != want(first+i) {
					t.Fatalf("record %d: got %q, want %q", first+i, v, want(first+i))
				}
			}
		})
	}
}

// A read of a large partition finishes on a broker whose answers take
// longer the more they carry (on a loaded machine a broker builds a fetch's
// answer whole, at a few MiB a second, before its first byte leaves):
// every fetch asks for little enough to be answered in time. Before, each
// fetch asked for 16 MiB, its answer came after the connection's timeout,
// and the read from the start never finished.
func TestLargeReadsFinishWhenAnswersTakeTimeBySize(t *testing.T) {
	const n, size = 12, 512 << 10
	kc, fetches := slowBroker(t, func(req *kmsg.FetchRequest) time.Duration {
		asked := 0
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				asked += int(p.PartitionMaxBytes)
			}
		}
		return time.Duration(asked) * time.Second / (4 << 20)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	value := func(i int) []byte {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i*131 + j*7 + j/251)
		}
		return v
	}
	var part int32
	for i := range n {
		pos, err := w.Append(ctx, []kafkalog.Record{{Key: []byte("large-run"), Value: value(i)}})
		if err != nil {
			t.Fatal(err)
		}
		part = pos[0].Partition
	}
	read := 0
	err := kafkalog.ReadPartition(ctx, kc, kc.FactsTopic(), int(part), 0, n, func(m kafkalog.Message) error {
		if !bytes.Equal(m.Value, value(int(m.Offset))) {
			return fmt.Errorf("record %d differs from the one appended", m.Offset)
		}
		read++
		return nil
	})
	if err != nil || read != n {
		t.Fatalf("read %d of %d records of %d KiB in %d fetches: %v", read, n, size>>10, fetches.Load(), err)
	}
}
