package pgsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/services/kafkalog"
)

// ErrOffsetsMoved is the end of a session whose stored offsets changed
// under it: another sink, or a rebuild swapping its schema in. The
// transaction is rolled back and the next session resumes from the offsets
// as they are now.
var ErrOffsetsMoved = errors.New("pgsink: consumed offsets moved under the sink")

func (s *Sink) offsetsTable() string {
	return pgx.Identifier{s.o.Schema, "consumed_offsets"}.Sanitize()
}

// resume makes sure every partition of both topics has a consumed_offsets
// row and returns where to read each from. A partition whose log is not the
// one the stored offset counts in (the broker was re-created under the same
// topic names: the fingerprinted first record differs, or the log is now
// shorter than the offset) is read again from its start; since every row is
// keyed by its fact or decision id, reading records again stores nothing
// twice.
func (s *Sink) resume(ctx context.Context, conn *pgx.Conn) (map[TopicPartition]int64, error) {
	out := map[TopicPartition]int64{}
	for _, topic := range []string{s.o.Kafka.FactsTopic(), s.o.Kafka.DecisionsTopic()} {
		ends, err := kafkalog.EndOffsets(ctx, s.o.Kafka, topic)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(
			`INSERT INTO %s (topic, partition, next_offset) SELECT $1, p, 0 FROM generate_series(0, $2 - 1) AS p ON CONFLICT DO NOTHING`,
			s.offsetsTable()), topic, len(ends)); err != nil {
			return nil, fmt.Errorf("register partitions of %s: %w", topic, err)
		}
		rows, err := conn.Query(ctx, fmt.Sprintf(
			`SELECT partition, next_offset, first_offset, first_sha256 FROM %s WHERE topic = $1`, s.offsetsTable()), topic)
		if err != nil {
			return nil, err
		}
		type stored struct {
			part       int
			next       int64
			firstOff   *int64
			firstSHA   []byte
			checkFirst bool
		}
		var all []stored
		for rows.Next() {
			var st stored
			if err := rows.Scan(&st.part, &st.next, &st.firstOff, &st.firstSHA); err != nil {
				rows.Close()
				return nil, err
			}
			if _, ok := ends[st.part]; ok {
				all = append(all, st)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, st := range all {
			tp := TopicPartition{Topic: topic, Partition: st.part}
			same := st.next <= ends[st.part]
			if same && st.firstOff != nil && st.next > 0 {
				if same, err = s.sameLog(ctx, tp, *st.firstOff, st.firstSHA); err != nil {
					return nil, err
				}
			}
			if same {
				out[tp] = st.next
				continue
			}
			s.log.Warn("the partition holds another log than the one this schema read (re-created broker?); reading it from the start",
				"topic", topic, "partition", st.part, "stored_next", st.next, "log_end", ends[st.part])
			tag, err := conn.Exec(ctx, fmt.Sprintf(
				`UPDATE %s SET next_offset = 0, first_offset = NULL, first_sha256 = NULL, updated_at = now()
				  WHERE topic = $1 AND partition = $2 AND next_offset = $3`, s.offsetsTable()), topic, st.part, st.next)
			if err != nil {
				return nil, err
			}
			if tag.RowsAffected() != 1 {
				return nil, ErrOffsetsMoved
			}
			out[tp] = 0
		}
	}
	return out, nil
}

// sameLog reports whether the record at offset in tp is the one whose
// fingerprint was stored. When the log no longer holds that offset
// (retention removed it) there is nothing to compare: the stored offsets
// are trusted.
func (s *Sink) sameLog(ctx context.Context, tp TopicPartition, offset int64, sha []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: s.o.Kafka.Brokers, Topic: tp.Topic, Partition: tp.Partition,
		MinBytes: 1, MaxBytes: 2 << 20, MaxWait: 100 * time.Millisecond, ReadLagInterval: -1,
		Dialer: s.o.Kafka.Dialer(),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		return false, err
	}
	m, err := r.ReadMessage(ctx)
	if err != nil {
		return false, fmt.Errorf("read %s/%d at %d to check the log: %w", tp.Topic, tp.Partition, offset, err)
	}
	if m.Offset != offset {
		return true, nil
	}
	return bytes.Equal(fingerprint(m.Value), sha), nil
}
