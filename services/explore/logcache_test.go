package explore

import (
	"container/list"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

// The records read back from the facts log are kept, so that an attempt's
// page, which asks for its view every two seconds, does not fetch its
// turns again each time: a record is fetched once while it stays among
// the most recently used that fit the cache's bytes, a record the log
// does not hold is asked for again, and the cache never holds more than
// its bound.
func TestFactLogCache(t *testing.T) {
	var mu sync.Mutex
	fetched := map[int64]int{}
	l := &kafkaLog{topic: "facts", max: 3 * 100, lru: list.New(), at: map[projections.FactPosition]*list.Element{}}
	l.fetch = func(_ context.Context, tp kafkalog.TopicPartition, offsets []int64) ([][]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		out := make([][]byte, len(offsets))
		for i, o := range offsets {
			fetched[o]++
			if o != 99 { // 99: retention removed it
				out[i] = fmt.Appendf(make([]byte, 0, 100), "%d/%-98d", tp.Partition, o)[:100]
			}
		}
		return out, nil
	}
	read := func(offsets ...int64) {
		t.Helper()
		at := make([]projections.FactPosition, len(offsets))
		for i, o := range offsets {
			at[i] = projections.FactPosition{Partition: 2, Offset: o, Seq: uint64(1000 + o)}
		}
		got, err := l.Records(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range offsets {
			if want := fmt.Sprintf("2/%-98d", o)[:100]; (o == 99) != (got[i] == nil) || (got[i] != nil && string(got[i]) != want) {
				t.Errorf("offset %d: got %q", o, got[i])
			}
		}
	}
	read(1, 2, 3)
	read(3, 2, 1, 99)
	read(99)
	if want := map[int64]int{1: 1, 2: 1, 3: 1, 99: 2}; !maps.Equal(fetched, want) {
		t.Errorf("fetches by offset %v, want %v (a held record once, an absent one each time)", fetched, want)
	}
	// 1 is now the least recently used: a fourth record drops it.
	read(2, 3)
	read(4)
	read(2, 3, 4)
	read(1)
	if fetched[1] != 2 || fetched[2] != 1 || fetched[3] != 1 || fetched[4] != 1 {
		t.Errorf("fetches by offset %v: want 1 fetched again after it was dropped, 2–4 once", fetched)
	}
	if l.bytes > l.max || l.lru.Len() != 3 || len(l.at) != 3 {
		t.Errorf("cache holds %d bytes in %d entries (%d indexed), bound %d", l.bytes, l.lru.Len(), len(l.at), l.max)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				at := []projections.FactPosition{{Partition: 2, Offset: int64(10 + (g+i)%7)}}
				if _, err := l.Records(context.Background(), at); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if l.bytes > l.max || !slices.Equal([]int{l.lru.Len()}, []int{len(l.at)}) {
		t.Errorf("after concurrent reads the cache holds %d bytes (bound %d), %d entries and %d indexed", l.bytes, l.max, l.lru.Len(), len(l.at))
	}
}
