package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"

	"github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// decisionInfo is what replay reads of a recorded decision's envelope.
type decisionInfo struct {
	ID          string
	Type        events.Type
	RuleVersion int
	Fact        projections.FactPosition
	// Seq is known from the value for batches (data.seq) and checkpoints
	// (their fact); 0 for other kinds.
	Seq uint64
	// Head is the tree head a batch or checkpoint carries.
	Head *projections.TreeHead
	// Config is the effective configuration a batch recorded.
	Config *events.Config
	// Sum is the SHA-256 of the recorded value (set by parsedDecisions).
	Sum [sha256.Size]byte
}

// parseRecorded reads a decision's envelope. A batch's record holds its
// whole manifest (megabytes at a large batch): it is read once, its data
// left in place (segmentio's decoder, DontCopyRawMessage), and only a
// batch's or checkpoint's data is read again, for its seq, head and config.
func parseRecorded(r Recorded) (decisionInfo, error) {
	var env struct {
		ID          string                   `json:"id"`
		Type        events.Type              `json:"type"`
		RuleVersion int                      `json:"rule_version"`
		Fact        projections.FactPosition `json:"fact"`
		Data        json.RawMessage          `json:"data"`
	}
	rest, err := json.Parse(r.Value, &env, json.DontCopyRawMessage)
	if err == nil && len(bytes.TrimSpace(rest)) > 0 {
		err = fmt.Errorf("%d bytes after the decision's value", len(rest))
	}
	if err != nil {
		return decisionInfo{}, fmt.Errorf("decision at %d/%d: %w", r.Partition, r.Offset, err)
	}
	if env.ID == "" || env.Type == "" {
		return decisionInfo{}, fmt.Errorf("decision at %d/%d has no id or type", r.Partition, r.Offset)
	}
	d := decisionInfo{ID: env.ID, Type: env.Type, RuleVersion: env.RuleVersion, Fact: env.Fact}
	switch env.Type {
	case projections.KindBatchSealed, projections.KindAuditCheckpoint:
		var data struct {
			Seq    uint64                `json:"seq"`
			Tree   *projections.TreeHead `json:"tree"`
			Config *events.Config        `json:"config"`
		}
		if err := json.Unmarshal(env.Data, &data); err != nil {
			return d, fmt.Errorf("decision %s: %w", env.ID, err)
		}
		d.Seq, d.Head, d.Config = data.Seq, data.Tree, data.Config
		if env.Type == projections.KindAuditCheckpoint {
			d.Seq = env.Fact.Seq / projections.CheckpointInterval
		}
	}
	return d, nil
}

// parsedDecisions calls fn with every decision src recorded, in the order
// recorded, its envelope parsed (parseRecorded, whose error fn is given)
// and its value hashed ahead of fn on every core. A run's batches record
// their whole manifests, hundreds of kilobytes each: read on one core,
// before the fold can start, they took a twentieth of a replay's time.
// An error from fn stops the reading and is returned.
func parsedDecisions(ctx context.Context, src Source, fn func(Recorded, decisionInfo, error) error) error {
	type job struct {
		r    Recorded
		d    decisionInfo
		err  error
		done chan struct{}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan *job, workers)
	order := make(chan *job, 2*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				j.d, j.err = parseRecorded(j.r)
				j.d.Sum = sha256.Sum256(j.r.Value)
				close(j.done)
			}
		})
	}
	var produced error
	go func() {
		defer close(order)
		defer close(jobs)
		// A source's values are fresh (Source.Decisions), so they may be
		// parsed after its callback returned.
		produced = src.Decisions(ctx, func(r Recorded) error {
			j := &job{r: r, done: make(chan struct{})}
			for _, ch := range []chan *job{jobs, order} {
				select {
				case ch <- j:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			return nil
		})
	}()
	var err error
	for j := range order {
		<-j.done
		if err == nil {
			if err = fn(j.r, j.d, j.err); err != nil {
				cancel(err)
			}
		}
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return produced
}
