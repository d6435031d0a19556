package telemetry

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Lag tracks how far one consumer's committed offsets are behind the end
// of the log, per partition: the rolloutledger_consumer_lag gauge. The end
// comes from the high watermark of the records the consumer reads and from
// [Lag.Poll], so the lag of a consumer that reads nothing still grows.
type Lag struct {
	consumer string
	mu       sync.Mutex
	parts    map[lagKey]*lagPoint
}

type lagKey struct {
	topic     string
	partition int
}

type lagPoint struct {
	next, end       int64
	hasNext, hasEnd bool
	attrs           attribute.Set
}

// lagSet is every consumer's Lag in a process, observed by one callback.
type lagSet struct {
	mu   sync.Mutex
	lags map[string]*Lag
}

func newLagSet() *lagSet { return &lagSet{lags: map[string]*Lag{}} }

// ConsumerLag returns the lag tracker of a consumer (projector, pgsink);
// the same one for every call with the same name.
func (t *Telemetry) ConsumerLag(consumer string) *Lag {
	s := t.lags
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lags[consumer]
	if l == nil {
		l = &Lag{consumer: consumer, parts: map[lagKey]*lagPoint{}}
		s.lags[consumer] = l
	}
	return l
}

func (s *lagSet) observe(_ context.Context, o metric.Int64Observer) error {
	s.mu.Lock()
	lags := make([]*Lag, 0, len(s.lags))
	for _, l := range s.lags {
		lags = append(lags, l)
	}
	s.mu.Unlock()
	for _, l := range lags {
		l.mu.Lock()
		for _, p := range l.parts {
			if p.hasNext && p.hasEnd {
				o.Observe(max(p.end-p.next, 0), metric.WithAttributeSet(p.attrs))
			}
		}
		l.mu.Unlock()
	}
	return nil
}

func (l *Lag) point(topic string, partition int) *lagPoint {
	k := lagKey{topic, partition}
	p := l.parts[k]
	if p == nil {
		p = &lagPoint{attrs: attribute.NewSet(
			attribute.String("consumer", l.consumer),
			attribute.String("topic", topic),
			attribute.String("partition", strconv.Itoa(partition)),
		)}
		l.parts[k] = p
	}
	return p
}

// Committed records the next offset the consumer will read from a
// partition, as stored with its state.
func (l *Lag) Committed(topic string, partition int, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.point(topic, partition)
	p.next, p.hasNext = next, true
}

// Seen records a high watermark read with a record: the log end is at
// least there.
func (l *Lag) Seen(topic string, partition int, highWatermark int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.point(topic, partition)
	if !p.hasEnd || highWatermark > p.end {
		p.end, p.hasEnd = highWatermark, true
	}
}

// Ends records the log end of partitions as Kafka reported it.
func (l *Lag) Ends(topic string, ends map[int]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for part, end := range ends {
		p := l.point(topic, part)
		p.end, p.hasEnd = end, true
	}
}

// Poll asks ends for the log end of the consumer's topics every interval
// until ctx ends, starting at once. Failures are left to the next poll:
// the consumer itself reports Kafka being unreachable.
func (l *Lag) Poll(ctx context.Context, interval time.Duration, ends func(context.Context) (map[string]map[int]int64, error)) {
	for {
		qctx, cancel := context.WithTimeout(ctx, interval)
		got, err := ends(qctx)
		cancel()
		if err == nil {
			for topic, e := range got {
				l.Ends(topic, e)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
