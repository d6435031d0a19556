package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// memSource is a simulated run held in memory, with the decisions the fold
// concludes from it as the record.
type memSource struct {
	run       string
	facts     []replay.Fact
	decisions []replay.Recorded
}

func (m *memSource) Run() string      { return m.run }
func (m *memSource) Describe() string { return "memory " + m.run }
func (m *memSource) Facts(ctx context.Context, fn func(replay.Fact) error) error {
	for _, f := range m.facts {
		f.Value = bytes.Clone(f.Value)
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}
func (m *memSource) Decisions(ctx context.Context, fn func(replay.Recorded) error) error {
	for _, d := range m.decisions {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// textRun is a small simulated run with inline tokens, rewritten to
// catalogue version 2 with text on every turn, tool call and task, so every
// column and every format has something to carry.
var textRun = simulate.Options{Seed: 11, Tasks: 12, Steps: 2, BatchGroups: 2, MaxTurns: 12, Tokens: true}

func planSource(t testing.TB, o simulate.Options, run string, text bool) *memSource {
	t.Helper()
	var edit func(*events.Event)
	if text {
		edit = withText
	}
	return planSourceWith(t, o, run, edit)
}

// planSourceWith is planSource with each event changed by edit (nil: none).
func planSourceWith(t testing.TB, o simulate.Options, run string, edit func(*events.Event)) *memSource {
	t.Helper()
	plan, err := simulate.Generate(o, run)
	if err != nil {
		t.Fatal(err)
	}
	m := &memSource{run: run}
	fold, store := projections.NewFold(run), projections.NewMemStore()
	for i, ev := range plan.All() {
		if edit != nil {
			edit(&ev)
		}
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := replay.Fact{Seq: uint64(i + 1), Partition: 3, Offset: int64(i), Value: v}
		m.facts = append(m.facts, f)
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			m.decisions = append(m.decisions, replay.Recorded{Partition: 3, Offset: int64(len(m.decisions)), Value: d.Value})
		}
	}
	return m
}

func withText(ev *events.Event) {
	switch d := ev.Data.(type) {
	case *events.TurnGenerated:
		ev.V = 2
		d.Text = fmt.Sprintf("turn %d of %s: ls -la <src> && cat \"a&b\" — ✓", d.Turn, d.Attempt)
	case *events.ToolCalled:
		ev.V = 2
		d.Input = fmt.Sprintf("%s --call %d", d.Tool, d.Call)
		d.Output = fmt.Sprintf("exit %d", d.ExitCode)
	case *events.TaskRegistered:
		ev.V = 2
		d.Prompt = "Fix the failing test of " + d.Task
	}
}

func exportTo(t *testing.T, src replay.Source, format, out string) *Result {
	t.Helper()
	res, err := Export(context.Background(), []replay.Source{src}, format, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// outPath is where a format is written under dir.
func outPath(dir, format string) string {
	if format == FormatATIF || format == FormatMessages {
		return filepath.Join(dir, "out.jsonl")
	}
	return filepath.Join(dir, "out")
}

// readAll reads every file of an export, by relative path.
func readAll(t *testing.T, out string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{filepath.Base(out): b}
	}
	err = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(out, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sameFiles(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d files, want %d", what, len(got), len(want))
	}
	for p, w := range want {
		if !bytes.Equal(got[p], w) {
			t.Fatalf("%s: %s differs (%d bytes, want %d)", what, p, len(got[p]), len(w))
		}
	}
}

// TestDeterministic exports one history twice in every format, from
// memory and from its archive: the bytes must be the same each time.
func TestDeterministic(t *testing.T) {
	src := planSource(t, textRun, "det-1", true)
	arch := filepath.Join(t.TempDir(), "det-1.rla")
	if _, err := replay.Export(context.Background(), src, arch, replay.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := replay.OpenArchive(arch)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			first := exportTo(t, src, format, outPath(t.TempDir(), format))
			want := readAll(t, first.Out)
			// An export is for sharing: its files are readable by all, not
			// private as the temporary files they were written to.
			filepath.WalkDir(first.Out, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				if st, _ := d.Info(); d.Type().IsRegular() && st.Mode().Perm() != 0o644 {
					t.Errorf("%s: mode %v, want -rw-r--r--", p, st.Mode().Perm())
				}
				return nil
			})
			again := exportTo(t, src, format, outPath(t.TempDir(), format))
			sameFiles(t, "second export", readAll(t, again.Out), want)
			fromArchive := exportTo(t, a, format, outPath(t.TempDir(), format))
			sameFiles(t, "export from the archive", readAll(t, fromArchive.Out), want)
			// With room for two attempt summaries in memory, the fold reads
			// nearly every attempt back from the store (attempts.go): the
			// same files.
			defer func(n int) { attemptsInMemory = n }(attemptsInMemory)
			attemptsInMemory = 2
			stored := exportTo(t, a, format, outPath(t.TempDir(), format))
			sameFiles(t, "export with the attempts in the store", readAll(t, stored.Out), want)
			if len(first.Heads) != 1 || first.Heads[0].Head.Size != uint64(len(src.facts)) || first.Heads[0].Head.Root == "" {
				t.Errorf("heads %+v: want the head of all %d facts", first.Heads, len(src.facts))
			}
		})
	}
}

// TestParquetRows reads the Parquet tables back and counts rows against
// the facts and decisions of the run.
func TestParquetRows(t *testing.T) {
	src := planSource(t, textRun, "rows-1", true)
	want := map[string]int64{}
	ids := map[string]bool{}
	for _, f := range src.facts {
		ev, err := events.Decode(f.Value)
		if err != nil {
			t.Fatal(err)
		}
		if ids[ev.ID] {
			continue
		}
		ids[ev.ID] = true
		switch ev.Type {
		case events.TypeAttemptStarted:
			want["attempts"]++
		case events.TypeTurnGenerated:
			want["turns"]++
		case events.TypeToolCalled:
			want["tool_calls"]++
		case events.TypeTaskRegistered:
			want["tasks"]++
		}
	}
	fold, store := projections.NewFold(src.run), projections.NewMemStore()
	for _, f := range src.facts {
		ds, _ := fold.Apply(store, f.Record())
		for _, d := range ds {
			if d.Kind == projections.KindBatchSealed {
				want["batches"]++
				n, _, err := projections.CountSamples(d.Samples)
				if err != nil {
					t.Fatal(err)
				}
				want["samples"] += int64(n)
			}
		}
	}
	if want["batches"] < 2 || want["samples"] == 0 {
		t.Fatalf("the run seals %d batches of %d samples: too small to test", want["batches"], want["samples"])
	}
	res := exportTo(t, src, FormatParquet, filepath.Join(t.TempDir(), "out"))
	for _, f := range res.Files {
		r, err := file.OpenParquetFile(filepath.Join(res.Out, f.Path), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.NumRows(); got != want[f.Table] || f.Rows != got {
			t.Errorf("%s: %d rows (reported %d), want %d", f.Table, got, f.Rows, want[f.Table])
		}
		md := r.MetaData()
		if md.GetCreatedBy() != CreatedBy {
			t.Errorf("%s: created_by %q", f.Table, md.GetCreatedBy())
		}
		if kv := md.KeyValueMetadata().FindValue("rolloutledger.heads"); kv == nil || !strings.Contains(*kv, res.Heads[0].Head.Root) {
			t.Errorf("%s: the footer does not name the ledger head %s", f.Table, res.Heads[0].Head.Root)
		}
		r.Close()
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	src := planSource(t, simulate.Options{Seed: 3, Tasks: 4, Steps: 1, BatchGroups: 1, MaxTurns: 8}, "err-1", false)
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		srcs   []replay.Source
		format string
		out    string
		want   string
		is     error
	}{
		{"unknown format", []replay.Source{src}, "csv", filepath.Join(dir, "x"), `unknown format "csv"`, ErrFormat},
		{"no facts", []replay.Source{&memSource{run: "empty"}}, FormatParquet, filepath.Join(dir, "y"), "has no facts", ErrNoFacts},
		{"run twice", []replay.Source{src, src}, FormatMessages, filepath.Join(dir, "z.jsonl"), "run err-1 given twice", nil},
		{"jsonl into a directory", []replay.Source{src}, FormatATIF, dir, "is a directory", nil},
		{"no run", nil, FormatParquet, filepath.Join(dir, "w"), "no run to export", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Export(ctx, c.srcs, c.format, c.out, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
	t.Run("parquet over a file", func(t *testing.T) {
		f := filepath.Join(dir, "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Export(ctx, []replay.Source{src}, FormatParquet, f, Options{}); err == nil {
			t.Fatal("a Parquet export into a file: no error")
		}
	})
}

// TestSeveralRuns exports two runs into one dataset: each table holds the
// rows of both, in the order given, and every file names both heads.
func TestSeveralRuns(t *testing.T) {
	o := simulate.Options{Seed: 3, Tasks: 6, Steps: 1, BatchGroups: 1, MaxTurns: 8, Tokens: true}
	a, b := planSource(t, o, "runs-a", false), planSource(t, o, "runs-b", true)
	ctx := context.Background()
	both, err := Export(ctx, []replay.Source{a, b}, FormatParquet, filepath.Join(t.TempDir(), "both"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var one [2]*Result
	for i, src := range []replay.Source{a, b} {
		if one[i], err = Export(ctx, []replay.Source{src}, FormatParquet, filepath.Join(t.TempDir(), "one"), Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(both.Heads) != 2 || both.Heads[0] != one[0].Heads[0] || both.Heads[1] != one[1].Heads[0] {
		t.Fatalf("heads %+v, want those of each run alone: %+v, %+v", both.Heads, one[0].Heads, one[1].Heads)
	}
	for i, f := range both.Files {
		if want := one[0].Files[i].Rows + one[1].Files[i].Rows; f.Rows != want || f.Rows == 0 {
			t.Errorf("%s: %d rows, want %d", f.Table, f.Rows, want)
		}
	}
	line, err := Export(ctx, []replay.Source{a, b}, FormatMessages, filepath.Join(t.TempDir(), "m.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := one[0].Files[0].Rows + one[1].Files[0].Rows; line.Files[0].Rows != want {
		t.Errorf("messages: %d lines, want one per attempt of both runs, %d", line.Files[0].Rows, want)
	}
}

// TestTextAndTokens: the chat and ATIF lines carry the version 2 facts'
// prompt, text, tool input and output, and ATIF the turns' token ids and
// log-probs.
func TestTextAndTokens(t *testing.T) {
	src := planSource(t, textRun, "text-1", true)
	dir := t.TempDir()
	msgs := exportTo(t, src, FormatMessages, filepath.Join(dir, "m.jsonl"))
	atif := exportTo(t, src, FormatATIF, filepath.Join(dir, "a.jsonl"))
	var chat struct {
		Messages []struct {
			Role, Content string
			ToolCalls     []struct {
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
	}
	first := func(res *Result) []byte {
		b, err := os.ReadFile(res.Out)
		if err != nil {
			t.Fatal(err)
		}
		return b[:bytes.IndexByte(b, '\n')]
	}
	if err := json.Unmarshal(first(msgs), &chat); err != nil {
		t.Fatal(err)
	}
	m := chat.Messages
	if len(m) < 3 || !strings.HasPrefix(m[0].Content, "Fix the failing test of ") || !strings.HasPrefix(m[1].Content, "turn 0 of ") {
		t.Fatalf("messages %+v: want the task's prompt, then the first turn's text", m)
	}
	if len(m[1].ToolCalls) > 0 && (!strings.Contains(m[1].ToolCalls[0].Function.Arguments, "--call 0") || !strings.HasPrefix(m[2].Content, "exit ")) {
		t.Errorf("first tool call %+v and result %q: want the input and the output", m[1].ToolCalls[0], m[2].Content)
	}
	var tr struct {
		Steps []struct {
			Message string
			Metrics *struct {
				CompletionTokens   int64     `json:"completion_tokens"`
				CompletionTokenIDs []int32   `json:"completion_token_ids"`
				Logprobs           []float32 `json:"logprobs"`
			}
		}
	}
	if err := json.Unmarshal(first(atif), &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Steps) < 2 || tr.Steps[1].Metrics == nil {
		t.Fatalf("trajectory of %d steps: want the prompt, then a turn with metrics", len(tr.Steps))
	}
	s := tr.Steps[1].Metrics
	if n := s.CompletionTokens; n == 0 || int64(len(s.CompletionTokenIDs)) != n || int64(len(s.Logprobs)) != n {
		t.Errorf("first turn: %d completion tokens, %d ids, %d log-probs", n, len(s.CompletionTokenIDs), len(s.Logprobs))
	}
}

// An export folds under the configuration the run's decisions recorded,
// as replay does, not this build's defaults: a run.started that sets
// nothing takes the recorded values, so the exported batches are the ones
// the ledger sealed. A run whose decisions were made under other rules is
// refused, not exported under these.
func TestExportFoldsUnderRecordedConfig(t *testing.T) {
	const run = "recorded-config"
	plan, err := simulate.Generate(simulate.Options{Seed: 5, Tasks: 12, Steps: 3, BatchGroups: 2, MaxTurns: 12}, run)
	if err != nil {
		t.Fatal(err)
	}
	recorded := events.DefaultConfig()
	recorded.BatchGroups, recorded.EfficiencyWeight, recorded.MinProbes = 2, 0.3, 2
	m := &memSource{run: run}
	fold, store := projections.NewFoldWith(run, projections.FoldOptions{Recorded: &recorded}), projections.NewMemStore()
	var digests []string
	for i, ev := range plan.All() {
		if rs, ok := ev.Data.(*events.RunStarted); ok {
			rs.Config = events.RunConfig{} // every field from the recorded config
		}
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := replay.Fact{Seq: uint64(i + 1), Partition: 0, Offset: int64(i), Value: v}
		m.facts = append(m.facts, f)
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			m.decisions = append(m.decisions, replay.Recorded{Offset: int64(len(m.decisions)), Value: d.Value})
			if d.Kind == projections.KindBatchSealed {
				mf, err := projections.ManifestOf(d.Value)
				if err != nil {
					t.Fatal(err)
				}
				digests = append(digests, mf.Digest)
			}
		}
	}
	if len(digests) == 0 {
		t.Fatal("the run sealed no batch under its recorded config; nothing to compare")
	}
	r, err := Build(context.Background(), m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range r.Batches {
		got = append(got, b.Manifest.Digest)
	}
	if !slices.Equal(got, digests) {
		t.Fatalf("exported batches %v, the ledger sealed %v", got, digests)
	}
	if r.Config != recorded {
		t.Errorf("export's config %+v, recorded %+v", r.Config, recorded)
	}

	// The same decisions, as if made under other rules.
	other := &memSource{run: run, facts: m.facts}
	for _, d := range m.decisions {
		v := bytes.Replace(d.Value, fmt.Appendf(nil, `"rule_version":%d`, projections.RuleVersion), []byte(`"rule_version":1`), 1)
		other.decisions = append(other.decisions, replay.Recorded{Offset: d.Offset, Value: v})
	}
	if _, err := Build(context.Background(), other, Options{}); !errors.Is(err, replay.ErrRuleVersion) {
		t.Fatalf("export of a run decided under rules v1: %v, want replay.ErrRuleVersion", err)
	}
}

// The tables' samples, and the trajectories' turn tokens, wait on disk,
// not in memory, between the fold and the files that carry them, in the
// export's scratch directory; nothing of them is left there once the
// export is written, and the samples table holds every sample of every
// batch.
func TestSamplesSpillAndAreRemoved(t *testing.T) {
	src := planSource(t, textRun, "spill-1", true)
	scratch := t.TempDir()
	atif := filepath.Join(t.TempDir(), "atif.jsonl")
	if _, err := Export(context.Background(), []replay.Source{src}, FormatATIF, atif, Options{ScratchDir: scratch}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(atif); err != nil || !bytes.Contains(b, []byte(`"completion_token_ids":[`)) {
		t.Errorf("the trajectories carry no token ids (%v)", err)
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("the ATIF export left %d entries in its scratch directory: %v", len(left), left)
	}
	out := filepath.Join(t.TempDir(), "parquet")
	res, err := Export(context.Background(), []replay.Source{src}, FormatParquet, out, Options{ScratchDir: scratch})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("the export left %d entries in its scratch directory: %v", len(left), left)
	}
	var want int64
	for _, d := range src.decisions {
		if info, err := projections.ManifestOf(d.Value); err == nil {
			want += int64(len(info.Groups)) // at least one sample per group
		}
	}
	for _, f := range res.Files {
		if f.Table == "samples" && (f.Rows == 0 || f.Rows < want) {
			t.Errorf("samples table: %d rows, want at least %d", f.Rows, want)
		}
	}
}
