package kafkalog_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// PartitionOf agrees with franz-go's StickyKeyPartitioner (the Java
// client's murmur2 for keyed records) and with kafka-go's Murmur2Balancer,
// which the writer used before it called PartitionOf, for keys of every
// length and every partition count the ledger uses: a run's facts written
// by any client land where the ledger reads them.
func TestPartitionOfIsJavaCompatible(t *testing.T) {
	franz := kgo.StickyKeyPartitioner(nil).ForTopic("facts")
	segment := &kafka.Murmur2Balancer{Consistent: true}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := [][]byte{{}, []byte("a"), []byte("ab"), []byte("abc"), []byte("abcd"), []byte("run-a"), []byte("flash-7919-r1")}
	for i := range 500 {
		k := make([]byte, rng.IntN(40))
		for j := range k {
			k[j] = byte(rng.IntN(256))
		}
		keys = append(keys, k, fmt.Appendf(nil, "run-%d", i))
	}
	for _, n := range []int{1, 2, 3, 4, 7, 12, 64} {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		for _, k := range keys {
			got := kafkalog.PartitionOf(k, n)
			if want := franz.Partition(&kgo.Record{Key: k}, n); got != want {
				t.Errorf("PartitionOf(%q, %d) = %d, franz-go's partitioner %d", k, n, got, want)
			}
			if want := segment.Balance(kafka.Message{Key: k}, parts...); got != want {
				t.Errorf("PartitionOf(%q, %d) = %d, kafka-go's Murmur2Balancer %d", k, n, got, want)
			}
		}
	}
}
