package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/dataset"
)

func newExportCmd(g *globals) *cobra.Command {
	var run, out, format, archive string
	var runs []string
	cmd := &cobra.Command{
		Use:   "export --run R --out F [--format archive|parquet|hf|atif|messages] [--archive F] [--runs A,B]",
		Short: "Write a run as an archive of its facts and decisions, or as a dataset (Parquet, Hugging Face, ATIF, chat messages)",
		Long: `With --format archive (the default), export reads a run's facts and recorded decisions from Kafka and writes them,
with their original positions, the leaf index of the run's fact tree and a
manifest (counts, rule version, recorded tree heads, final head), to one
archive file. The file is written beside F and renamed into place when
complete; it is then opened and verified like any archive (checksums, final
head recomputed). replay, audit and prove read it with --archive, without
Kafka. The format is documented in replay/archive.go.

The other formats fold the run's facts with the projection rules, as replay
does, and write what the fold concludes, from Kafka or from an archive
(--archive F), for one run (--run) or several (--runs A,B, from Kafka):

  parquet   a directory of one Parquet file per table: attempts, turns,
            tool_calls, batches, samples, tasks (zstd; docs/analysts.md)
  hf        a Hugging Face datasets layout: data/<table>/*.parquet and a
            README.md dataset card (schema, run config, ledger head)
  atif      a JSONL file, one ATIF-v1.4 trajectory per attempt
  messages  a JSONL file, one chat "messages" conversation per attempt

The same history exports to the same bytes; every export names the ledger
head (fact tree size and root) it was taken from.`,
		Args: cobra.NoArgs,
	}
	kf := addKafkaFlags(cmd)
	cmd.Flags().StringVar(&run, "run", "", "the run to export (required)")
	cmd.Flags().StringVar(&out, "out", "", "the archive file, dataset directory (parquet, hf) or JSONL file (atif, messages) to write (required)")
	cmd.Flags().StringVar(&format, "format", "archive", "archive, parquet, hf, atif or messages")
	cmd.Flags().StringVar(&archive, "archive", "", "read the run from this archive instead of Kafka (dataset formats)")
	cmd.Flags().StringSliceVar(&runs, "runs", nil, "several runs to export into one dataset, from Kafka (dataset formats)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if format != "archive" {
			return exportDataset(cmd, g, kf, format, run, runs, archive, out)
		}
		if archive != "" || len(runs) > 0 {
			return errors.New("--archive and --runs apply to the dataset formats (parquet, hf, atif, messages), not to --format archive")
		}
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

// exportDataset is export for the dataset formats.
func exportDataset(cmd *cobra.Command, g *globals, kf *kafkaFlags, format, run string, runs []string, archive, out string) error {
	if out == "" {
		return errors.New("--out is required")
	}
	if !slices.Contains(dataset.Formats, format) {
		return fmt.Errorf("--format %q: want archive, %s", format, strings.Join(dataset.Formats, ", "))
	}
	if run != "" && len(runs) > 0 {
		return errors.New("give --run or --runs, not both")
	}
	if run != "" {
		runs = []string{run}
	}
	ctx := cmd.Context()
	var srcs []replay.Source
	totals := map[string]int64{} // the progress bar's end, per run
	switch {
	case archive != "":
		if len(runs) > 1 {
			return errors.New("--runs reads from Kafka; an archive holds one run")
		}
		a, err := replay.OpenArchive(archive)
		if err != nil {
			return err
		}
		if len(runs) == 1 && runs[0] != a.Run() {
			return fmt.Errorf("--run %s: the archive %s holds run %s", runs[0], archive, a.Run())
		}
		srcs = append(srcs, a)
		totals[a.Run()] = int64(a.Manifest().Facts)
	case len(runs) == 0:
		return errors.New("--run (or --runs, or --archive) is required")
	default:
		kc, err := kf.config()
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r == "" {
				return errors.New("--runs: an empty run id")
			}
			src, err := replay.OpenKafka(ctx, kc, r)
			if err != nil {
				return err
			}
			_, end := src.FactsPartition()
			srcs = append(srcs, src)
			totals[r] = end
		}
	}
	var bar *progressbar.ProgressBar
	current := ""
	onFact := func(f replay.Fact) {
		if bar == nil {
			return
		}
		if _, ok := srcs[0].(*replay.Archive); ok {
			bar.Set64(int64(f.Seq))
		} else {
			bar.Set64(f.Offset + 1)
		}
	}
	start := time.Now()
	wrapped := make([]replay.Source, len(srcs))
	for i, s := range srcs {
		wrapped[i] = &progressSource{Source: s, begin: func(run string) {
			if bar != nil {
				bar.Finish()
			}
			current = run
			bar = newBar(g.stderr, totals[current], "export "+current+" ("+format+")", "facts")
		}}
	}
	res, err := dataset.Export(ctx, wrapped, format, out, dataset.Options{OnFact: onFact})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(g.stdout, "exported %d run(s) as %s to %s in %s (%.0f facts/s)\n", len(res.Heads), format, res.Out,
		took.Round(time.Millisecond), float64(res.Facts)/took.Seconds())
	for _, h := range res.Heads {
		fmt.Fprintf(g.stdout, "  run %s: %d facts, ledger head %d:%s\n", h.Run, h.Facts, h.Head.Size, h.Head.Root)
	}
	for _, f := range res.Files {
		fmt.Fprintf(g.stdout, "  %-45s %9d rows %12d bytes  sha256:%s\n", f.Path, f.Rows, f.Bytes, f.SHA256)
	}
	return nil
}

// progressSource tells when a run's facts start to be read.
type progressSource struct {
	replay.Source
	begin func(run string)
}

// FactsBound passes the wrapped source's bound on ([replay.FactsBounder]).
func (p *progressSource) FactsBound() uint64 {
	if b, ok := p.Source.(replay.FactsBounder); ok {
		return b.FactsBound()
	}
	return 0
}

func (p *progressSource) Facts(ctx context.Context, fn func(replay.Fact) error) error {
	p.begin(p.Run())
	return p.Source.Facts(ctx, fn)
}

func newBar(w io.Writer, max int64, desc, unit string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(max, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionSetVisibility(isTerminal(w)), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
}
