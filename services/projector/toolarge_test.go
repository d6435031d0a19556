package projector_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// When Kafka refuses decisions as too large no retry can succeed: the
// projector stops with an error naming the limit to raise, instead of
// retrying forever while its partitions stand still, and commits nothing,
// so a restart once the limit is raised resumes where it stopped.
func TestDecisionTooLargeStopsTheProjector(t *testing.T) {
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// A decisions topic that takes no record worth a batch: created
			// before EnsureTopics, which keeps an existing topic as it is.
			cl := &kafka.Client{Addr: kafka.TCP(kc.Brokers...), Timeout: 30 * time.Second}
			resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
				Topic: kc.DecisionsTopic(), NumPartitions: 4, ReplicationFactor: 1,
				ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "256"}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			for name, err := range resp.Errors {
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
			}
			if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
				t.Fatal(err)
			}
			ingestRuns(t, kc, small("too-large", 5))
			p, err := projector.Open(projector.Options{Kafka: kc, Dir: filepath.Join(t.TempDir(), "projector")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = p.Run(ctx)
			if !errors.Is(err, projector.ErrDecisionTooLarge) {
				t.Fatalf("Run returned %v, want ErrDecisionTooLarge", err)
			}
			if !strings.Contains(err.Error(), "max.message.bytes of "+kc.DecisionsTopic()) {
				t.Errorf("the error does not say which setting to raise: %v", err)
			}
			ends, err := kafkalog.EndOffsets(ctx, kc, kc.DecisionsTopic())
			if err != nil {
				t.Fatal(err)
			}
			for part, end := range ends {
				if end != 0 {
					t.Errorf("decisions partition %d holds %d records; the refused window must leave none", part, end)
				}
			}
		})
	}
}
