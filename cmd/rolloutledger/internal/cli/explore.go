package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/services/explore"
	"github.com/rolloutledger/rolloutledger/services/explore/recorded"
)

func newExploreCmd(g *globals) *cobra.Command {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "explore --archive F --out DIR",
		Short: "Write a run's explorer as a static bundle that opens from disk",
		Long: `explore reads a run — from an archive with --archive, or from Kafka with
--run — and writes the run explorer (the views served at /ui) with every
view's data into DIR. DIR/index.html opens in a browser from disk, with no
server and nothing fetched from the network: for auditors, and for sharing.

The bundle is built in a new directory beside DIR and renamed into place.
DIR must be missing or empty unless --force, which replaces it and all it
holds; a DIR that is a symbolic link is refused.`,
		Args: cobra.NoArgs,
	}
	sf := addSourceFlags(cmd)
	cmd.Flags().StringVar(&out, "out", "", "directory to write the bundle into (required)")
	cmd.Flags().BoolVar(&force, "force", false, "replace --out and everything in it when it is not empty")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if out == "" {
			return errors.New("--out is required: the directory to write the bundle into")
		}
		ctx := cmd.Context()
		src, err := sf.open(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		m, err := recorded.Load(ctx, src)
		if err != nil {
			return err
		}
		n, err := explore.WriteBundle(out, m, explore.BundleOptions{Force: force})
		if err != nil {
			return err
		}
		abs, _ := filepath.Abs(filepath.Join(out, "index.html"))
		fmt.Fprintf(g.stdout, "wrote %d files for run %s (%d facts) in %s\nopen file://%s\n", n, m.Run(), m.Facts(),
			time.Since(start).Round(time.Millisecond), abs)
		return nil
	}
	return cmd
}
