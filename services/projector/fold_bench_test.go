package projector

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// BenchmarkFoldWindows is the projector's own fold path without Kafka: a
// simulated run folded window by window into Pebble, each window one
// batch committed as the service commits it (synced), with the run
// explorer's records. Compare with BenchmarkFold in projections/, the same
// fold into memory. The tokens shape carries what a real run's turns do:
// token ids, log-probs and text.
//
//	go test -run='^$' -bench=FoldWindows -benchtime=3x ./services/projector/
func BenchmarkFoldWindows(b *testing.B) {
	for _, shape := range []struct {
		name         string
		tokens, text bool
	}{{"no-tokens", false, false}, {"tokens", true, true}} {
		plan, err := simulate.Generate(simulate.Options{Seed: 5, Tasks: 48, Steps: 8, BatchGroups: 16, Tokens: shape.tokens, Text: shape.text}, "fold-run")
		if err != nil {
			b.Fatal(err)
		}
		var msgs []kafkalog.Message
		for i, ev := range plan.All() {
			v, err := events.Encode(ev)
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, kafkalog.Message{Value: v, Offset: int64(i)})
		}
		for _, window := range []int{100, 2000} {
			benchFoldWindows(b, shape.name, window, msgs)
		}
	}
}

func benchFoldWindows(b *testing.B, shape string, window int, msgs []kafkalog.Message) {
	{
		b.Run(fmt.Sprintf("%s/window-%d", shape, window), func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				db, err := pebble.Open(b.TempDir(), pebbleOptions(slog.New(slog.DiscardHandler), "bench"))
				if err != nil {
					b.Fatal(err)
				}
				p := &Projector{o: Options{Kafka: kafkalog.Config{}}, db: db, log: slog.New(slog.DiscardHandler)}
				folds := newRunFolds()
				for lo := 0; lo < len(msgs); lo += window {
					// foldWindow without the emit: fold, offset, synced commit.
					batch := p.db.NewBatch()
					w := msgs[lo:min(lo+window, len(msgs))]
					if _, _, err := p.foldInto(batch, folds, w); err != nil {
						b.Fatal(err)
					}
					if err := batch.Set(offsetKey("facts", 0), binary.BigEndian.AppendUint64(nil, uint64(w[len(w)-1].Offset+1)), nil); err != nil {
						b.Fatal(err)
					}
					if err := batch.Commit(pebble.Sync); err != nil {
						b.Fatal(err)
					}
					batch.Close()
				}
				db.Close()
				n += len(msgs)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "facts/s")
		})
	}
}
