package projector

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

// runSamples are samples shaped as a run's: turns of a few hundred tokens,
// observation tokens (mask 0) then completion tokens (mask 1), a policy
// version and a temperature per turn. versions picks each token's version
// instead when it is not nil.
func runSamples(n, turns, turnTokens int, versions func(i int) int64) []projections.Sample {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]projections.Sample, n)
	for s := range out {
		v := projections.Sample{Group: "g-1", Attempt: "g-1/a" + string(rune('a'+s%26)), Segment: int64(s), Advantage: float64(s) / 7}
		for t := range turns {
			for k := range turnTokens {
				v.TokenIDs = append(v.TokenIDs, rng.Int32N(151_936))
				v.LossMask = append(v.LossMask, uint8(min(1, k/(turnTokens/4))))
				v.RolloutLogprobs = append(v.RolloutLogprobs, -rng.Float32()*3)
				ver := int64(s/3 + t/2)
				if versions != nil {
					ver = versions(len(v.PolicyVersions))
				}
				v.PolicyVersions = append(v.PolicyVersions, ver)
				v.Temperatures = append(v.Temperatures, 0.6+float32(t%3)/10)
			}
		}
		out[s] = v
	}
	return out
}

// readArrow reads an IPC stream with arrow-go, which decompresses what
// the stream compressed, into its records.
func readArrow(t *testing.T, body []byte) []arrow.RecordBatch {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(body), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func render(t *testing.T, meta arrow.Metadata, src SampleSource, maxTokens int, c Compression) (*ArrowBody, []byte) {
	t.Helper()
	body, err := planArrowBody(meta, src, maxTokens, c)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := body.Render(&out, src); err != nil {
		t.Fatal(err)
	}
	if body.Size() != int64(out.Len()) {
		t.Fatalf("%s: planned %d bytes, wrote %d", c, body.Size(), out.Len())
	}
	return body, out.Bytes()
}

// A compressed body holds the same records as the uncompressed one, as
// arrow-go reads them; it compresses the columns a run repeats and only
// those, leaves the rest as they are (-1), and is the same bytes however
// the samples come in chunks.
func TestCompressedArrowBody(t *testing.T) {
	meta := func(rules string) arrow.Metadata {
		return arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"}, []string{"r-1", "3", "sha256:ab", rules})
	}
	random := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name      string
		meta      arrow.Metadata
		samples   []projections.Sample
		maxTokens int
		// packed says which token columns are compressed: ids, mask,
		// log-probs, versions, temperatures.
		packed []bool
	}{
		{"a run's turns", meta("4"), runSamples(12, 6, 400, nil), MaxArrowBatchTokens, []bool{false, true, false, true, true}},
		{"no temperatures", meta("3"), runSamples(12, 6, 400, nil), MaxArrowBatchTokens, []bool{false, true, false, true}},
		// Versions that change at every token do not compress: stored as
		// they are, like the ids.
		{"versions that do not repeat", meta("4"), runSamples(4, 4, 400, func(int) int64 { return random.Int64() }),
			MaxArrowBatchTokens, []bool{false, true, false, false, true}},
		{"split", meta("4"), runSamples(6, 2, 400, nil), 2000, []bool{false, true, false, true, true}},
		{"tiny", meta("4"), bodySamples(true), MaxArrowBatchTokens, []bool{false, false, false, false, false}},
		{"no samples", meta("4"), nil, MaxArrowBatchTokens, []bool{false, false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all, chunks := canonicalOf(t, tc.samples)
			one := func(fn func([]byte) error) error { return fn(all) }
			each := func(fn func([]byte) error) error {
				for _, c := range chunks {
					if err := fn(c); err != nil {
						return err
					}
				}
				return nil
			}
			_, plain := render(t, tc.meta, one, tc.maxTokens, Uncompressed)
			body, packed := render(t, tc.meta, one, tc.maxTokens, LZ4)
			if _, again := render(t, tc.meta, each, tc.maxTokens, LZ4); !bytes.Equal(again, packed) {
				t.Fatal("the samples in other chunks gave other bytes")
			}
			want, got := readArrow(t, plain), readArrow(t, packed)
			if len(got) != len(want) {
				t.Fatalf("%d record batches, want %d", len(got), len(want))
			}
			for i := range want {
				if !array.RecordEqual(got[i], want[i]) {
					t.Errorf("record batch %d differs:\n%v\nwant\n%v", i, got[i], want[i])
				}
				got[i].Release()
				want[i].Release()
			}
			for _, rb := range body.batches {
				for col, w := range tc.packed {
					if (rb.packed[col] >= 0) != w {
						t.Errorf("column %d: packed %d, want compressed %v", col, rb.packed[col], w)
					}
				}
			}
			if tc.packed[3] && len(packed) >= len(plain)/2 {
				t.Errorf("compressed body of %d bytes against %d", len(packed), len(plain))
			}
			// The token ids of the first record batch are stored as
			// they are: their buffer starts with -1 and holds the
			// values.
			if len(tc.samples) > 0 && len(tc.samples[0].TokenIDs) > 0 {
				ids := binary.LittleEndian.AppendUint64(nil, ^uint64(0))
				for _, x := range tc.samples[0].TokenIDs {
					ids = binary.LittleEndian.AppendUint32(ids, uint32(x))
				}
				if !bytes.Contains(packed, ids) {
					t.Error("the token ids are not stored as they are")
				}
			}
		})
	}
}

