package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/replay"
)

// demoReplay ends the demo the way an auditor would start: once the
// projector has folded every fact, it replays the demo's run from Kafka,
// re-folds it, and checks every recorded decision and tree head byte for
// byte (rolloutledger replay --verify).
func demoReplay(ctx context.Context, out io.Writer, d *devStack, run string) error {
	if err := waitFolded(ctx, d, time.Minute); err != nil {
		return err
	}
	start := time.Now()
	src, err := replay.OpenKafka(ctx, d.kafka, run)
	if err != nil {
		return err
	}
	rep, err := replay.Verify(ctx, src, replay.VerifyOptions{})
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "\nrolloutledger replay --run %s --verify (from Kafka, %s)\n", run, took.Round(time.Millisecond))
	fmt.Fprintf(out, "  %d facts re-folded (%.0f facts/s); %d decisions recorded, %d recomputed, %d byte-identical; %d tree heads checked\n",
		rep.Facts, float64(rep.Facts)/took.Seconds(), rep.Recorded, rep.Recomputed, rep.Matched, rep.HeadsChecked)
	fmt.Fprintf(out, "  final head %d:%s\n", rep.Head.Size, rep.Head.Root)
	fmt.Fprintf(out, "  verdict: %s\n", verdictLine(rep))
	if !rep.OK() {
		return &exitError{code: 1, err: fmt.Errorf("the demo's own run does not replay: %s", verdictLine(rep))}
	}
	return nil
}

// waitFolded waits until the stack's projector has folded every fact
// written so far, so the record is complete before it is verified.
func waitFolded(ctx context.Context, d *devStack, limit time.Duration) error {
	ends, err := kafkalog.EndOffsets(ctx, d.kafka, d.kafka.FactsTopic())
	if err != nil {
		return err
	}
	p := d.stack.Projector()
	if p == nil {
		return fmt.Errorf("the demo stack runs no projector")
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		behind := false
		for part, end := range ends {
			off, err := p.Offset(part)
			if err != nil {
				return err
			}
			behind = behind || off < end
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the projector has not folded every fact after %s: %w", limit, ctx.Err())
		case <-tick.C:
		}
	}
}
