package projector

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/consumer"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A window that seals a batch is committed in parts: the part that ends
// at the sealing fact is committed — with the offset past that fact —
// before the rest of the window is folded, so a trainer waiting for the
// batch does not wait for the facts behind it. The decisions are those of
// the window folded whole, byte for byte and in order.
func TestSealCommitsAtItsFact(t *testing.T) {
	kc := testenv.RealKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		t.Fatal(err)
	}
	plan, err := simulate.Generate(simulate.Options{Seed: 3, Tasks: 16, Steps: 3, BatchGroups: 4}, "seal-part-run")
	if err != nil {
		t.Fatal(err)
	}
	var window []kafkalog.Message
	for i, ev := range plan.All() {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		window = append(window, kafkalog.Message{Topic: kc.FactsTopic(), Value: v, Key: []byte(ev.Run), Offset: int64(i)})
	}

	// The window folded whole, as before.
	whole, err := Open(Options{Kafka: kc, Dir: filepath.Join(t.TempDir(), "whole")})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	b := whole.db.NewBatch()
	want, wantCauses, err := whole.foldInto(b, newRunFolds(), window)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	var sealedAt []int64 // the offset of each sealing fact
	for i, d := range want {
		if d.Kind == projections.KindBatchSealed {
			sealedAt = append(sealedAt, window[wantCauses[i]].Offset)
		}
	}
	if len(sealedAt) < 2 || sealedAt[len(sealedAt)-1] == window[len(window)-1].Offset {
		t.Fatalf("the run seals batches at %v of %d facts; the test needs two or more, before its last fact", sealedAt, len(window))
	}

	p, err := Open(Options{Kafka: kc, Dir: filepath.Join(t.TempDir(), "parts")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	type commit struct {
		next    int64
		decided []projections.Decision
	}
	var commits []commit
	p.committed = func(part int, next int64, decided []projections.Decision) {
		commits = append(commits, commit{next, decided})
	}
	w := &consumer.Window{Records: window}
	if err := p.foldWindow(ctx, 0, newRunFolds(), w); err != nil {
		t.Fatal(err)
	}

	var got []projections.Decision
	var bounds []int64
	for _, c := range commits {
		got = append(got, c.decided...)
		bounds = append(bounds, c.next)
	}
	var wantBounds []int64
	for _, off := range sealedAt {
		wantBounds = append(wantBounds, off+1)
	}
	wantBounds = append(wantBounds, window[len(window)-1].Offset+1)
	if !slices.Equal(bounds, wantBounds) {
		t.Errorf("commits ended before offsets %v, want %v: one at each sealing fact, then the window's end", bounds, wantBounds)
	}
	for i, c := range commits[:len(commits)-1] {
		last := c.decided[len(c.decided)-1]
		if last.Kind != projections.KindBatchSealed {
			t.Errorf("commit %d ends with a %s, want the batch.sealed it was cut at", i, last.Kind)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d decisions in parts, %d folded whole", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("decision %d: %s %d (%s) in parts, %s %d (%s) folded whole", i, got[i].Kind, got[i].Seq, got[i].ID, want[i].Kind, want[i].Seq, want[i].ID)
		}
	}
	next, err := p.Offset(0)
	if err != nil || next != window[len(window)-1].Offset+1 {
		t.Errorf("stored next offset %d (%v), want %d", next, err, window[len(window)-1].Offset+1)
	}
}
