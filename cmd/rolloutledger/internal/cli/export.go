package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

func newExportCmd(g *globals) *cobra.Command {
	var run, out string
	cmd := &cobra.Command{
		Use:   "export --run R --out F",
		Short: "Write a self-contained archive of a run's facts and decisions",
		Long: `export reads a run's facts and recorded decisions from Kafka and writes them,
with their original positions, the leaf index of the run's fact tree and a
manifest (counts, rule version, recorded tree heads, final head), to one
archive file. The file is written beside F and renamed into place when
complete; it is then opened and verified like any archive (checksums, final
head recomputed). replay, audit and prove read it with --archive, without
Kafka. The format is documented in replay/archive.go.`,
		Args: cobra.NoArgs,
	}
	kf := addKafkaFlags(cmd)
	cmd.Flags().StringVar(&run, "run", "", "the run to export (required)")
	cmd.Flags().StringVar(&out, "out", "", "the archive file to write (required)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if run == "" || out == "" {
			return errors.New("--run and --out are required")
		}
		ctx := cmd.Context()
		kc, err := kf.config()
		if err != nil {
			return err
		}
		src, err := replay.OpenKafka(ctx, kc, run)
		if err != nil {
			return err
		}
		_, end := src.FactsPartition()
		bar := progressbar.NewOptions64(end, progressbar.OptionSetWriter(g.stderr), progressbar.OptionSetDescription("export "+run),
			progressbar.OptionSetVisibility(isTerminal(g.stderr)), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("offsets"), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
		start := time.Now()
		m, err := replay.Export(ctx, src, out, replay.ExportOptions{OnFact: func(f replay.Fact) { bar.Set64(f.Offset + 1) }})
		bar.Finish()
		if err != nil {
			return err
		}
		took := time.Since(start)
		a, err := replay.OpenArchive(out)
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("the archive written does not verify: %w", err)}
		}
		fmt.Fprintf(g.stdout, "exported run %s to %s in %s (%.0f facts/s, %.1f MB/s)\n", run, out, took.Round(time.Millisecond),
			float64(m.Facts)/took.Seconds(), float64(m.FactBytes)/1e6/took.Seconds())
		fmt.Fprintf(g.stdout, "  facts      %d (%d bytes), %s to %s\n", m.Facts, m.FactBytes, pos(m.FirstFact), pos(m.LastFact))
		fmt.Fprintf(g.stdout, "  decisions  %d records: %s\n", m.Decisions, namedList(m.DecisionsByKind))
		fmt.Fprintf(g.stdout, "  heads      %d recorded; rule version %d\n", len(m.Heads), m.RuleVersion)
		fmt.Fprintf(g.stdout, "  final head %d:%s\n", m.FinalHead.Size, m.FinalHead.Root)
		if len(m.Skipped) > 0 {
			fmt.Fprintf(g.stdout, "  skipped    %d undecodable record(s) of the run's partition, as the projector does\n", len(m.Skipped))
		}
		fmt.Fprintf(g.stdout, "verified on open: %s\n", a.Describe())
		return nil
	}
	return cmd
}

func pos(p *projections.LogPosition) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", p.Partition, p.Offset)
}
