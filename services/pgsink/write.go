package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rolloutledger/rolloutledger/internal/consumer"
)

// writer stores windows through one connection and keeps the offsets it
// committed last.
type writer struct {
	s       *Sink
	conn    *pgx.Conn
	offsets map[TopicPartition]int64
	// dupes is set when the last window stored through the staging
	// tables had rows whose keys were stored already.
	dupes bool
	// staging is set once the session created its staging tables, which
	// it does at its first window with duplicates (most sessions never
	// need them). A failed transaction ends the session, so a creation
	// rolled back is never taken for done.
	staging bool
	// plan is the session's description of its tables, for encoding rows
	// as they are prepared (copybin.go).
	plan *copyPlan
}

// Prepare decodes a window's rows while the previous window is written.
func (w *writer) Prepare(cw *consumer.Window) {
	cw.Prepared = prepare(cw.Records, w.s.o.Kafka.FactsTopic(), w.plan, w.s.tel)
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
//
// Rows are written once: COPY straight into the tables (copyDirect). A
// key stored before — a fact delivered twice, a decision re-emitted, a
// partition read again from its start — makes that COPY fail on the
// table's key; the transaction then rolls back to before it and stores
// the window through the staging tables (copyStaged), which drop such
// rows. The offsets make the choice safe: whichever way the rows went in,
// they commit with the offsets past their records or not at all. While
// windows keep finding stored keys (a partition read again), the next
// ones go through the staging tables at once.
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
	var copied []tableID
	var perTable []int64
	var inserted int64
	if !w.dupes {
		copied, perTable, err = w.copyDirect(ctx, tx, win)
		if err != nil {
			return err
		}
	}
	if copied == nil {
		// The window repeats keys already stored (or in itself): store it
		// through the staging tables, which keep the first of each key.
		var total int64
		copied, perTable, total, err = w.copyStaged(ctx, tx, win)
		if err != nil {
			return err
		}
		for _, n := range perTable {
			inserted += n
		}
		w.dupes = inserted < total
	} else {
		for _, n := range perTable {
			inserted += n
		}
	}

	b := &pgx.Batch{}
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
	for i, id := range copied {
		m.PGRows(ctx, tables[id].name, perTable[i])
	}
	w.s.noteSpanTables(span, copied, inserted)

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

// copyDirect copies the window's rows straight into their tables, parents
// first, inside a savepoint. It returns the tables written and their row
// counts, or nil tables (and the transaction back at the savepoint) when
// a row broke a table's key or foreign key: some row was stored before,
// or repeats a key of the window, and copyStaged must sort them out.
func (w *writer) copyDirect(ctx context.Context, tx pgx.Tx, win *window) ([]tableID, []int64, error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT direct"); err != nil {
		return nil, nil, fmt.Errorf("savepoint: %w", err)
	}
	schema := w.s.o.Schema
	var copied []tableID
	var counts []int64
	for id := range numTables {
		t := &tables[id]
		var n int64
		var err error
		// The rows encoded ahead; the boxed rows, gathered from the
		// window's slices, only for a table whose rows did not encode.
		if r, encoded, ok := win.encoded(id); ok && w.plan != nil {
			if encoded == 0 {
				continue
			}
			var tag pgconn.CommandTag
			tag, err = tx.Conn().PgConn().CopyFrom(ctx, r, w.plan.sql[id])
			n = tag.RowsAffected()
		} else {
			rows := win.tableRows(id)
			if len(rows) == 0 {
				continue
			}
			n, err = tx.CopyFrom(ctx, pgx.Identifier{schema, t.name}, t.cols, &ownColumns{rows: rows, n: len(t.cols), i: -1})
		}
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "23") { // integrity constraint violation
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT direct"); err != nil {
					return nil, nil, fmt.Errorf("roll back to savepoint: %w", err)
				}
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("copy into %s: %w", t.name, err)
		}
		copied = append(copied, id)
		counts = append(counts, n)
	}
	if copied == nil {
		copied = []tableID{}
	}
	return copied, counts, nil
}

// copyStaged copies the window's rows into the session's staging tables
// and moves them into the real ones with INSERT ... ON CONFLICT DO
// NOTHING (see [table.insert]). It returns the tables written, the rows
// each gained, and how many rows the window had.
func (w *writer) copyStaged(ctx context.Context, tx pgx.Tx, win *window) ([]tableID, []int64, int64, error) {
	schema := w.s.o.Schema
	if !w.staging {
		b := &pgx.Batch{}
		for i := range tables {
			b.Queue(tables[i].createStage(schema))
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, nil, 0, fmt.Errorf("create the staging tables: %w", err)
		}
		w.staging = true
	}
	var staged []tableID
	var total int64
	for id := range numTables {
		rows := win.tableRows(id)
		if len(rows) == 0 {
			continue
		}
		t := &tables[id]
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", t.stageName()}, t.stageCols(), pgx.CopyFromRows(rows)); err != nil {
			return nil, nil, 0, fmt.Errorf("copy into the staging table of %s: %w", t.name, err)
		}
		staged = append(staged, id)
		total += int64(len(rows))
	}
	b := &pgx.Batch{}
	for _, id := range staged {
		b.Queue(tables[id].insert(schema))
	}
	results := tx.SendBatch(ctx, b)
	counts := make([]int64, len(staged))
	for i, id := range staged {
		tag, err := results.Exec()
		if err != nil {
			results.Close()
			return nil, nil, 0, fmt.Errorf("insert into %s: %w", tables[id].name, err)
		}
		counts[i] = tag.RowsAffected()
	}
	if err := results.Close(); err != nil {
		return nil, nil, 0, err
	}
	return staged, counts, total, nil
}

// ownColumns is a [pgx.CopyFromSource] over staged rows that copies only
// a table's own n columns: a child's rows carry their record's log
// position after them, for the staging tables' join.
type ownColumns struct {
	rows [][]any
	n, i int
}

func (c *ownColumns) Next() bool             { c.i++; return c.i < len(c.rows) }
func (c *ownColumns) Values() ([]any, error) { return c.rows[c.i][:c.n], nil }
func (c *ownColumns) Err() error             { return nil }
