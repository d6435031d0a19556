package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// EndOffsets returns the end offset of every partition of the facts and
// decisions topics: what a sink must reach to have stored everything
// written so far.
func EndOffsets(ctx context.Context, kc kafkalog.Config) (map[TopicPartition]int64, error) {
	out := map[TopicPartition]int64{}
	for _, topic := range []string{kc.FactsTopic(), kc.DecisionsTopic()} {
		ends, err := kafkalog.EndOffsets(ctx, kc, topic)
		if err != nil {
			return nil, err
		}
		for p, off := range ends {
			out[TopicPartition{Topic: topic, Partition: p}] = off
		}
	}
	return out, nil
}

// Behind reports how many records before ends the schema has not stored
// yet, by its consumed offsets.
func Behind(ctx context.Context, conn *pgx.Conn, schema string, ends map[TopicPartition]int64) (int64, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT topic, partition, next_offset FROM %s`,
		pgx.Identifier{schema, "consumed_offsets"}.Sanitize()))
	if err != nil {
		return 0, err
	}
	next := map[TopicPartition]int64{}
	for rows.Next() {
		var tp TopicPartition
		var n int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &n); err != nil {
			rows.Close()
			return 0, err
		}
		next[tp] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var behind int64
	for tp, end := range ends {
		if n := next[tp]; n < end {
			behind += end - n
		}
	}
	return behind, nil
}

// WaitCaughtUp waits until the schema has stored every record the facts
// and decisions topics held when it was called, by the offsets stored in
// Postgres: for observers outside the sink's process. Offsets stored from
// another log under the same topic names (a re-created development broker)
// count until a sink has noticed and reset them; a caller holding the
// [Sink] waits with [Sink.WaitStored] instead.
func WaitCaughtUp(ctx context.Context, databaseURL, schema string, kc kafkalog.Config) error {
	if schema == "" {
		schema = DefaultSchema
	}
	ends, err := EndOffsets(ctx, kc)
	if err != nil {
		return err
	}
	conn, err := connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		behind, err := Behind(ctx, conn, schema, ends)
		if err != nil {
			return err
		}
		if behind == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgsink: %d records not stored yet: %w", behind, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}
