package kafkalog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Config says where Kafka is and how the ledger's topics are laid out. Its
// zero value (plus Brokers) means the documented defaults.
type Config struct {
	// Brokers are bootstrap addresses, host:port.
	Brokers []string
	// TopicPrefix names the topics <prefix>.facts and <prefix>.decisions;
	// default "rl".
	TopicPrefix string
	// Partitions of each topic when it is created; default 12.
	Partitions int
	// ReplicationFactor when a topic is created; 0 means min(3, brokers in
	// the cluster).
	ReplicationFactor int
	// MinInsyncReplicas for created topics; 0 means 2 when replicated at
	// least three times, else 1.
	MinInsyncReplicas int
	// TLS, when set, encrypts every connection to the brokers (see
	// [Security] for building it from files).
	TLS *tls.Config
	// SASL, when set, authenticates every connection (SCRAM, see
	// [NewSCRAM]).
	SASL sasl.Mechanism
}

// DefaultTopicPrefix is the prefix of the ledger's topics unless configured.
const DefaultTopicPrefix = "rl"

// MaxMessageBytes is the max.message.bytes of the ledger's topics: room for a
// batch holding several maximal (1 MiB) facts, and for the batch.sealed
// decision of a large batch, whose manifest grows by ~17 KB per group (a
// 256-group batch is ~4.3 MB). Topics created before keep their own limit;
// raise it with kafka-configs --alter if their batches outgrow it.
const MaxMessageBytes = 16 << 20

func (c Config) prefix() string {
	if c.TopicPrefix == "" {
		return DefaultTopicPrefix
	}
	return c.TopicPrefix
}

// FactsTopic is the topic of facts from the outside world.
func (c Config) FactsTopic() string { return c.prefix() + ".facts" }

