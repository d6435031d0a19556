package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// RebuildOptions configure [Rebuild].
type RebuildOptions struct {
	Kafka       kafkalog.Config
	DatabaseURL string
	// Schema is the schema to replace [DefaultSchema].
	Schema string
	// KeepOld keeps the replaced schema, renamed, instead of dropping it.
	KeepOld bool
	// Progress, when set, is called as records are stored: done of total,
	// where total is what the log held when the rebuild started.
	Progress func(done, total int64)
	Logger   *slog.Logger
	// Now names the rebuild's schemas; nil means time.Now.
	Now func() time.Time
}

// RebuildResult reports a finished rebuild.
type RebuildResult struct {
	// Records is how many records the fresh schema was built from.
	Records int64
	// Old is the replaced schema's new name when KeepOld, else "".
	Old string
	// Swapped is false when there was no schema to replace: the fresh one
	// was renamed into place.
	Swapped bool
}

// Rebuild builds the read model afresh from the log and swaps it in: it
// migrates a new schema beside the live one, stores every record of both
// topics into it up to the end offsets the log had when the rebuild
// started, and then, in one transaction, carries the analysts' prices over
// and renames the live schema away and the new one into its place. Readers
// see the old tables until that commit and the new ones after it. A sink
// still writing the live schema finds the offsets of the new one on its
// next transaction, abandons it (ErrOffsetsMoved) and resumes from there.
func Rebuild(ctx context.Context, o RebuildOptions) (RebuildResult, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	stamp := o.Now().UTC().Format("20060102150405")
	fresh, old := o.Schema+"_rebuild_"+stamp, o.Schema+"_old_"+stamp
	for _, s := range []string{o.Schema, fresh, old} {
		if !schemaName.MatchString(s) {
			return RebuildResult{}, fmt.Errorf("pgsink: schema %q: want [a-z_][a-z0-9_]{0,62}", s)
		}
	}

	ends := map[TopicPartition]int64{}
	var total int64
	for _, topic := range []string{o.Kafka.FactsTopic(), o.Kafka.DecisionsTopic()} {
		e, err := kafkalog.EndOffsets(ctx, o.Kafka, topic)
		if err != nil {
			return RebuildResult{}, err
		}
		for p, off := range e {
			ends[TopicPartition{Topic: topic, Partition: p}] = off
			total += off
		}
	}

	conn, err := connect(ctx, o.DatabaseURL)
	if err != nil {
		return RebuildResult{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{fresh}.Sanitize()+" CASCADE"); err != nil {
		return RebuildResult{}, err
	}
	if _, err := Migrate(ctx, o.DatabaseURL, fresh, o.Logger); err != nil {
		return RebuildResult{}, err
	}
	records, err := fill(ctx, o, fresh, ends, total)
	if err != nil {
		return RebuildResult{}, errors.Join(err, dropSchema(context.WithoutCancel(ctx), conn, fresh))
	}

	res := RebuildResult{Records: records}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	live, err := schemaExists(ctx, tx, o.Schema)
	if err != nil {
		return res, err
	}
	if live {
		// The prices are the analysts', not the log's: carry them over.
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT * FROM %s ON CONFLICT (run) DO UPDATE
			SET prompt_per_mtok = EXCLUDED.prompt_per_mtok, cached_per_mtok = EXCLUDED.cached_per_mtok,
			    completion_per_mtok = EXCLUDED.completion_per_mtok, note = EXCLUDED.note`,
			pgx.Identifier{fresh, "prices"}.Sanitize(), pgx.Identifier{o.Schema, "prices"}.Sanitize())); err != nil {
			return res, fmt.Errorf("carry prices over: %w", err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER SCHEMA %s RENAME TO %s",
			pgx.Identifier{o.Schema}.Sanitize(), pgx.Identifier{old}.Sanitize())); err != nil {
			return res, err
		}
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER SCHEMA %s RENAME TO %s",
		pgx.Identifier{fresh}.Sanitize(), pgx.Identifier{o.Schema}.Sanitize())); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("swap schemas: %w", err)
	}
	res.Swapped = live
	if live {
		if o.KeepOld {
			res.Old = old
		} else if err := dropSchema(ctx, conn, old); err != nil {
			return res, fmt.Errorf("rebuilt and swapped in; dropping the replaced schema %s failed: %w", old, err)
		}
	}
	o.Logger.Info("rebuilt", "schema", o.Schema, "records", records, "kept", res.Old)
	return res, nil
}

// fill runs a sink into schema until it has stored every record before
// ends, and returns how many records it stored.
func fill(ctx context.Context, o RebuildOptions, schema string, ends map[TopicPartition]int64, total int64) (int64, error) {
	reached := map[TopicPartition]int64{}
	var done int64
	pending := 0
	for tp, end := range ends {
		if end > 0 {
			pending++
		}
		reached[tp] = 0
	}
	if o.Progress != nil {
		o.Progress(0, total)
	}
	if pending == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	finished := make(chan struct{})
	var records int64
	sink, err := New(Options{Kafka: o.Kafka, DatabaseURL: o.DatabaseURL, Schema: schema, Logger: o.Logger,
		OnCommit: func(c Commit) {
			records += int64(c.Records)
			for tp, next := range c.Next {
				end := ends[tp]
				was := reached[tp]
				now := min(next, end)
				if now > was {
					done += now - was
					reached[tp] = now
					if now == end {
						pending--
					}
				}
			}
			if o.Progress != nil {
				o.Progress(done, total)
			}
			if pending == 0 {
				select {
				case <-finished:
				default:
					close(finished)
				}
			}
		}})
	if err != nil {
		return 0, err
	}
	ran := make(chan error, 1)
	go func() { ran <- sink.Run(ctx) }()
	select {
	case <-finished:
		cancel()
		<-ran
		return records, nil
	case err := <-ran:
		if err == nil {
			err = ctx.Err()
		}
		return records, err
	}
}

func dropSchema(ctx context.Context, conn *pgx.Conn, schema string) error {
	_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}
