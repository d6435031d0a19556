package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// KafkaSource reads a run from the ledger's topics: its facts from the
// partition of the facts topic its id maps to (the Murmur2 partitioner
// every producer of the ledger uses), its decisions likewise from the
// decisions topic. It reads what had been written when it was opened, so
// two passes over it see the same history.
//
// It folds what the projector folds: the records of the partition that
// decode to an event of the run. A record that does not decode is skipped
// as the projector skips it; those keyed with the run are listed by
// [KafkaSource.Skipped] after a pass over the facts.
type KafkaSource struct {
	kc  kafkalog.Config
	run string
	// part and end are each topic's partition of the run and the end
	// offset read to.
	factsPart, decisionsPart int
	factsEnd, decisionsEnd   int64
	skipped                  []Skipped
}

// Skipped is a record of the run's partition that was not folded.
type Skipped struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reason    string `json:"reason"`
}

// OpenKafka opens run's history in the topics kc names.
func OpenKafka(ctx context.Context, kc kafkalog.Config, run string) (*KafkaSource, error) {
	if !events.ValidRunID(run) {
		return nil, fmt.Errorf("replay: %q is not a run id", run)
	}
	if err := kc.Validate(); err != nil {
		return nil, err
	}
	s := &KafkaSource{kc: kc, run: run}
	// Decisions first: the projector records a decision only after it read
	// the fact that caused it, so every decision read was caused by a fact
	// written before the facts' end offset, read next.
	var err error
	if s.decisionsPart, s.decisionsEnd, err = runPartition(ctx, kc, kc.DecisionsTopic(), run); err != nil {
		return nil, err
	}
	if s.factsPart, s.factsEnd, err = runPartition(ctx, kc, kc.FactsTopic(), run); err != nil {
		return nil, err
	}
	return s, nil
}

// runPartition is the partition of topic that run's records go to, and its
// end offset now.
func runPartition(ctx context.Context, kc kafkalog.Config, topic, run string) (int, int64, error) {
	ends, err := kafkalog.EndOffsets(ctx, kc, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("replay: %s: %w", topic, err)
	}
	if len(ends) == 0 {
		return 0, 0, fmt.Errorf("replay: topic %s has no partitions", topic)
	}
	p := kafkalog.PartitionOf([]byte(run), len(ends))
	return p, ends[p], nil
}

// Run is the run the source reads.
func (s *KafkaSource) Run() string { return s.run }

// FactsBound is the end offset of the run's partition: the run's facts are
// some of the records before it ([FactsBounder]).
func (s *KafkaSource) FactsBound() uint64 { return uint64(max(s.factsEnd, 0)) }

// Describe names the partitions read and up to which offsets.
func (s *KafkaSource) Describe() string {
	return fmt.Sprintf("kafka %s (%s/%d up to offset %d, %s/%d up to %d)", strings.Join(s.kc.Brokers, ","),
		s.kc.FactsTopic(), s.factsPart, s.factsEnd, s.kc.DecisionsTopic(), s.decisionsPart, s.decisionsEnd)
}

// FactsPartition is the facts topic's partition of the run and the offset
// the source reads up to.
func (s *KafkaSource) FactsPartition() (partition int, end int64) { return s.factsPart, s.factsEnd }

// Skipped lists the undecodable records keyed with the run that the last
// pass over the facts skipped.
func (s *KafkaSource) Skipped() []Skipped { return s.skipped }

// Facts reads the run's facts, decoded. Records of other runs sharing the
// partition are passed over without decoding where their canonical form
// names the run; the others are decoded (on every core, ahead of fn), as
// the projector decodes them.
func (s *KafkaSource) Facts(ctx context.Context, fn func(Fact) error) error {
	s.skipped = nil
	var seq uint64
	return decoded(ctx, func(ctx context.Context, emit func(Fact) error) error {
		return kafkalog.ReadPartition(ctx, s.kc, s.kc.FactsTopic(), s.factsPart, 0, s.factsEnd, func(m kafkalog.Message) error {
			if r, ok := quickRun(m.Value); ok && string(r) != s.run {
				return nil
			}
			return emit(Fact{Partition: int32(m.Partition), Offset: m.Offset, Value: m.Value, keyed: string(m.Key) == s.run})
		})
	}, func(f Fact) error {
		if f.Event.Type == "" {
			if f.keyed {
				_, err := events.Decode(f.Value)
				s.skipped = append(s.skipped, Skipped{Partition: f.Partition, Offset: f.Offset, Reason: err.Error()})
			}
			return nil
		}
		if f.Event.Run != s.run {
			return nil
		}
		seq++
		f.Seq, f.keyed = seq, false
		return fn(f)
	})
}

func (s *KafkaSource) decodesFacts() {}

// rawFacts is Facts without decoding: every record whose canonical form
// names the run counts (others are decoded to learn their run). A record
// that names the run but would not decode is counted here and skipped by
// the projector, so rawFacts serves only passes whose result is checked
// against a recorded root — proofs — at the cost of reading, not decoding.
func (s *KafkaSource) rawFacts(ctx context.Context, fn func(Fact) error) error {
	var seq uint64
	return kafkalog.ReadPartition(ctx, s.kc, s.kc.FactsTopic(), s.factsPart, 0, s.factsEnd, func(m kafkalog.Message) error {
		f := Fact{Partition: int32(m.Partition), Offset: m.Offset, Value: m.Value}
		if r, ok := quickRun(m.Value); ok {
			if string(r) != s.run {
				return nil
			}
		} else {
			ev, err := events.Decode(m.Value)
			if err != nil || ev.Run != s.run {
				return nil
			}
			f.Event = ev
		}
		seq++
		f.Seq = seq
		return fn(f)
	})
}

// rawSource is a Source that can read its facts without decoding them.
type rawSource interface {
	rawFacts(ctx context.Context, fn func(Fact) error) error
}

// rawFactsOf reads src's facts as cheaply as it can (see rawFacts).
func rawFactsOf(ctx context.Context, src Source, fn func(Fact) error) error {
	if r, ok := src.(rawSource); ok {
		return r.rawFacts(ctx, fn)
	}
	return src.Facts(ctx, fn)
}

// Decisions reads the decisions recorded about the run.
func (s *KafkaSource) Decisions(ctx context.Context, fn func(Recorded) error) error {
	return kafkalog.ReadPartition(ctx, s.kc, s.kc.DecisionsTopic(), s.decisionsPart, 0, s.decisionsEnd, func(m kafkalog.Message) error {
		r, ok := quickRun(m.Value)
		if !ok {
			var env struct{ Run string }
			if json.Unmarshal(m.Value, &env) != nil {
				return nil
			}
			r = []byte(env.Run)
		}
		if string(r) != s.run {
			return nil
		}
		return fn(Recorded{Partition: int32(m.Partition), Offset: m.Offset, Value: m.Value})
	})
}
