package explore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func bundleModel() *Model {
	m := NewModel("r")
	feed(m, &events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"})
	return m
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A bundle is written only into a missing or empty directory, or with
// Force; it never writes through a link, and leaves nothing of what the
// directory held.
func TestBundleDirectory(t *testing.T) {
	m := bundleModel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir, victim string)
		force   bool
		refused bool
	}{
		{"missing", func(t *testing.T, dir, victim string) {}, false, false},
		{"empty", func(t *testing.T, dir, victim string) { mkdir(t, dir) }, false, false},
		{"not empty", func(t *testing.T, dir, victim string) {
			mkdir(t, dir)
			write(t, filepath.Join(dir, "stale.js"))
		}, false, true},
		{"not empty, forced", func(t *testing.T, dir, victim string) {
			mkdir(t, dir)
			write(t, filepath.Join(dir, "stale.js"))
		}, true, false},
		{"links inside", func(t *testing.T, dir, victim string) {
			mkdir(t, filepath.Join(dir, "data"))
			symlink(t, victim, filepath.Join(dir, "index.html"))
			symlink(t, victim, filepath.Join(dir, "data", "index.js"))
		}, false, true},
		{"links inside, forced", func(t *testing.T, dir, victim string) {
			mkdir(t, filepath.Join(dir, "data"))
			symlink(t, victim, filepath.Join(dir, "index.html"))
			symlink(t, victim, filepath.Join(dir, "data", "index.js"))
			symlink(t, filepath.Dir(victim), filepath.Join(dir, "data", "0.js"))
		}, true, false},
		{"a link itself", func(t *testing.T, dir, victim string) {
			symlink(t, filepath.Dir(victim), dir)
		}, true, true},
		{"a file", func(t *testing.T, dir, victim string) { write(t, dir) }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			victimDir := filepath.Join(root, "elsewhere")
			mkdir(t, victimDir)
			victim := filepath.Join(victimDir, "precious")
			write(t, victim)
			dir := filepath.Join(root, "out")
			tc.prepare(t, dir, victim)
			_, err := WriteBundle(dir, m, BundleOptions{Force: tc.force})
			if got := readString(t, victim); got != "keep" {
				t.Errorf("the file a link points to was overwritten: %.60q", got)
			}
			if names, _ := os.ReadDir(victimDir); len(names) != 1 {
				t.Errorf("the directory a link points to holds %d entries, want 1", len(names))
			}
			if tc.refused {
				if !errors.Is(err, ErrBundleDir) {
					t.Fatalf("got error %v, want %v", err, ErrBundleDir)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				if e.Name() != "out" && e.Name() != "elsewhere" {
					t.Errorf("left behind beside the bundle: %s", e.Name())
				}
			}
			if tc.refused {
				return
			}
			fi, err := os.Lstat(filepath.Join(dir, "index.html"))
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("index.html is not a regular file: %v %v", fi, err)
			}
			if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
				t.Errorf("the bundle directory's mode is %v, want 0755", fi.Mode().Perm())
			}
			for _, stale := range []string{"stale.js", "data/0.js"} {
				if fi, err := os.Lstat(filepath.Join(dir, stale)); err == nil && !fi.Mode().IsRegular() {
					t.Errorf("%s: what the directory held is still there", stale)
				} else if stale == "stale.js" && err == nil {
					t.Errorf("%s: what the directory held is still there", stale)
				}
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
