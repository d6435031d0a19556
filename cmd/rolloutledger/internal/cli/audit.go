package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/report"
)

func newAuditCmd(g *globals) *cobra.Command {
	var htmlOut string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit --run R [--archive F] [--html F]",
		Short: "Print a run's audit report, or write it as HTML",
		Long: `audit replays a run once — from Kafka, or from an archive with --archive — and
reports what docs/design.md §14.8 lists, against the recipe's reference
figures: drop rates, staleness and its in-flight/in-queue split, masked
turns and tokens, pass rate and tokens per solve per step, the trainer's
log-prob gap and truncation, tools, compaction, microVM fork time, and every
finding with its position. The same pass verifies every recorded decision
and tree head. --html writes one self-contained page with inline SVG
charts, viewable offline. Exits 1 when the verification fails.`,
		Args: cobra.NoArgs,
	}
	sf := addSourceFlags(cmd)
	cmd.Flags().StringVar(&htmlOut, "html", "", "also write the report as a self-contained HTML page to this file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the audit as JSON instead of text")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		src, err := sf.open(ctx)
		if err != nil {
			return err
		}
		onFact, done := factProgress(g.stderr, src, "audit")
		a, v, err := replay.Audit(ctx, src, replay.VerifyOptions{OnFact: onFact})
		done()
		if err != nil {
			return err
		}
		d := report.Data{Audit: a, Verify: v}
		if asJSON {
			err = printJSON(g.stdout, struct {
				Audit  any `json:"audit"`
				Verify any `json:"verification"`
			}{a, v})
		} else {
			err = report.WriteText(g.stdout, d)
		}
		if err != nil {
			return err
		}
		if htmlOut != "" {
			f, err := os.Create(htmlOut)
			if err != nil {
				return err
			}
			if err := report.WriteHTML(f, d); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "wrote %s\n", htmlOut)
		}
		if !v.OK() {
			return &exitError{code: 1, err: errors.New(verdictLine(v))}
		}
		return nil
	}
	return cmd
}
