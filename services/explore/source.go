package explore

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

// follower keeps one run's model current with the topics: each refresh
// reads what was appended to the run's partitions since the last.
type follower struct {
	kc  kafkalog.Config
	run string
	// used is when a request last asked for it (guarded by the
	// service's lock); reads counts its refreshes.
	used  time.Time
	reads *atomic.Int64

	mu        sync.Mutex
	m         *Model
	factsNext int64
	decNext   int64
	refreshed time.Time
}

// minRefresh bounds how often a follower asks Kafka for more: the views
// poll, and many readers of one run share each refresh.
const minRefresh = 300 * time.Millisecond

// current returns the model, first reading what the topics gained since
// the last refresh. The model is the caller's only while it holds f.mu:
// fn runs under it.
func (f *follower) current(ctx context.Context, now time.Time, fn func(*Model) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || now.Sub(f.refreshed) >= minRefresh {
		if err := f.refresh(ctx); err != nil {
			return err
		}
		f.refreshed = now
	}
	return fn(f.m)
}

func (f *follower) refresh(ctx context.Context) error {
	if f.m == nil {
		f.m = NewModel(f.run)
	}
	if f.reads != nil {
		f.reads.Add(1)
	}
	// Decisions' end first: every decision read then was caused by a fact
	// written before the facts' end, read next, so the model always has a
	// decision's fact before the decision.
	decPart, decEnd, err := partitionEnd(ctx, f.kc, f.kc.DecisionsTopic(), f.run)
	if err != nil {
		return err
	}
	factsPart, factsEnd, err := partitionEnd(ctx, f.kc, f.kc.FactsTopic(), f.run)
	if err != nil {
		return err
	}
	err = kafkalog.ReadPartition(ctx, f.kc, f.kc.FactsTopic(), factsPart, f.factsNext, factsEnd, func(msg kafkalog.Message) error {
		f.factsNext = msg.Offset + 1
		if !mayBeOf(msg.Value, f.run) {
			return nil
		}
		ev, err := events.Decode(msg.Value)
		if err != nil || ev.Run != f.run {
			return nil
		}
		f.m.Fact(int32(msg.Partition), msg.Offset, msg.Value, ev)
		f.m.Arrived(msg.Time)
		return nil
	})
	if err != nil {
		return err
	}
	return kafkalog.ReadPartition(ctx, f.kc, f.kc.DecisionsTopic(), decPart, f.decNext, decEnd, func(msg kafkalog.Message) error {
		f.decNext = msg.Offset + 1
		if !mayBeOf(msg.Value, f.run) {
			return nil
		}
		return f.m.Decision(msg.Value)
	})
}

// mayBeOf is false for a canonical record that names another run, which
// need not be decoded.
func mayBeOf(value []byte, run string) bool {
	const head = len(`{"id":"`) + 36
	const mid = `","run":"`
	if len(value) < head+len(mid) || !bytes.HasPrefix(value, []byte(`{"id":"`)) || string(value[head:head+len(mid)]) != mid {
		return true
	}
	rest := value[head+len(mid):]
	return bytes.HasPrefix(rest, []byte(run+`"`))
}

func partitionEnd(ctx context.Context, kc kafkalog.Config, topic, run string) (int, int64, error) {
	ends, err := kafkalog.EndOffsets(ctx, kc, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("explore: %s: %w", topic, err)
	}
	if len(ends) == 0 {
		return 0, 0, fmt.Errorf("explore: topic %s has no partitions", topic)
	}
	p := kafkalog.PartitionOf([]byte(run), len(ends))
	return p, ends[p], nil
}

// kafkaLog reads facts back from the facts topic by position, a few
// fetches for all the turns of a view (kafkalog.Fetcher), and keeps the
// records it read in a cache of at most logCacheBytes, the least recently
// used dropped first: facts never change, and an attempt's page asks for
// its view again every two seconds while it is open.
type kafkaLog struct {
	fetch func(ctx context.Context, tp kafkalog.TopicPartition, offsets []int64) ([][]byte, error)
	topic string
	max   int

	mu    sync.Mutex
	bytes int
	lru   *list.List // of *logEntry, most recently used first
	at    map[projections.FactPosition]*list.Element
}

type logEntry struct {
	pos   projections.FactPosition
	value []byte
}

// logCacheBytes bounds the records a service keeps read back from the
// facts log: some hundreds of attempts' turns with their token arrays.
const logCacheBytes = 64 << 20

func newKafkaLog(f *kafkalog.Fetcher, topic string, max int) *kafkaLog {
	return &kafkaLog{fetch: f.ValuesAt, topic: topic, max: max, lru: list.New(), at: map[projections.FactPosition]*list.Element{}}
}

func (k *kafkaLog) Records(ctx context.Context, at []projections.FactPosition) ([][]byte, error) {
	out := make([][]byte, len(at))
	byPart := map[int32][]int{}
	k.mu.Lock()
	for i, p := range at {
		p.Seq = 0 // a record is its partition and offset
		if e, ok := k.at[p]; ok {
			k.lru.MoveToFront(e)
			out[i] = e.Value.(*logEntry).value
			continue
		}
		byPart[p.Partition] = append(byPart[p.Partition], i)
	}
	k.mu.Unlock()
	for part, idx := range byPart {
		offsets := make([]int64, len(idx))
		for j, i := range idx {
			offsets[j] = at[i].Offset
		}
		values, err := k.fetch(ctx, kafkalog.TopicPartition{Topic: k.topic, Partition: int(part)}, offsets)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			out[i] = values[j]
			if values[j] != nil {
				k.keep(projections.FactPosition{Partition: part, Offset: offsets[j]}, values[j])
			}
		}
	}
	return out, nil
}

// keep caches value as the record at p, dropping the least recently used
// past the cache's bound.
func (k *kafkaLog) keep(p projections.FactPosition, value []byte) {
	if len(value) > k.max {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.at[p]; ok {
		return
	}
	k.at[p] = k.lru.PushFront(&logEntry{pos: p, value: value})
	k.bytes += len(value)
	for k.bytes > k.max {
		e := k.lru.Back()
		le := e.Value.(*logEntry)
		k.lru.Remove(e)
		delete(k.at, le.pos)
		k.bytes -= len(le.value)
	}
}