func TestParseCompression(t *testing.T) {
	for name, want := range map[string]Compression{"": Uncompressed, "none": Uncompressed, "lz4": LZ4} {
		if c, err := ParseCompression(name); err != nil || c != want {
			t.Errorf("%q: %v, %v", name, c, err)
		}
	}
	if _, err := ParseCompression("zstd"); err == nil || err.Error() != `compression "zstd" is not one of none, lz4` {
		t.Errorf("zstd: %v", err)
	}
}

// The compressed bytes of given samples are pinned: the ETag promises that
// the digest and the suffix ".lz4" fix every byte, between the file stored
// at seal and a body rendered later, by another build. A change of the
// compressor (its version, its options) that changed its output fails
// here, and must come with a new suffix (api.arrowETag, Compression.Suffix).
func TestCompressedArrowBodyPinned(t *testing.T) {
	meta := arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"}, []string{"r-1", "3", "sha256:ab", "4"})
	all, _ := canonicalOf(t, runSamples(8, 5, 300, nil))
	_, body := render(t, meta, func(fn func([]byte) error) error { return fn(all) }, MaxArrowBatchTokens, LZ4)
	const want = "5211a3713943d3d6520330443611b119af36e5bca031dfe37fd49dce5f013ee7"
	if got := fmt.Sprintf("%x", sha256.Sum256(body)); got != want {
		t.Errorf("compressed body of %d bytes hashes to %s, pinned %s", len(body), got, want)
	}
}

// A crash between a batch's two bodies leaves one on disk: folding the
// window again writes the other, and the batch counts once against the
// budget, at the size of both, also when the projector counted the one
// body already (another batch's body written first).
func TestArrowBodyFinishedAfterCrash(t *testing.T) {
	dir := t.TempDir()
	all, _ := canonicalOf(t, runSamples(4, 2, 300, nil))
	p, err := Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	chunks := map[uint64]uint32{1: storeSamples(t, p, "r-1", 1, all), 2: storeSamples(t, p, "r-1", 2, all)}
	job := func(seq uint64) bodyJob {
		d := fmt.Sprintf("sha256:%064x", seq)
		return bodyJob{run: "r-1", seq: seq, chunks: chunks[seq],
			manifest: []byte(fmt.Sprintf(`{"run":"r-1","seq":%d,"rule_version":4,"digest":"%s"}`, seq, d))}
	}
	one := job(1)
	meta, digest, _ := ArrowMetadata("r-1", 1, one.manifest)
	plain, _ := p.arrowBodyPath("r-1", 1, digest, Uncompressed)
	if wrote, err := p.storeArrowBodyAs(one, meta, plain, Uncompressed); !wrote || err != nil {
		t.Fatalf("the first body: wrote %v, %v", wrote, err)
	}
	for _, seq := range []uint64{2, 1, 1} { // the last: both on disk, nothing to do
		if err := p.storeArrowBody(job(seq)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "arrow", "r-1", "*.arrow"))
	var size int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	if b := &p.bodies; len(files) != 4 || len(b.kept) != 2 || b.keptBytes != size {
		t.Errorf("%d files; kept %v, %d bytes; want two batches at %d", len(files), b.kept, b.keptBytes, size)
	}
}
