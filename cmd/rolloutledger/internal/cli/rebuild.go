package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

func newProjectionsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "projections",
		Short: "Manage the read models the ledger projects from its log",
	}
	rebuild := &cobra.Command{
		Use:   "rebuild",
		Short: "Rebuild a read model from the log",
	}
	rebuild.AddCommand(newRebuildPostgresCmd(g))
	cmd.AddCommand(rebuild)
	return cmd
}

func newRebuildPostgresCmd(g *globals) *cobra.Command {
	var schema string
	var keepOld, quiet bool
	cmd := &cobra.Command{
		Use:   "postgres",
		Short: "Rebuild the Postgres read model from the log into a fresh schema and swap it in",
		Long: `rebuild postgres migrates a fresh schema beside the live one, stores every
fact and decision the log holds now into it, then swaps it in by renaming both
schemas in one transaction: readers see the old tables until that instant and
the new ones after it. The prices table is carried over. A running pgsink
notices the swap and goes on from the new schema's offsets. The replaced schema
is dropped unless --keep-old.`,
		Args: cobra.NoArgs,
	}
	kf := addKafkaFlags(cmd)
	databaseURL := addDatabaseFlag(cmd)
	cmd.Flags().StringVar(&schema, "schema", pgsink.DefaultSchema, "schema of the read model to rebuild")
	cmd.Flags().BoolVar(&keepOld, "keep-old", false, "keep the replaced schema (renamed <schema>_old_<time>) instead of dropping it")
	cmd.Flags().BoolVar(&quiet, "no-progress", false, "do not draw the progress bar")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := g.logger("text")
		if err != nil {
			return err
		}
		url := databaseURL()
		if url == "" {
			return errors.New("no database: set --database-url or $DATABASE_URL")
		}
		var bar *progressbar.ProgressBar
		progress := func(done, total int64) {
			if quiet {
				return
			}
			if bar == nil {
				bar = progressbar.NewOptions64(total,
					progressbar.OptionSetWriter(g.stderr),
					progressbar.OptionSetDescription("rebuilding "+schema),
					progressbar.OptionShowCount(),
					progressbar.OptionShowIts(),
					progressbar.OptionSetItsString("records"),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(g.stderr) }),
				)
			}
			_ = bar.Set64(done)
		}
		kc, err := kf.config()
		if err != nil {
			return err
		}
		start := time.Now()
		res, err := pgsink.Rebuild(cmd.Context(), pgsink.RebuildOptions{
			Kafka: kc, DatabaseURL: url, Schema: schema, KeepOld: keepOld, Progress: progress, Logger: log,
		})
		if bar != nil {
			_ = bar.Finish()
		}
		if err != nil {
			return err
		}
		took := time.Since(start)
		fmt.Fprintf(g.stdout, "rebuilt %s in %s from %d records in %s (%.0f records/s)\n",
			schema, whereIs(url), res.Records, took.Round(time.Millisecond), float64(res.Records)/took.Seconds())
		switch {
		case !res.Swapped:
			fmt.Fprintf(g.stdout, "there was no %s schema before: the rebuilt one is now it\n", schema)
		case res.Old != "":
			fmt.Fprintf(g.stdout, "the replaced schema is kept as %s\n", res.Old)
		default:
			fmt.Fprintln(g.stdout, "the replaced schema was dropped")
		}
		return nil
	}
	return cmd
}
