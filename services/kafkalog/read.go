package kafkalog

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// ReadPartition reads partition p of topic from offset from up to (not
// including) offset to, calling fn for each record in order. It is for
// tools and tests that read a bounded range; services consume with their
// own offsets kept beside their state.
func ReadPartition(ctx context.Context, c Config, topic string, p int, from, to int64, fn func(kafka.Message) error) error {
	if from >= to {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.Brokers,
		Topic:     topic,
		Partition: p,
		MinBytes:  1,
		MaxBytes:  16 << 20,
		MaxWait:   250 * time.Millisecond,
		Dialer:    c.Dialer(),
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return fmt.Errorf("kafkalog: seek %s/%d to %d: %w", topic, p, from, err)
	}
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return fmt.Errorf("kafkalog: read %s/%d: %w", topic, p, err)
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

// ReadAll reads every record of topic written before the call, partition
// by partition in ascending order, each partition in offset order.
func ReadAll(ctx context.Context, c Config, topic string, fn func(kafka.Message) error) error {
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
