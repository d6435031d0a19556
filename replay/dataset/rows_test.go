package dataset

import (
	"fmt"
	"reflect"
	"testing"
)

// TestTurnsJoinTheirJudgements: the turns table gives every turn the
// judgement stored under its own partition and offset, and none to a turn
// no batch judged, with the turns of several partitions interleaved in the
// log, a partition no batch judged, and one turn whose offset is below
// the one before it in its partition (a seek back, which must still find
// it).
func TestTurnsJoinTheirJudgements(t *testing.T) {
	rows, err := openRowStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.close()
	run := &Run{Run: "r", rows: rows}
	type place struct {
		partition int32
		offset    int64
	}
	var order []place
	next := map[int32]int64{}
	for seq := range 300 {
		p := int32(seq % 4) // partitions 0–3, in turn
		next[p] += int64(1 + seq%3)
		order = append(order, place{p, next[p]})
	}
	order[200].offset, order[204].offset = order[204].offset, order[200].offset // both partition 0
	want := map[place]judgement{}
	var e rowEncoder
	for i, pl := range order {
		turn := &Turn{Seq: uint64(i + 1), Partition: pl.partition, Offset: pl.offset, Attempt: fmt.Sprint("a", i%7), Turn: i}
		e.b = e.b[:0]
		e.turn(turn)
		if err := rows.put(turnKey(turn.Seq), e.b); err != nil {
			t.Fatal(err)
		}
		if pl.partition == 3 || i%5 == 0 {
			continue // partition 3 and every fifth turn: never judged
		}
		j := judgement{Batch: uint64(i/10 + 1), Staleness: int64(i % 4), Trained: i%2 == 0,
			SegmentStaleness: []int64{int64(i)}, SegmentTrained: []bool{i%3 == 0}}
		want[pl] = j
		e.b = e.b[:0]
		e.judgement(&j)
		if err := rows.put(judgementKey(pl.partition, pl.offset), e.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for r, err := range turnsOf([]*Run{run}) {
		if err != nil {
			t.Fatal(err)
		}
		turn := r.r
		pl := order[turn.Seq-1]
		if turn.Partition != pl.partition || turn.Offset != pl.offset {
			t.Fatalf("turn %d: read at %d/%d, stored at %d/%d", turn.Seq, turn.Partition, turn.Offset, pl.partition, pl.offset)
		}
		var got judgement
		got.Batch, got.Staleness, got.Trained, got.SegmentStaleness, got.SegmentTrained =
			turn.Batch, turn.Staleness, turn.Trained, turn.SegmentStaleness, turn.SegmentTrained
		if w := want[pl]; !reflect.DeepEqual(got, w) {
			t.Errorf("turn %d at %d/%d: judgement %+v, want %+v", turn.Seq, pl.partition, pl.offset, got, w)
		}
		n++
	}
	if n != len(order) {
		t.Errorf("read %d turns, stored %d", n, len(order))
	}
}
