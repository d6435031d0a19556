package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/services/pgsink"
)

// addDatabaseFlag adds --database-url to a command that talks to Postgres
// and returns the URL to use: the flag's, else $DATABASE_URL. The
// environment is read when the command runs, not as the flag's default,
// so that --help never prints a password.
func addDatabaseFlag(cmd *cobra.Command) func() string {
	url := new(string)
	cmd.Flags().StringVar(url, "database-url", "",
		"Postgres connection string of the analysts' read model (default $DATABASE_URL)")
	return func() string {
		if cmd.Flags().Changed("database-url") {
			return *url
		}
		return os.Getenv("DATABASE_URL")
	}
}

// whereIs names a database without its password, for messages.
func whereIs(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparsable database URL)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

func newMigrateCmd(g *globals) *cobra.Command {
	var schema string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the Postgres migrations",
		Long: `migrate creates the analysts' read model in Postgres, or brings it up to this
build's version: the schema (default rolloutledger) with its tables and views,
and the NOLOGIN role rolloutledger_reader that may only read them. The SQL is
embedded in the binary; applying an up-to-date schema changes nothing.
serve and dev apply the migrations themselves when they run the pgsink.`,
		Args: cobra.NoArgs,
	}
	databaseURL := addDatabaseFlag(cmd)
	cmd.Flags().StringVar(&schema, "schema", pgsink.DefaultSchema, "schema of the read model")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := g.logger("text")
		if err != nil {
			return err
		}
		url := databaseURL()
		if url == "" {
			return errors.New("no database: set --database-url or $DATABASE_URL")
		}
		res, err := pgsink.Migrate(cmd.Context(), url, schema, log)
		if err != nil {
			return err
		}
		if len(res.Applied) == 0 {
			fmt.Fprintf(g.stdout, "schema %s in %s is up to date at version %d\n", schema, whereIs(url), res.Version)
			return nil
		}
		fmt.Fprintf(g.stdout, "schema %s in %s migrated to version %d (applied %v)\n", schema, whereIs(url), res.Version, res.Applied)
		return nil
	}
	return cmd
}
