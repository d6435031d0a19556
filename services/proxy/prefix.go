package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// turnMark is what an attempt keeps of each earlier turn to relate a new
// prompt to it without holding its tokens: the length of its whole
// sequence (prompt and completion) and the SHA-256 of that sequence's ids,
// little-endian int32.
type turnMark struct {
	Turn int    `json:"turn"`
	Len  int64  `json:"len"`
	Hash []byte `json:"hash"`
}

// relation is how a prompt relates to the attempt's earlier turns.
type relation struct {
	// Parent is the earlier turn whose whole sequence is the longest prefix
	// of the prompt, -1 for none; Prefix is that sequence's length.
	Parent int
	Prefix int64
	// DivergedFrom is the previous turn when the prompt does not extend its
	// sequence, -1 otherwise; DivergedAt is the first index where they
	// differ (which may be the previous sequence's length when the prompt
	// is shorter than it).
	DivergedFrom int
	DivergedAt   int64
}

// markOf is the mark of a whole sequence.
func markOf(turn int, seq []int32) turnMark {
	h := hashIDs(seq)
	return turnMark{Turn: turn, Len: int64(len(seq)), Hash: h[:]}
}

func hashIDs(ids []int32) [32]byte {
	h := sha256.New()
	writeIDs(h, ids)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func writeIDs(h interface{ Write([]byte) (int, error) }, ids []int32) {
	var buf [4096]byte
	for len(ids) > 0 {
		n := min(len(ids), len(buf)/4)
		for i, id := range ids[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
		h.Write(buf[:4*n])
		ids = ids[n:]
	}
}

// relate finds the prompt's parent among marks (earlier turns, any order)
// by hashing the prompt's prefixes once, at the lengths the marks have.
// Among equal prefixes the latest turn is the parent. prev is the previous
// turn's whole sequence (nil if there is none), to say where the prompt
// left it when it is no extension of it.
func relate(prompt []int32, marks []turnMark, prevTurn int, prev []int32) relation {
	rel := relation{Parent: -1, DivergedFrom: -1}
	lens := make([]int64, 0, len(marks))
	for _, m := range marks {
		if m.Len > 0 && m.Len <= int64(len(prompt)) {
			lens = append(lens, m.Len)
		}
	}
	slices.Sort(lens)
	lens = slices.Compact(lens)
	prefixHash := make(map[int64][32]byte, len(lens))
	h := sha256.New()
	var done int64
	for _, l := range lens {
		writeIDs(h, prompt[done:l])
		done = l
		var sum [32]byte
		h.Sum(sum[:0])
		prefixHash[l] = sum
	}
	for _, m := range marks {
		if ph, ok := prefixHash[m.Len]; ok && bytes.Equal(ph[:], m.Hash) {
			if m.Len > rel.Prefix || m.Len == rel.Prefix && m.Turn > rel.Parent {
				rel.Parent, rel.Prefix = m.Turn, m.Len
			}
		}
	}
	if prev != nil && !(rel.Parent == prevTurn && rel.Prefix == int64(len(prev))) {
		i := 0
		for i < len(prev) && i < len(prompt) && prev[i] == prompt[i] {
			i++
		}
		rel.DivergedFrom, rel.DivergedAt = prevTurn, int64(i)
	}
	return rel
}
