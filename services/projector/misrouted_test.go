package projector_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// onePartition sends every message to one partition: a producer whose
// partitioner is not the ledger's.
type onePartition int

func (p onePartition) Balance(_ kafka.Message, _ ...int) int { return int(p) }

// A fact of a run written to a partition the run does not map to (a
// producer with another partitioner) is not folded: the projector reports
// it as a misrouted finding named by its position, and decides everything
// else as if it had never been written. Later, the facts topic grows by two
// partitions, and the projector refuses to start on its state, naming both
// counts.
func TestMisroutedFactsAndPartitionCount(t *testing.T) {
	kc := testenv.RealKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	n := len(ends)
	const run = "misrouted"
	ingestRuns(t, kc, small(run, 9))

	// A second registration of one of the run's tasks: folded, it would be
	// a duplicate_entity finding.
	task := ""
	for _, rec := range ledgertest.Facts(t, kc)[run] {
		if d, ok := rec.Event.Data.(*events.TaskRegistered); ok && task == "" {
			task = d.Task
		}
	}
	if task == "" {
		t.Fatal("the run registered no task")
	}
	home := kafkalog.PartitionOf([]byte(run), n)
	wrong := (home + 1) % n
	ev := events.Event{ID: events.NewID(), Run: run, Type: events.TypeTaskRegistered, V: 1, At: time.Now().UTC(), Source: "scheduler",
		Data: &events.TaskRegistered{Task: task, Source: "swe-smith", Kind: "swe", Tier: 1, Gates: []events.Gate{}}}
	value, err := events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(kc.Brokers...), Topic: kc.FactsTopic(), Balancer: onePartition(wrong), RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(run), Value: value}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	// What the projector must decide: the run's own partition folded, and
	// one finding about the record in the other.
	want := map[string][]byte{}
	misrouted := 0
	for r, recs := range ledgertest.Facts(t, kc) {
		var own []projections.Record
		for _, rec := range recs {
			if p := kafkalog.PartitionOf([]byte(r), n); int(rec.Partition) != p {
				d, err := projections.Misrouted(rec.Event, rec, p, n)
				if err != nil {
					t.Fatal(err)
				}
				want[d.ID] = d.Value
				misrouted++
				continue
			}
			own = append(own, rec)
		}
		ds, err := projections.FoldAll(r, own)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			want[d.ID] = d.Value
		}
	}
	if misrouted != 1 {
		t.Fatalf("found %d misrouted records on the topic, want the one written", misrouted)
	}

	dir := filepath.Join(t.TempDir(), "projector")
	p, err := projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	got := ledgertest.WaitDecisions(t, kc, want, 2*time.Minute)
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	p.Close()
	found := false
	for _, v := range got {
		if strings.Contains(string(v), `"kind":"misrouted"`) && strings.Contains(string(v), fmt.Sprintf(`"partition":%d`, wrong)) {
			found = true
		}
		if strings.Contains(string(v), `"kind":"duplicate_entity"`) {
			t.Errorf("the misrouted record was folded: %s", v)
		}
	}
	if !found {
		t.Error("no misrouted finding on the decisions topic")
	}

	// The topic grows: runs now map elsewhere, and the state was built
	// with the old count.
	cl := &kafka.Client{Addr: kafka.TCP(kc.Brokers...), Timeout: 30 * time.Second}
	resp, err := cl.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: kc.FactsTopic(), Count: int32(n + 2)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range resp.Errors {
		if err != nil {
			t.Fatal(err)
		}
	}
	testenv.CheckFor(t, time.Minute, "the new partitions are visible", func() bool {
		e, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
		return err == nil && len(e) == n+2
	})
	p, err = projector.Open(projector.Options{Kafka: kc, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Run(ctx)
	if !errors.Is(err, projector.ErrPartitionCount) {
		t.Fatalf("Run on a grown topic returned %v, want ErrPartitionCount", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("has %d partitions", n+2)) || !strings.Contains(msg, fmt.Sprintf("built with %d", n)) {
		t.Errorf("the error does not name both counts: %v", err)
	}
}
