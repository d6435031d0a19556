package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/consumer"
)

// writer stores windows through one connection and keeps the offsets it
// committed last.
type writer struct {
	s       *Sink
	conn    *pgx.Conn
	offsets map[TopicPartition]int64
}

// Prepare decodes a window's rows while the previous window is written.
func (w *writer) Prepare(cw *consumer.Window) {
	cw.Prepared = prepare(cw.Records, w.s.o.Kafka.FactsTopic(), w.s.tel)
}

// Apply stores a prepared window (see write).
func (w *writer) Apply(ctx context.Context, cw *consumer.Window) error {
	return w.write(ctx, cw)
}

// Idle checks the stored offsets while the log is quiet (see verify).
func (w *writer) Idle(ctx context.Context) error { return w.verify(ctx) }

// Close ends the session's connection; its open transaction, if any, was
// rolled back.
func (w *writer) Close() error { return w.conn.Close(context.Background()) }

// write stores one window in one transaction: the rows of every record,
// then the partitions' next offsets, compared and set (each must still be
// the offset this session read from, or the transaction is abandoned with
// ErrOffsetsMoved). So a record's rows are committed exactly when the
// offset past it is, and never by two sessions.
func (w *writer) write(ctx context.Context, cw *consumer.Window) (err error) {
	win := cw.Prepared.(*window)
	ctx, span := w.s.startWrite(ctx, win)
	defer func() { endSpan(span, err) }()
	start := time.Now()
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	schema := w.s.o.Schema
	var staged []tableID
	for id := range numTables {
		rows := win.tableRows(id)
		if len(rows) == 0 {
			continue
		}
		t := &tables[id]
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", t.stageName()}, t.stageCols(), pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy into the staging table of %s: %w", t.name, err)
		}
		staged = append(staged, id)
	}

	b := &pgx.Batch{}
	for _, id := range staged {
		b.Queue(tables[id].insert(schema))
	}
	adv := cw.Partitions
	topics := make([]string, 0, len(adv))
	parts := make([]int32, 0, len(adv))
	expected := make([]int64, 0, len(adv))
	next := make([]int64, 0, len(adv))
	first := make([]int64, 0, len(adv))
	shas := make([][]byte, 0, len(adv))
	for tp, a := range adv {
		topics = append(topics, tp.Topic)
		parts = append(parts, int32(tp.Partition))
		expected = append(expected, w.offsets[tp])
		next = append(next, a.Next)
		first = append(first, a.First)
		shas = append(shas, a.Mark.Fingerprint)
	}
	b.Queue(fmt.Sprintf(`UPDATE %s o
		   SET next_offset = v.next,
		       first_offset = coalesce(o.first_offset, v.first),
		       first_sha256 = coalesce(o.first_sha256, v.sha),
		       updated_at = now()
		  FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[])
		       AS v(topic, partition, expected, next, first, sha)
		 WHERE o.topic = v.topic AND o.partition = v.partition AND o.next_offset = v.expected`, w.s.offsetsTable()),
		topics, parts, expected, next, first, shas)
	results := tx.SendBatch(ctx, b)
	var inserted int64
	perTable := make([]int64, len(staged))
	for i, id := range staged {
		tag, err := results.Exec()
		if err != nil {
			results.Close()
			return fmt.Errorf("insert into %s: %w", tables[id].name, err)
		}
		perTable[i] = tag.RowsAffected()
		inserted += tag.RowsAffected()
	}
	tag, err := results.Exec()
	if err != nil {
		results.Close()
		return fmt.Errorf("advance offsets: %w", err)
	}
	if err := results.Close(); err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(adv)) {
		return ErrOffsetsMoved
	}
	cw.CommitPoint()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	at := time.Now()
	m := w.s.tel.Metrics
	m.PGWrite(ctx, at.Sub(start))
	for i, id := range staged {
		m.PGRows(ctx, tables[id].name, perTable[i])
	}
	w.s.noteSpanTables(span, staged, inserted)

	c := Commit{Records: win.records, Rows: inserted, Next: make(map[TopicPartition]int64, len(adv)), At: at}
	for tp, a := range adv {
		w.offsets[tp] = a.Next
		c.Next[tp] = a.Next
	}
	w.s.noteStored(c.Next)
	w.s.records.Add(int64(win.records))
	w.s.rows.Add(inserted)
	w.s.commits.Add(1)
	if w.s.o.OnCommit != nil {
		w.s.o.OnCommit(c)
	}
	return nil
}

// verify checks, while the log is quiet, that the stored offsets are still
// the ones this session committed: a partition moved by another writer or
// by a rebuild's swap is noticed even when no record arrives for it.
func (w *writer) verify(ctx context.Context) error {
	rows, err := w.conn.Query(ctx, fmt.Sprintf(`SELECT topic, partition, next_offset FROM %s`, w.s.offsetsTable()))
	if err != nil {
		return fmt.Errorf("check offsets: %w", err)
	}
	stored := map[TopicPartition]int64{}
	for rows.Next() {
		var tp TopicPartition
		var next int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &next); err != nil {
			rows.Close()
			return err
		}
		stored[tp] = next
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check offsets: %w", err)
	}
	for tp, next := range w.offsets {
		if got, ok := stored[tp]; !ok || got != next {
			return ErrOffsetsMoved
		}
	}
	return nil
}
