package pgsink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/consumer"
)

// ErrOffsetsMoved is the end of a session whose stored offsets changed
// under it: another sink, or a rebuild swapping its schema in. The
// transaction is rolled back and the next session resumes from the offsets
// as they are now.
var ErrOffsetsMoved = errors.New("pgsink: consumed offsets moved under the sink")

func (s *Sink) offsetsTable() string {
	return pgx.Identifier{s.o.Schema, "consumed_offsets"}.Sanitize()
}

// store is the sink's schema as the consumer sees it: a session is one
// connection, its staging tables, and the offsets it read from.
type store struct{ s *Sink }

// Open connects, makes sure every
// partition of parts has a consumed_offsets row, and returns where each is
// stored to, with the mark of the first record the schema ever stored from
// it, so that the consumer can tell another log under the same topic names
// (a development broker re-created) and have it read from its start
// ([writer.Rewind]); since every row is keyed by its fact or decision id,
// reading records again stores nothing twice.
func (st store) Open(ctx context.Context, parts []TopicPartition) (consumer.Session, map[TopicPartition]consumer.Stored, error) {
	s := st.s
	conn, err := connect(ctx, s.o.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	stored, err := s.open(ctx, conn, parts)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	plan, err := describeTables(ctx, conn, s.o.Schema)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	offsets := make(map[TopicPartition]int64, len(stored))
	for tp, st := range stored {
		offsets[tp] = st.Next
	}
	return &writer{s: s, conn: conn, offsets: offsets, plan: plan}, stored, nil
}

func (s *Sink) open(ctx context.Context, conn *pgx.Conn, parts []TopicPartition) (map[TopicPartition]consumer.Stored, error) {
	byTopic := map[string][]int32{}
	for _, tp := range parts {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], int32(tp.Partition))
	}
	out := map[TopicPartition]consumer.Stored{}
	for topic, ps := range byTopic {
		if _, err := conn.Exec(ctx, fmt.Sprintf(
			`INSERT INTO %s (topic, partition, next_offset) SELECT $1, p, 0 FROM unnest($2::integer[]) AS p ON CONFLICT DO NOTHING`,
			s.offsetsTable()), topic, ps); err != nil {
			return nil, fmt.Errorf("register partitions of %s: %w", topic, err)
		}
		rows, err := conn.Query(ctx, fmt.Sprintf(
			`SELECT partition, next_offset, first_offset, first_sha256 FROM %s WHERE topic = $1 AND partition = ANY($2::integer[])`,
			s.offsetsTable()), topic, ps)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var part int
			var st consumer.Stored
			var firstOff *int64
			var firstSHA []byte
			if err := rows.Scan(&part, &st.Next, &firstOff, &firstSHA); err != nil {
				rows.Close()
				return nil, err
			}
			if firstOff != nil {
				st.Mark = &consumer.Mark{Offset: *firstOff, Fingerprint: firstSHA}
			}
			out[TopicPartition{Topic: topic, Partition: part}] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Rewind starts tp over from its first record: its stored offset goes
// from `from` back to 0, compared and set, and its mark is forgotten.
func (w *writer) Rewind(ctx context.Context, tp TopicPartition, from int64) error {
	tag, err := w.conn.Exec(ctx, fmt.Sprintf(
		`UPDATE %s SET next_offset = 0, first_offset = NULL, first_sha256 = NULL, updated_at = now()
		  WHERE topic = $1 AND partition = $2 AND next_offset = $3`, w.s.offsetsTable()), tp.Topic, tp.Partition, from)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return ErrOffsetsMoved
	}
	w.offsets[tp] = 0
	return nil
}
