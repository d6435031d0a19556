package kafkalog

import (
	"context"
	"fmt"
	"time"
)

// ReadPartition reads partition p of topic from offset from up to (not
// including) offset to, calling fn for each record in order. It is for
// tools, replay and tests that read a bounded range; services consume with
// a [Tail] from offsets kept beside their state. Records below the log
// start (removed by retention) are not read and not reported.
func ReadPartition(ctx context.Context, c Config, topic string, p int, from, to int64, fn func(Message) error) error {
	return readRange(ctx, c, TopicPartition{Topic: topic, Partition: p}, from, to, 250*time.Millisecond, fn)
}

func readRange(ctx context.Context, c Config, tp TopicPartition, from, to int64, maxWait time.Duration, fn func(Message) error) error {
	if from >= to {
		return nil
	}
	r, err := NewTailer(c, tp, from, TailerOptions{MaxWait: maxWait})
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		m, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("kafkalog: read %s/%d: %w", tp.Topic, tp.Partition, err)
			}
			return err
		}
		if m.Offset >= to {
			return nil
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.Offset+1 >= to {
			return nil
		}
	}
}

// ReadAt returns the record at offset of tp; ok is false when the log no
// longer holds it (retention removed it). It waits for the record when the
// log has not reached offset yet.
func ReadAt(ctx context.Context, c Config, tp TopicPartition, offset int64) (m Message, ok bool, err error) {
	err = readRange(ctx, c, tp, offset, offset+1, 100*time.Millisecond, func(got Message) error {
		m, ok = got, true
		return nil
	})
	return m, ok, err
}

// ReadAll reads every record of topic written before the call, partition
// by partition in ascending order, each partition in offset order.
func ReadAll(ctx context.Context, c Config, topic string, fn func(Message) error) error {
	ends, err := EndOffsets(ctx, c, topic)
	if err != nil {
		return err
	}
	for p := 0; p < len(ends); p++ {
		if err := ReadPartition(ctx, c, topic, p, 0, ends[p], fn); err != nil {
			return err
		}
	}
	return nil
}
