package projector

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
)

func bodySamples(temps bool) []projections.Sample {
	s := []projections.Sample{
		{Group: "g-1", Attempt: "g-1/a", Segment: 0, Advantage: 0.25, TokenIDs: []int32{1, 2, 101}, LossMask: []uint8{0, 0, 1},
			RolloutLogprobs: []float32{0, 0, -0.5}, PolicyVersions: []int64{3, 3, 4}},
		{Group: "g-1", Attempt: "g-1/a", Segment: 1, Advantage: 0.25, TokenIDs: []int32{}, LossMask: []uint8{},
			RolloutLogprobs: []float32{}, PolicyVersions: []int64{}},
		{Group: "g-2", Attempt: "g-2/bé", Segment: -7, Advantage: -1.5, TokenIDs: []int32{7, 8, 9, 10, 11}, LossMask: []uint8{1, 1, 0, 0, 1},
			RolloutLogprobs: []float32{-1, -2, -3, -4, -5}, PolicyVersions: []int64{1 << 40, 1 << 40, 5, 5, 6}},
	}
	if temps {
		for i := range s {
			s[i].Temperatures = make([]float32, len(s[i].TokenIDs))
			for j := range s[i].Temperatures {
				s[i].Temperatures[j] = 0.5 + float32(j)
			}
		}
	}
	return s
}

func canonicalOf(t *testing.T, samples []projections.Sample) (all []byte, chunks [][]byte) {
	t.Helper()
	for i := range samples {
		one, err := projections.AppendSample(nil, &samples[i])
		if err != nil {
			t.Fatal(err)
		}
		all, chunks = append(all, one...), append(chunks, one)
	}
	return all, chunks
}