// DecisionsTopic is the topic the projector writes its decisions to.
func (c Config) DecisionsTopic() string { return c.prefix() + ".decisions" }

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafkalog: no brokers configured"))
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("kafkalog: broker %q is not host:port", b))
		}
	}
	if c.Partitions < 0 || c.ReplicationFactor < 0 || c.MinInsyncReplicas < 0 {
		errs = append(errs, errors.New("kafkalog: partitions, replication factor and min ISR must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) client(timeout time.Duration) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.Brokers...), Transport: c.Transport(), Timeout: timeout}
}

// EnsureTopics creates the facts and decisions topics if they are missing,
// with infinite retention, and reports the partition count each has. It
// leaves existing topics alone: changing the partitions of a live ledger
// would move runs between partitions.
func EnsureTopics(ctx context.Context, c Config) (map[string]int, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cl := c.client(30 * time.Second)
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("kafkalog: metadata from %v: %w", c.Brokers, err)
	}
	rf := c.ReplicationFactor
	if rf == 0 {
		rf = min(3, len(meta.Brokers))
	}
	minISR := c.MinInsyncReplicas
	if minISR == 0 {
		minISR = 1
		if rf >= 3 {
			minISR = 2
		}
	}
	partitions := c.Partitions
	if partitions == 0 {
		partitions = 12
	}
	existing := map[string]int{}
	for _, t := range meta.Topics {
		if t.Error == nil {
			existing[t.Name] = len(t.Partitions)
		}
	}
	var create []kafka.TopicConfig
	for _, name := range []string{c.FactsTopic(), c.DecisionsTopic()} {
		if _, ok := existing[name]; ok {
			continue
		}
		create = append(create, kafka.TopicConfig{
			Topic:             name,
			NumPartitions:     partitions,
			ReplicationFactor: rf,
			ConfigEntries: []kafka.ConfigEntry{
				{ConfigName: "retention.ms", ConfigValue: "-1"},
				{ConfigName: "retention.bytes", ConfigValue: "-1"},
				{ConfigName: "min.insync.replicas", ConfigValue: strconv.Itoa(minISR)},
				{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(MaxMessageBytes)},
				{ConfigName: "cleanup.policy", ConfigValue: "delete"},
			},
		})
	}
	if len(create) > 0 {
		resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: create})
		if err != nil {
			return nil, fmt.Errorf("kafkalog: create topics: %w", err)
		}
		for name, terr := range resp.Errors {
			if terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
				return nil, fmt.Errorf("kafkalog: create topic %s: %w", name, terr)
			}
		}
	}
	// Wait until both topics have leaders for every partition, so the
	// first write does not race topic creation.
	deadline := time.Now().Add(30 * time.Second)
	for {
		counts, err := readyPartitions(ctx, cl, c.FactsTopic(), c.DecisionsTopic())
		if err == nil {
			// Leaders in the metadata are not yet leaders that answer:
			// the topics are ready once their offsets can be listed.
			if _, err = EndOffsets(ctx, c, c.FactsTopic()); err == nil {
				if _, err = EndOffsets(ctx, c, c.DecisionsTopic()); err == nil {
					return counts, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kafkalog: topics not ready: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readyPartitions(ctx context.Context, cl *kafka.Client, topics ...string) (map[string]int, error) {
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, t := range meta.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("%s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				return nil, fmt.Errorf("%s/%d has no leader", t.Name, p.ID)
			}
		}
		if len(t.Partitions) == 0 {
			return nil, fmt.Errorf("%s has no partitions", t.Name)
		}
		counts[t.Name] = len(t.Partitions)
	}
	for _, name := range topics {
		if _, ok := counts[name]; !ok {
			return nil, fmt.Errorf("%s missing", name)
		}
	}
	return counts, nil
}

// EndOffsets returns the next offset of every partition of topic: what a
// consumer reading from the start must reach to have read everything
// written so far. Temporary errors (a leader moving, a topic just created)
// are retried for a few seconds.
func EndOffsets(ctx context.Context, c Config, topic string) (map[int]int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := endOffsets(ctx, c, topic)
		var kerr kafka.Error
		if err == nil || !errors.As(err, &kerr) || !kerr.Temporary() || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func endOffsets(ctx context.Context, c Config, topic string) (map[int]int64, error) {
	cl := c.client(30 * time.Second)
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("kafkalog: metadata: %w", err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range meta.Topics {
		if t.Error != nil {
			return nil, fmt.Errorf("kafkalog: topic %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		}
	}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("kafkalog: list offsets: %w", err)
	}
	out := map[int]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafkalog: offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out, nil
}

// Metadata is what a broker reports of the cluster.
type Metadata struct {
	// Brokers are the ids of the brokers in the cluster.
	Brokers []int
	// Partitions are the partitions of the topics asked about.
	Partitions []PartitionMetadata
}

// PartitionMetadata is one partition as the cluster reports it.
type PartitionMetadata struct {
	Topic     string
	Partition int
	// Leader is the id of the leading broker.
	Leader int
	// Replicas and InSync are broker ids: every replica, and those in sync.
	Replicas, InSync []int
	// Err is the error the broker reported for the partition.
	Err error
}

// ReadMetadata asks the brokers of c for the cluster's brokers and the
// partitions of topics (none: no partitions).
func ReadMetadata(ctx context.Context, c Config, topics ...string) (Metadata, error) {
	meta, err := c.client(30*time.Second).Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return Metadata{}, fmt.Errorf("kafkalog: metadata from %v: %w", c.Brokers, err)
	}
	var out Metadata
	for _, b := range meta.Brokers {
		out.Brokers = append(out.Brokers, b.ID)
	}
	ids := func(bs []kafka.Broker) []int {
		out := make([]int, len(bs))
		for i, b := range bs {
			out[i] = b.ID
		}
		return out
	}
	for _, t := range meta.Topics {
		if len(topics) == 0 {
			break
		}
		if t.Error != nil {
			out.Partitions = append(out.Partitions, PartitionMetadata{Topic: t.Name, Partition: -1, Err: t.Error})
			continue
		}
		for _, p := range t.Partitions {
			out.Partitions = append(out.Partitions, PartitionMetadata{Topic: t.Name, Partition: p.ID, Leader: p.Leader.ID,
				Replicas: ids(p.Replicas), InSync: ids(p.Isr), Err: p.Error})
		}
	}
	return out, nil
}

// DeleteTopics deletes topics; for tools that clean up after themselves.
func DeleteTopics(ctx context.Context, c Config, topics ...string) error {
	resp, err := c.client(20*time.Second).DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
	if err != nil {
		return fmt.Errorf("kafkalog: delete topics: %w", err)
	}
	for name, terr := range resp.Errors {
		if terr != nil {
			return fmt.Errorf("kafkalog: delete topic %s: %w", name, terr)
		}
	}
	return nil
}
