package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// explore --archive --out writes a bundle whose page loads its data index
// and whose index names a file for the run view; without --out it says
// what is missing.
func TestExploreBundle(t *testing.T) {
	dir := t.TempDir()
	archive := writeArchive(t, dir, nil)
	out := filepath.Join(dir, "bundle")
	code, stdout, stderr := run(t, "explore", "--archive", archive, "--out", out)
	if code != 0 {
		t.Fatalf("explore: exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stdout, "open file://"+out+"/index.html") {
		t.Errorf("stdout does not say what to open: %s", stdout)
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<script src="data/index.js"></script>`) {
		t.Errorf("the bundle's page does not load its data index:\n%s", page)
	}
	index, err := os.ReadFile(filepath.Join(out, "data", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(index), `"/v1/runs/cli-run/explore":"data/`) {
		t.Errorf("the data index names no run view: %.300s", index)
	}
	// A second bundle into the same directory is refused, unless --force,
	// which replaces all it held.
	stale := filepath.Join(out, "stale.js")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "explore", "--archive", archive, "--out", out); code == 0 || !strings.Contains(stderr, "not empty") || !strings.Contains(stderr, "--force") {
		t.Errorf("explore into a non-empty --out: exit %d, stderr %q; want a refusal naming --force", code, stderr)
	}
	if code, _, stderr := run(t, "explore", "--archive", archive, "--out", out, "--force"); code != 0 {
		t.Errorf("explore --force: exit %d, stderr %s", code, stderr)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("explore --force left a file the directory held before")
	}
	if code, _, stderr := run(t, "explore", "--archive", archive); code == 0 || !strings.Contains(stderr, "--out is required") {
		t.Errorf("explore without --out: exit %d, stderr %q; want a failure naming --out", code, stderr)
	}
}