// arrowGoStream is the reference: the samples as arrow-go's builders and
// IPC writer make them, a record batch per group of samples.
func arrowGoStream(t *testing.T, meta arrow.Metadata, batches [][]projections.Sample) []byte {
	t.Helper()
	schema := ArrowSchema(meta)
	var out bytes.Buffer
	w := ipc.NewWriter(&out, ipc.WithSchema(schema))
	for _, samples := range batches {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for _, s := range samples {
			b.Field(0).(*array.StringBuilder).Append(s.Group)
			b.Field(1).(*array.StringBuilder).Append(s.Attempt)
			b.Field(2).(*array.Int32Builder).Append(int32(s.Segment))
			b.Field(3).(*array.Float64Builder).Append(s.Advantage)
			list := func(i int) array.Builder {
				lb := b.Field(i).(*array.ListBuilder)
				lb.Append(true)
				return lb.ValueBuilder()
			}
			list(4).(*array.Int32Builder).AppendValues(s.TokenIDs, nil)
			list(5).(*array.Uint8Builder).AppendValues(s.LossMask, nil)
			list(6).(*array.Float32Builder).AppendValues(s.RolloutLogprobs, nil)
			list(7).(*array.Int64Builder).AppendValues(s.PolicyVersions, nil)
			if len(schema.Fields()) > 8 {
				temps := s.Temperatures
				if temps == nil {
					temps = make([]float32, len(s.TokenIDs))
					for i := range temps {
						temps[i] = 1
					}
				}
				list(8).(*array.Float32Builder).AppendValues(temps, nil)
			}
		}
		rec := b.NewRecordBatch()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// The body written column after column is byte for byte what arrow-go's
// IPC writer writes for the same record batches, whatever the chunks the
// samples come in; its planned size is its length.
func TestArrowBodyMatchesArrowGo(t *testing.T) {
	meta := func(rules string) arrow.Metadata {
		return arrow.NewMetadata([]string{"run", "seq", "digest", "rule_version"}, []string{"r-1", "3", "sha256:ab", rules})
	}
	plain, temps := bodySamples(false), bodySamples(true)
	for _, tc := range []struct {
		name      string
		meta      arrow.Metadata
		samples   []projections.Sample
		maxTokens int
		batches   [][]projections.Sample
	}{
		{"one record batch", meta("3"), plain, MaxArrowBatchTokens, [][]projections.Sample{plain}},
		{"temperatures", meta("4"), temps, MaxArrowBatchTokens, [][]projections.Sample{temps}},
		// A rule version 4 schema over samples without temperatures
		// (none in the form) gives them 1.
		{"temperatures default", meta("4"), plain, MaxArrowBatchTokens, [][]projections.Sample{plain}},
		// Split between samples, never inside one; an empty sample joins
		// the batch before it.
		{"split", meta("3"), plain, 5, [][]projections.Sample{plain[:2], plain[2:]}},
		{"no samples", meta("3"), nil, MaxArrowBatchTokens, [][]projections.Sample{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all, chunks := canonicalOf(t, tc.samples)
			want := arrowGoStream(t, tc.meta, tc.batches)
			for _, src := range []struct {
				name string
				src  SampleSource
			}{
				{"one chunk", func(fn func([]byte) error) error { return fn(all) }},
				{"a chunk a sample", func(fn func([]byte) error) error {
					for _, c := range chunks {
						if err := fn(c); err != nil {
							return err
						}
					}
					return nil
				}},
			} {
				body, err := planArrowBody(tc.meta, src.src, tc.maxTokens, Uncompressed)
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				if err := body.Render(&got, src.src); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Errorf("%s: %d bytes\n%x\nwant arrow-go's %d\n%x", src.name, got.Len(), got.Bytes(), len(want), want)
				}
				if body.Size() != int64(got.Len()) {
					t.Errorf("%s: planned %d bytes, wrote %d", src.name, body.Size(), got.Len())
				}
				if body.Samples() != len(tc.samples) {
					t.Errorf("%s: %d samples, want %d", src.name, body.Samples(), len(tc.samples))
				}
			}
		})
	}
}

func TestArrowBodyRefuses(t *testing.T) {
	all, _ := canonicalOf(t, bodySamples(false))
	src := func(b []byte) SampleSource { return func(fn func([]byte) error) error { return fn(b) } }
	if _, err := planArrowBody(arrow.Metadata{}, src(all), 4, Uncompressed); err == nil || !strings.Contains(err.Error(), "has 5 tokens, more than one Arrow record batch holds (4)") {
		t.Errorf("a sample over the bound: %v", err)
	}
	if _, err := PlanArrowBody(arrow.Metadata{}, src(all[:len(all)-1])); err == nil {
		t.Error("malformed samples were planned")
	}
	// Samples that change between the plan and the render are an error,
	// not a body of another length than announced.
	body, err := PlanArrowBody(arrow.Metadata{}, src(all))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := canonicalOf(t, bodySamples(false)[:1])
	if err := body.Render(&bytes.Buffer{}, src(first)); err == nil || !strings.Contains(err.Error(), "changed between passes") {
		t.Errorf("rendered from other samples: %v", err)
	}
}

// A sealed batch's body is written to the file its run, sequence and
// digest name, once, with the bytes the API would render; another digest
// finds no file.
func TestStoredArrowBody(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := canonicalOf(t, bodySamples(true))
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	manifest := []byte(`{"run":"r-1","seq":7,"rule_version":4,"digest":"` + digest + `"}`)
	chunks := storeSamples(t, p, "r-1", 7, all)
	p.writeArrowBody("r-1", 7, manifest, chunks)
	p.writeArrowBody("r-1", 7, manifest, chunks) // a window folded again
	if err := p.Close(); err != nil {            // waits for the bodies
		t.Fatal(err)
	}
	p, err = Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, found, err := p.ArrowBody("r-1", 7, digest, Uncompressed)
	if err != nil || !found {
		t.Fatalf("stored body: found %v, %v", found, err)
	}
	got, err := os.ReadFile(f.Name())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	meta, _, err := ArrowMetadata("r-1", 7, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if want := arrowGoStream(t, meta, [][]projections.Sample{bodySamples(true)}); !bytes.Equal(got, want) {
		t.Errorf("stored body of %d bytes differs from the %d rendered", len(got), len(want))
	}
	// The compressed body beside it is what the plan renders.
	f, found, err = p.ArrowBody("r-1", 7, digest, LZ4)
	if err != nil || !found {
		t.Fatalf("stored compressed body: found %v, %v", found, err)
	}
	gotLZ4, err := os.ReadFile(f.Name())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, want := render(t, meta, func(fn func([]byte) error) error { return fn(all) }, MaxArrowBatchTokens, LZ4); !bytes.Equal(gotLZ4, want) {
		t.Errorf("stored compressed body of %d bytes differs from the %d rendered", len(gotLZ4), len(want))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "arrow", "r-1", "*")); len(files) != 2 {
		t.Errorf("files beside the state: %v, want the two bodies", files)
	}
	for _, d := range []string{"sha256:" + strings.Repeat("f", 64), "sha256:../x", "md5:00"} {
		for _, c := range compressions {
			if _, found, err := p.ArrowBody("r-1", 7, d, c); found || err != nil {
				t.Errorf("digest %q, %s: found %v, %v; want no body", d, c, found, err)
			}
		}
	}
}

// A projector without a state directory (the tests' folds over a bare
// database) writes no bodies: none lands in the working directory.
func TestNoStateDirectoryNoBodies(t *testing.T) {
	t.Chdir(t.TempDir())
	p := &Projector{log: slog.New(slog.DiscardHandler)}
	digest := "sha256:" + strings.Repeat("ab", 32)
	p.writeArrowBody("r-1", 1, []byte(`{"rule_version":3,"digest":"`+digest+`"}`), 1)
	p.closeArrowBodies()
	if _, err := os.Stat("arrow"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a body directory in the working directory: %v", err)
	}
}

// The bodies kept on disk stay within their budget: past it the oldest
// written go first, also those a projector found on disk when it opened,
// and the body just written always stays.
func TestArrowBodiesWithinBudget(t *testing.T) {
	dir := t.TempDir()
	all, _ := canonicalOf(t, bodySamples(true))
	open := func(budget int64) *Projector {
		p, err := Open(Options{Kafka: kafkalog.Config{Brokers: []string{"127.0.0.1:1"}}, Dir: dir, ArrowBodyBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	digestOf := func(seq uint64) string { return "sha256:" + strings.Repeat(fmt.Sprintf("%02x", seq), 32) }
	store := func(p *Projector, seq uint64) {
		t.Helper()
		d := digestOf(seq)
		manifest := []byte(fmt.Sprintf(`{"run":"r-1","seq":%d,"rule_version":4,"digest":"%s"}`, seq, d))
		if err := p.storeArrowBody(bodyJob{run: "r-1", seq: seq, manifest: manifest, chunks: storeSamples(t, p, "r-1", seq, all)}); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(p *Projector) []uint64 {
		t.Helper()
		var out []uint64
		for seq := uint64(1); seq <= 9; seq++ {
			var both []bool
			for _, c := range compressions {
				f, found, err := p.ArrowBody("r-1", seq, digestOf(seq), c)
				if err != nil {
					t.Fatal(err)
				}
				if found {
					f.Close()
				}
				both = append(both, found)
			}
			if both[0] != both[1] {
				t.Errorf("batch %d: bodies found %v, want both or neither", seq, both)
			}
			if both[0] {
				out = append(out, seq)
			}
		}
		return out
	}

	p := open(-1)
	store(p, 1)
	var size int64 // a batch's two bodies
	for _, c := range compressions {
		f, _, _ := p.ArrowBody("r-1", 1, digestOf(1), c)
		info, err := f.Stat()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		size += info.Size()
	}
	p.Close()
	os.RemoveAll(filepath.Join(dir, "arrow"))

	p = open(2*size + size/2) // room for two bodies
	for seq := uint64(1); seq <= 5; seq++ {
		store(p, seq)
	}
	if got := kept(p); !slices.Equal(got, []uint64{4, 5}) {
		t.Errorf("bodies kept within two bodies' budget: %v, want [4 5]", got)
	}
	p.Close()

	p = open(2*size + size/2)
	store(p, 6)
	if got := kept(p); !slices.Equal(got, []uint64{5, 6}) {
		t.Errorf("after a reopen and one more body: %v, want [5 6]", got)
	}
	p.Close()

	small := open(size / 2) // smaller than one body: the newest stays
	store(small, 7)
	if got := kept(small); !slices.Equal(got, []uint64{7}) {
		t.Errorf("with a budget under one body: %v, want [7]", got)
	}
	small.Close()
}
