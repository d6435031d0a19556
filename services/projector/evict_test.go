package projector

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// A run whose fold was evicted while idle resumes exactly as if it had
// been kept: the same decisions, byte for byte, and the same stored state.
// Two runs take turns on one partition, a window each, so with an idle
// limit of one window every fold is evicted and remade at every turn.
func TestEvictedRunResumesIdentically(t *testing.T) {
	var windows [][]kafkalog.Message
	var streams [2][]kafkalog.Message
	for i, run := range []string{"evict-a", "evict-b"} {
		plan, err := simulate.Generate(simulate.Options{Seed: uint64(5 + i), Tasks: 16, Steps: 3, BatchGroups: 4}, run)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range plan.All() {
			v, err := events.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			streams[i] = append(streams[i], kafkalog.Message{Key: []byte(run), Value: v})
		}
	}
	const size = 97
	for lo := 0; lo < max(len(streams[0]), len(streams[1])); lo += size {
		for _, st := range streams {
			if lo < len(st) {
				windows = append(windows, st[lo:min(lo+size, len(st))])
			}
		}
	}
	var off int64
	for _, w := range windows {
		for i := range w {
			w[i].Offset = off
			off++
		}
	}

	type result struct {
		decisions [][]byte
		state     map[string][]byte
		evicted   int
	}
	fold := func(idle uint64) result {
		db, err := pebble.Open(t.TempDir(), pebbleOptions(slog.New(slog.DiscardHandler), "test"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		p := &Projector{db: db, log: slog.New(slog.DiscardHandler), notify: newBroadcast(), progress: newBroadcast()}
		s := newSession(p, 0)
		s.idleWindows = idle
		var r result
		for _, w := range windows {
			held := len(s.rf.folds)
			b := db.NewBatch()
			ds, _, err := p.foldInto(b, s.rf, w)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			b.Close()
			for _, d := range ds {
				r.decisions = append(r.decisions, d.Value)
			}
			if len(s.rf.folds) > held {
				r.evicted += len(s.rf.folds) - held
			}
			s.evictIdle(w)
		}
		r.state = map[string][]byte{}
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for it.First(); it.Valid(); it.Next() {
			r.state[string(it.Key())] = bytes.Clone(it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	kept, evicted := fold(1<<62), fold(1)
	if kept.evicted != 2 {
		t.Fatalf("without eviction %d folds were made, want 2", kept.evicted)
	}
	if evicted.evicted < len(windows)/2 {
		t.Fatalf("with an idle limit of one window %d folds were made over %d windows: the runs were not evicted", evicted.evicted, len(windows))
	}
	if len(kept.decisions) < 6 {
		t.Fatalf("%d decisions; the runs should seal batches", len(kept.decisions))
	}
	if len(evicted.decisions) != len(kept.decisions) {
		t.Fatalf("%d decisions with eviction, %d without", len(evicted.decisions), len(kept.decisions))
	}
	for i := range kept.decisions {
		if !bytes.Equal(evicted.decisions[i], kept.decisions[i]) {
			t.Fatalf("decision %d differs after eviction:\n got %.300s\nwant %.300s", i, evicted.decisions[i], kept.decisions[i])
		}
	}
	if len(evicted.state) != len(kept.state) {
		t.Fatalf("%d state keys with eviction, %d without", len(evicted.state), len(kept.state))
	}
	for k, v := range kept.state {
		if !bytes.Equal(evicted.state[k], v) {
			t.Fatalf("state key %q differs after eviction", k)
		}
	}
}
