package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

// ErrLogUnreachable wraps the failure to read the end of the facts topic:
// Kafka does not answer now.
var ErrLogUnreachable = errors.New("projector: the end of the facts topic cannot be read")

// AttemptAnswer is the projector's answer about one attempt of a run.
type AttemptAnswer struct {
	View projections.AttemptView
	// Found says a fact named the attempt.
	Found bool
	// CaughtUp says the projector had folded every record of the run's
	// partition that the log held when the question was asked, so a
	// missing or unstarted attempt is missing from the log too, not only
	// from the projector's state. False when wait passed first.
	CaughtUp bool
}

// WaitAttempt answers what the ledger knows of an attempt, with
// read-your-writes: it reads the end of the run's partition first, then
// waits (at most wait) until the projector has folded up to it, so an
// attempt.started acknowledged before the question is always seen
// (docs/design.md §15.4). An attempt found started answers at once: that
// answer holds whatever the projector has yet to fold.
func (p *Projector) WaitAttempt(ctx context.Context, run, attempt string, wait time.Duration) (AttemptAnswer, error) {
	var a AttemptAnswer
	var err error
	if a.View, a.Found, err = p.attempt(run, attempt); err != nil || a.View.Started {
		return a, err
	}
	topic := p.o.Kafka.FactsTopic()
	ends, err := kafkalog.EndOffsets(ctx, p.o.Kafka, topic)
	if err != nil {
		return a, fmt.Errorf("%w: %s: %w", ErrLogUnreachable, topic, err)
	}
	if len(ends) == 0 {
		return a, fmt.Errorf("projector: topic %s has no partitions", topic)
	}
	part := kafkalog.PartitionOf([]byte(run), len(ends))
	if !p.owns(part) {
		return a, fmt.Errorf("projector: run %s is in partition %d, which this projector does not fold", run, part)
	}
	end := ends[part]
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := p.progress.wait() // before the read, so no commit is missed
		next, err := p.Offset(part)
		if err != nil {
			return a, err
		}
		if next >= end {
			a.CaughtUp = true
			a.View, a.Found, err = p.attempt(run, attempt)
			return a, err
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-timer.C:
			a.View, a.Found, err = p.attempt(run, attempt)
			return a, err
		case <-changed:
		}
	}
}

// attempt reads an attempt of run from the committed state.
func (p *Projector) attempt(run, attempt string) (projections.AttemptView, bool, error) {
	return projections.ViewAttempt(stateStore(newWindow(p.db), run), attempt)
}

// owns reports whether this projector folds partition part.
func (p *Projector) owns(part int) bool {
	return p.o.Partitions == nil || slices.Contains(p.o.Partitions, part)
}
