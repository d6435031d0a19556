package projections

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// The samples encoder writes exactly what encoding/json writes for a
// Sample, float formatting included.
func TestSampleJSONMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	f32 := []float32{0, float32(math.Copysign(0, -1)), -0.0625, 1e-6, 9.999999e-7, -1e-7, 1e20, 1e21, 3.4028235e38,
		math.SmallestNonzeroFloat32, -1.5e-45, 0.1, -0.30000001, 123456.79}
	f64 := []float64{0, math.Copysign(0, -1), 0.21666666666666656, 1e-6, 9.999999999999999e-7, -1e-7, 1e20, 1e21, -1e-300,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1, 1.0 / 3}
	for range 5000 {
		f32 = append(f32, math.Float32frombits(rng.Uint32()))
		f64 = append(f64, math.Float64frombits(rng.Uint64()))
	}
	for _, v := range f32 {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		want, _ := json.Marshal(v)
		got, err := appendJSONFloat(nil, float64(v), 32)
		if err != nil || string(got) != string(want) {
			t.Fatalf("float32 %v: got %s (%v), want %s", v, got, err, want)
		}
	}
	for _, v := range f64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		want, _ := json.Marshal(v)
		got, err := appendJSONFloat(nil, v, 64)
		if err != nil || string(got) != string(want) {
			t.Fatalf("float64 %v: got %s (%v), want %s", v, got, err, want)
		}
	}
	if _, err := appendJSONFloat(nil, math.NaN(), 64); err == nil {
		t.Error("NaN encoded")
	}

	// The NDJSON of a sample is what encoding/json writes for its fields
	// (the loss mask as numbers, not base64).
	type jsonSample struct {
		Group           string    `json:"group"`
		Attempt         string    `json:"attempt"`
		Segment         int64     `json:"segment"`
		TokenIDs        []int32   `json:"token_ids"`
		LossMask        []int     `json:"loss_mask"`
		RolloutLogprobs []float32 `json:"rollout_logprobs"`
		PolicyVersions  []int64   `json:"policy_versions"`
		Advantage       float64   `json:"advantage"`
	}
	var bin []byte
	var want []byte
	for i := range 200 {
		n := rng.IntN(50)
		s := Sample{Group: "g-1:x/y", Attempt: "a.b_c-" + string(rune('a'+i%26)), Segment: int64(rng.IntN(5)), Advantage: f64[i],
			TokenIDs: []int32{}, LossMask: []uint8{}, RolloutLogprobs: []float32{}, PolicyVersions: []int64{}}
		js := jsonSample{Group: s.Group, Attempt: s.Attempt, Segment: s.Segment, Advantage: s.Advantage, LossMask: []int{}}
		for j := range n {
			s.TokenIDs = append(s.TokenIDs, int32(rng.Uint32()))
			s.LossMask = append(s.LossMask, uint8(j%2))
			js.LossMask = append(js.LossMask, j%2)
			s.RolloutLogprobs = append(s.RolloutLogprobs, -float32(rng.Float64()*20))
			s.PolicyVersions = append(s.PolicyVersions, rng.Int64N(1000)-5)
		}
		js.TokenIDs, js.RolloutLogprobs, js.PolicyVersions = s.TokenIDs, s.RolloutLogprobs, s.PolicyVersions
		line, err := events.CanonicalJSON(&js)
		if err != nil {
			t.Fatal(err)
		}
		want = append(append(want, line...), '\n')
		if bin, err = AppendSample(bin, &s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := SamplesNDJSON(bin)
	if err != nil || string(got) != string(want) {
		t.Fatalf("NDJSON of the samples (%v):\n%s", err, firstLineDiff(got, want))
	}
	var streamed bytes.Buffer
	if n, err := WriteNDJSON(&streamed, bin); err != nil || n != int64(len(want)) || streamed.String() != string(want) {
		t.Fatalf("WriteNDJSON wrote %d bytes (%v), want the %d of SamplesNDJSON", n, err, len(want))
	}
}
