package projections

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// The canonical binary form is written down byte for byte in
// docs/design.md §7.4; this is that layout for one small sample.
func TestSampleBinaryLayout(t *testing.T) {
	s := Sample{Group: "g", Attempt: "a1", Segment: 2, Advantage: 0.5,
		TokenIDs: []int32{7, -1}, LossMask: []uint8{0, 1}, RolloutLogprobs: []float32{0, -0.25}, PolicyVersions: []int64{3, 4}}
	got, err := AppendSample(nil, &s)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"01000000", "67", // group: length 1, "g"
		"02000000", "6131", // attempt: length 2, "a1"
		"0200000000000000",     // segment 2
		"000000000000e03f",     // advantage 0.5
		"0200000000000000",     // 2 tokens
		"07000000", "ffffffff", // token ids
		"00", "01", // loss mask
		"00000000", "000080be", // log-probs 0, -0.25
		"0300000000000000", "0400000000000000", // policy versions
	}, "")
	if hex.EncodeToString(got) != want {
		t.Fatalf("got  %x\nwant %s", got, want)
	}
	back, err := DecodeSamples(got)
	if err != nil || len(back) != 1 {
		t.Fatalf("decode: %v (%d samples)", err, len(back))
	}
	if b := back[0]; b.Group != s.Group || b.Attempt != s.Attempt || b.Segment != 2 || b.Advantage != 0.5 ||
		!equal(b.TokenIDs, s.TokenIDs) || !equal(b.LossMask, s.LossMask) || !equal(b.RolloutLogprobs, s.RolloutLogprobs) ||
		!equal(b.PolicyVersions, s.PolicyVersions) {
		t.Fatalf("decoded %+v, want %+v", b, s)
	}
	if _, err := AppendSample(nil, &Sample{TokenIDs: []int32{1}, LossMask: []uint8{}}); !errors.Is(err, ErrMalformedSamples) {
		t.Fatalf("arrays of unequal length: %v, want ErrMalformedSamples", err)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A reader refuses bytes that are not whole samples, naming the sample and
// the byte where it stopped.
func TestSampleReaderRefusesMalformed(t *testing.T) {
	one, _ := AppendSample(nil, &Sample{Group: "g", Attempt: "a", TokenIDs: []int32{1, 2}, LossMask: []uint8{1, 1},
		RolloutLogprobs: []float32{-1, -1}, PolicyVersions: []int64{0, 0}})
	two := append(append([]byte{}, one...), one...)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"cut in the tokens", two[:len(two)-1], "sample 1 at byte 68: 2 tokens overrun the 33 bytes left"},
		{"cut in a length", two[:len(one)+2], "sample 1 at byte 68: group length cut short"},
		{"cut in the fixed fields", one[:20], "sample 0 at byte 0: fixed fields cut short"},
		{"a group longer than the rest", []byte{0xff, 0, 0, 0, 'g'}, "sample 0 at byte 0: group of 255 bytes overruns the 1 left"},
		{"an attempt that is not UTF-8", append([]byte{1, 0, 0, 0, 'g', 1, 0, 0, 0, 0xff}, make([]byte, 24)...), "sample 0 at byte 0: attempt is not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSamples(tc.b)
			if !errors.Is(err, ErrMalformedSamples) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrMalformedSamples ending %q", err, tc.want)
			}
		})
	}
	if n, tokens, err := CountSamples(two); n != 2 || tokens != 4 || err != nil {
		t.Fatalf("CountSamples: %d samples, %d tokens, %v; want 2, 4, nil", n, tokens, err)
	}
}

// A version 2 turn of one segment means what the version 1 turn of that
// version means: same manifest (no segments member), same samples. Only
// the fact bytes differ, and with them the tree head and the digest.
func TestOneSegmentTurnMeansItsVersion1Turn(t *testing.T) {
	build := func(v int) []Decision {
		b := newRun(t).start(openConfig())
		b.task("t1").group("g1", "t1", 2, events.PurposeTrain)
		for _, a := range []string{"g1/a", "g1/b"} {
			b.attempt(a, "g1", "")
			b.tokenTurn(a, 0, 0, []int32{1}, []int32{2, 3})
			b.evs[len(b.evs)-1].V = v
			b.finished(a)
		}
		b.reward("g1/a", true, 1, 1).reward("g1/b", false, 0, 1)
		return b.fold()
	}
	v1, v2 := build(1), build(2)
	m1, m2 := manifestsOf(t, v1), manifestsOf(t, v2)
	if len(m1) != 1 || len(m2) != 1 {
		t.Fatalf("%d and %d batches, want 1 each", len(m1), len(m2))
	}
	m1[0].Tree, m2[0].Tree, m1[0].Digest, m2[0].Digest = TreeHead{}, TreeHead{}, "", ""
	j1, _ := events.CanonicalJSON(m1[0])
	j2, _ := events.CanonicalJSON(m2[0])
	if !bytes.Equal(j1, j2) {
		t.Fatalf("manifests differ:\nv1 %s\nv2 %s", j1, j2)
	}
	if bytes.Contains(j2, []byte(`"segments"`)) {
		t.Fatalf("a one-segment turn's manifest has a segments member: %s", j2)
	}
	var s1, s2 []byte
	for _, d := range v1 {
		s1 = append(s1, d.Samples...)
	}
	for _, d := range v2 {
		s2 = append(s2, d.Samples...)
	}
	if !bytes.Equal(s1, s2) {
		t.Fatal("the samples differ")
	}
}
