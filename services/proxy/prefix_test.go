package proxy

import (
	"strings"
	"testing"
)

func TestRelate(t *testing.T) {
	seq0 := []int32{1, 2, 3, 4, 5}          // turn 0: prompt 1 2 3, completion 4 5
	seq1 := []int32{1, 2, 3, 4, 5, 6, 7, 8} // turn 1 extends turn 0
	marks := []turnMark{markOf(0, seq0), markOf(1, seq1)}
	cases := []struct {
		name         string
		prompt       []int32
		prev         []int32
		wantParent   int
		wantPrefix   int64
		wantDiverged int
		wantAt       int64
	}{
		{"extends the previous turn", []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, seq1, 1, 8, -1, 0},
		{"equals the previous sequence", []int32{1, 2, 3, 4, 5, 6, 7, 8}, seq1, 1, 8, -1, 0},
		// A template that dropped turn 1's completion: the prompt extends
		// turn 0 only, and leaves turn 1's sequence at index 5.
		{"history rewritten after turn 0", []int32{1, 2, 3, 4, 5, 9, 9}, seq1, 0, 5, 1, 5},
		// Re-tokenization drift: [332 854 29] became [40480 29].
		{"drift inside the completion", []int32{1, 2, 3, 40480, 29}, []int32{1, 2, 3, 332, 854, 29}, -1, 0, 1, 3},
		{"shorter than the previous sequence", []int32{1, 2, 3}, seq1, -1, 0, 1, 3},
		{"nothing shared", []int32{7, 7}, seq1, -1, 0, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := marks
			if c.name == "drift inside the completion" {
				ms = []turnMark{markOf(1, c.prev)}
			}
			rel := relate(c.prompt, ms, 1, c.prev)
			if rel.Parent != c.wantParent || rel.Prefix != c.wantPrefix {
				t.Errorf("parent %d prefix %d, want %d %d", rel.Parent, rel.Prefix, c.wantParent, c.wantPrefix)
			}
			if rel.DivergedFrom != c.wantDiverged || rel.DivergedAt != c.wantAt {
				t.Errorf("diverged from %d at %d, want %d at %d", rel.DivergedFrom, rel.DivergedAt, c.wantDiverged, c.wantAt)
			}
		})
	}
}

func TestRelateFirstTurn(t *testing.T) {
	rel := relate([]int32{1, 2, 3}, nil, -1, nil)
	if rel.Parent != -1 || rel.Prefix != 0 || rel.DivergedFrom != -1 {
		t.Errorf("first turn: %+v, want no parent and no divergence", rel)
	}
}

func TestCutText(t *testing.T) {
	cases := []struct {
		in, want string
		cut      int64
	}{
		{"plain", "plain", 0},
		{"a\x00b\x00", "ab", 2},
		{"bad \xff utf-8", "bad  utf-8", 1},
		{strings.Repeat("é", 40000), strings.Repeat("é", 32768), 80000 - 65536},
	}
	for _, c := range cases {
		got, cut := cutText(c.in)
		if got != c.want || cut != c.cut {
			t.Errorf("cutText(%.20q): %.20q cut %d, want %.20q cut %d", c.in, got, cut, c.want, c.cut)
		}
	}
}
