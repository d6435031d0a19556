package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// Fetcher reads records at offsets already known, a few at a time, over
// one client's pooled connections: the run explorer's reads of the token
// arrays its records leave in the facts log. Unlike [ReadAt] it opens no
// connection per record. It is safe for concurrent use; Close it when
// done.
type Fetcher struct {
	cl *kafka.Client
	// closer closes the transport's idle connections, when it has its own.
	closer interface{ CloseIdleConnections() }
}

// fetchAtBytes is what one fetch asks the broker for: the record batch that
// holds the offset asked and what follows it, so that offsets close
// together are answered by one fetch. The broker returns a first batch
// larger than this whole.
const fetchAtBytes = 64 << 10

// fetchesInFlight bounds the fetches one call of [Fetcher.ValuesAt] has
// outstanding.
const fetchesInFlight = 8

// NewFetcher returns a fetcher over c's brokers.
func NewFetcher(c Config) *Fetcher {
	cl := c.client(15 * time.Second)
	f := &Fetcher{cl: cl}
	if t, ok := cl.Transport.(*kafka.Transport); ok && t != kafka.DefaultTransport {
		f.closer = t
	}
	return f
}

// Close releases the fetcher's connections.
func (f *Fetcher) Close() {
	if f.closer != nil {
		f.closer.CloseIdleConnections()
	}
}

// ValuesAt returns the value of the record at each of offsets in tp, in
// the order asked. A value is nil where the log no longer holds the record
// (retention removed it) or does not hold it yet.
func (f *Fetcher) ValuesAt(ctx context.Context, tp TopicPartition, offsets []int64) ([][]byte, error) {
	wanted := slices.Clone(offsets)
	slices.Sort(wanted)
	wanted = slices.Compact(wanted)
	var (
		mu    sync.Mutex
		found = make(map[int64][]byte, len(wanted))
	)
	// Contiguous runs of the sorted offsets go to the workers; each fetches
	// its run's first offset not yet found and keeps every wanted record
	// the answer holds.
	chunk := max(1, (len(wanted)+fetchesInFlight-1)/fetchesInFlight)
	errs := make(chan error, fetchesInFlight)
	n := 0
	for from := 0; from < len(wanted); from += chunk {
		part := wanted[from:min(len(wanted), from+chunk)]
		n++
		go func() {
			errs <- f.fetchRun(ctx, tp, part, func(off int64, v []byte) {
				mu.Lock()
				found[off] = v
				mu.Unlock()
			})
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	out := make([][]byte, len(offsets))
	for i, off := range offsets {
		out[i] = found[off]
	}
	return out, nil
}

// fetchRun finds each of the sorted offsets of tp, calling keep with each
// record found.
func (f *Fetcher) fetchRun(ctx context.Context, tp TopicPartition, offsets []int64, keep func(int64, []byte)) error {
	for i := 0; i < len(offsets); {
		res, err := f.cl.Fetch(ctx, &kafka.FetchRequest{Topic: tp.Topic, Partition: tp.Partition, Offset: offsets[i],
			MinBytes: 1, MaxBytes: fetchAtBytes, MaxWait: 100 * time.Millisecond})
		if err != nil {
			return fmt.Errorf("kafkalog: fetch %s/%d at %d: %w", tp.Topic, tp.Partition, offsets[i], err)
		}
		if res.Error != nil {
			if errors.Is(res.Error, kafka.OffsetOutOfRange) {
				i++ // not held: left nil
				continue
			}
			return fmt.Errorf("kafkalog: fetch %s/%d at %d: %w", tp.Topic, tp.Partition, offsets[i], res.Error)
		}
		next := i
		for {
			r, err := res.Records.ReadRecord()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					return fmt.Errorf("kafkalog: fetch %s/%d at %d: %w", tp.Topic, tp.Partition, offsets[i], err)
				}
				break
			}
			for next < len(offsets) && offsets[next] < r.Offset {
				next++ // compacted away or skipped: not held
			}
			if next == len(offsets) {
				break
			}
			if offsets[next] == r.Offset {
				var v []byte
				if r.Value != nil {
					if v, err = io.ReadAll(r.Value); err != nil {
						return fmt.Errorf("kafkalog: fetch %s/%d at %d: %w", tp.Topic, tp.Partition, r.Offset, err)
					}
				}
				keep(r.Offset, v)
				next++
			}
		}
		if next == i {
			// Nothing at or past the offset asked: the log does not hold
			// it yet (or holds only a gap there).
			next = i + 1
		}
		i = next
	}
	return nil
}
