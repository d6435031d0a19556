package replay

import (
	"context"
	"runtime"
	"sync"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// Decoding a fact costs about as much as folding it, and the fold is
// sequential; so a pass decodes ahead, on the other cores, in batches, and
// hands the facts to the fold in their order. The workers also take the
// fact's two digests (projections.HashValue), once: the fold's duplicate
// check, its fact tree and the history check all use those, so the fold's
// goroutine hashes no fact.

const (
	decodeBatch      = 256     // facts per batch
	decodeBatchBytes = 4 << 20 // or fewer, when facts are large
)

type decodeJob struct {
	facts []Fact
	done  chan struct{}
}

// decoded calls fn with every fact produce emits, in order, with Event set
// wherever the value decodes (facts that arrive decoded are left alone; a
// value that does not decode keeps a zero Event). An error from fn stops
// produce and is returned.
func decoded(ctx context.Context, produce func(ctx context.Context, emit func(Fact) error) error, fn func(Fact) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan *decodeJob, workers)
	order := make(chan *decodeJob, 2*workers+2)
	// free holds the batches' slices the fold is done with, for the next
	// batches: a batch's facts are a few hundred bytes each, and fresh
	// slices were most of the bytes a replay allocates.
	free := make(chan []Fact, cap(order)+workers+2)
	newJob := func() *decodeJob {
		select {
		case facts := <-free:
			return &decodeJob{facts: facts, done: make(chan struct{})}
		default:
			return &decodeJob{facts: make([]Fact, 0, decodeBatch), done: make(chan struct{})}
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				for i := range j.facts {
					f := &j.facts[i]
					if f.Event.Type == "" {
						if ev, err := events.Decode(f.Value); err == nil {
							f.Event = ev
						}
					}
					if len(f.Value) > 0 {
						f.digests = projections.HashValue(f.Value)
					}
				}
				close(j.done)
			}
		})
	}
	var produced error
	go func() {
		defer close(order)
		defer close(jobs)
		job, size := newJob(), 0
		flush := func() error {
			if len(job.facts) == 0 {
				return nil
			}
			for _, ch := range []chan *decodeJob{jobs, order} {
				select {
				case ch <- job:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			job, size = newJob(), 0
			return nil
		}
		produced = produce(ctx, func(f Fact) error {
			job.facts = append(job.facts, f)
			if size += len(f.Value); len(job.facts) == decodeBatch || size >= decodeBatchBytes {
				return flush()
			}
			return nil
		})
		if produced == nil {
			produced = flush()
		}
	}()
	var err error
	for j := range order {
		<-j.done
		for _, f := range j.facts {
			if err != nil {
				break
			}
			if err = fn(f); err != nil {
				cancel(err)
			}
		}
		// fn was given copies: nothing refers to the slice now. Cleared,
		// it holds no fact's value or data alive.
		clear(j.facts)
		select {
		case free <- j.facts[:0]:
		default:
		}
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return produced
}

// predecoded marks a Source whose facts arrive decoded.
type predecoded interface{ decodesFacts() }

// factsOf is src.Facts with every fact decoded, ahead of fn.
func factsOf(ctx context.Context, src Source, fn func(Fact) error) error {
	if _, ok := src.(predecoded); ok {
		return src.Facts(ctx, fn)
	}
	return decoded(ctx, src.Facts, fn)
}
