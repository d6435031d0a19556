package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/replay"
)

// TestExportDataset exports an archive as each dataset format through the
// command line, twice: same bytes, the head printed; and refuses what it
// cannot do, saying why.
func TestExportDataset(t *testing.T) {
	dir := t.TempDir()
	arch := writeArchive(t, dir, nil)
	for _, format := range []string{"parquet", "hf", "atif", "messages"} {
		t.Run(format, func(t *testing.T) {
			var outs [2]string
			for i := range outs {
				outs[i] = filepath.Join(t.TempDir(), "out")
				code, stdout, stderr := run(t, "export", "--archive", arch, "--format", format, "--out", outs[i])
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				if !strings.Contains(stdout, "run cli-run: ") || !strings.Contains(stdout, "ledger head ") {
					t.Fatalf("output does not name the run and its ledger head:\n%s", stdout)
				}
			}
			a, b := treeBytes(t, outs[0]), treeBytes(t, outs[1])
			if len(a) == 0 || len(a) != len(b) {
				t.Fatalf("%d files, then %d", len(a), len(b))
			}
			for p := range a {
				if a[p] != b[p] {
					t.Errorf("%s differs between two exports of one archive", p)
				}
			}
		})
	}
	out := filepath.Join(dir, "x")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--archive", arch, "--format", "csv", "--out", out}, `--format "csv": want archive, parquet, hf, atif, messages`},
		{[]string{"--archive", arch, "--format", "parquet"}, "--out is required"},
		{[]string{"--archive", arch, "--run", "other", "--format", "parquet", "--out", out}, "--run other: the archive " + arch + " holds run cli-run"},
		{[]string{"--archive", arch, "--runs", "a,b", "--format", "parquet", "--out", out}, "an archive holds one run"},
		{[]string{"--run", "a", "--runs", "b", "--format", "parquet", "--out", out}, "give --run or --runs, not both"},
		{[]string{"--format", "parquet", "--out", out}, "--run (or --runs, or --archive) is required"},
		{[]string{"--archive", arch, "--run", "cli-run", "--out", out}, "--archive and --runs apply to the dataset formats"},
		{[]string{"--archive", filepath.Join(dir, "missing.rla"), "--format", "atif", "--out", out}, "missing.rla"},
	} {
		code, _, stderr := run(t, append([]string{"export"}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("export %s: exit %d, stderr %q; want an error saying %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// treeBytes is every file under root (or root itself), by relative path.
func treeBytes(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The progress wrapper keeps the archive's count of facts, by which the
// export's fold sizes its dedup filter.
func TestProgressSourceFactsBound(t *testing.T) {
	a, err := replay.OpenArchive(writeArchive(t, t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	var src replay.Source = &progressSource{Source: a, begin: func(string) {}}
	b, ok := src.(replay.FactsBounder)
	if !ok || a.Manifest().Facts == 0 || b.FactsBound() != a.Manifest().Facts {
		t.Fatalf("the wrapper's bound is not the archive's %d facts", a.Manifest().Facts)
	}
}
