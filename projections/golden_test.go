package projections

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenRun is a small run touching every rule that shapes a manifest:
// admission, a retry, inline tokens with a compaction, staleness, a
// dropped group, two batches, and the trainer's report of batch 1.
func goldenRun(t testing.TB) *runBuilder {
	b := newRun(t).start(events.RunConfig{GroupSize: ptr(3), BatchGroups: ptr(2), MaxStaleness: ptr(1), MinProbes: ptr(4)})
	b.task("t-easy").task("t-mid")
	probes(b, "probe-easy", "t-easy", 4, 4) // 4/4 = 1: rejected
	probes(b, "probe-mid", "t-mid", 4, 2)   // 2/4 = 0.5: admitted

	b.group("g-1", "t-mid", 3, events.PurposeTrain)
	b.attempt("g-1/a", "g-1", "")
	b.tokenTurn("g-1/a", 0, 0, []int32{1, 2}, []int32{101, 102, 103})
	b.compact("g-1/a", 0)
	b.tokenTurn("g-1/a", 1, 0, []int32{3}, []int32{104, 105})
	b.finished("g-1/a")
	b.attempt("g-1/b", "g-1", "").tokenTurn("g-1/b", 0, 0, []int32{4}, []int32{201}).failed("g-1/b")
	b.attempt("g-1/b2", "g-1", "g-1/b").tokenTurn("g-1/b2", 0, 0, []int32{4}, []int32{211, 212, 213, 214}).finished("g-1/b2")
	b.attempt("g-1/c", "g-1", "").tokenTurn("g-1/c", 0, 0, nil, []int32{301, 302}).finished("g-1/c")
	b.reward("g-1/b2", true, 5, 5).reward("g-1/a", true, 5, 5).reward("g-1/c", false, 2, 5)

	b.group("g-2", "t-easy", 3, events.PurposeTrain) // unadmitted
	for _, a := range []string{"g-2/a", "g-2/b", "g-2/c"} {
		b.solved(a, "g-2", true, 4, 0)
	}
	b.group("g-3", "t-mid", 3, events.PurposeTrain)
	b.solved("g-3/a", "g-3", true, 4, 0, 0)
	b.solved("g-3/b", "g-3", false, 3, 0)
	b.solved("g-3/c", "g-3", false, 1, 0, 0, 0)
	b.gradient(1, "sha256:0000")
	b.group("g-4", "t-mid", 3, events.PurposeTrain)
	b.solved("g-4/a", "g-4", true, 4, 0, 1) // batch 2: staleness 1 and 0
	b.solved("g-4/b", "g-4", false, 0, 1)
	b.solved("g-4/c", "g-4", true, 4, 0, 0, 1)
	b.group("g-5", "t-mid", 3, events.PurposeTrain)
	b.solved("g-5/a", "g-5", false, 2, 1)
	b.solved("g-5/b", "g-5", true, 4, 1, 1, 1, 1)
	b.solved("g-5/c", "g-5", false, 0, 1)
	return b
}

func TestGolden(t *testing.T) {
	ds := goldenRun(t).fold()
	files := map[string][]byte{}
	var all bytes.Buffer
	sealed := 0
	for _, d := range ds {
		all.Write(d.Value)
		all.WriteByte('\n')
		if d.Kind == KindBatchSealed {
			sealed++
			files[fmt.Sprintf("batch-%d.json", d.Seq)] = append(indentJSON(t, d.Value), '\n')
			// The digest pins the binary samples; people read them as NDJSON.
			lines, err := SamplesNDJSON(d.Samples)
			if err != nil {
				t.Fatal(err)
			}
			files[fmt.Sprintf("batch-%d.samples.ndjson", d.Seq)] = lines
		}
	}
	files["decisions.ndjson"] = all.Bytes()
	if sealed != 2 {
		t.Fatalf("the golden run sealed %d batches, want 2", sealed)
	}
	dir := filepath.Join("testdata", "golden")
	for name, got := range files {
		path := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file (run go test -update after checking the change):\n%s", name, firstLineDiff(got, want))
		}
	}
}

// indentJSON pretty-prints a decision for reading; decisions.ndjson holds
// the exact bytes.
func indentJSON(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	if err := jsonIndent(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func firstLineDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range max(len(g), len(w)) {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d:\ngot  %s\nwant %s", i+1, clip(string(gl)), clip(string(wl)))
		}
	}
	return ""
}
