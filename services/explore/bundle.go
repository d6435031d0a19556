package explore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Bundle data: every view the server would answer for the run, each as a
// script (data/<n>.js) that hands its JSON to the page, because a page
// opened from file:// may not fetch() its neighbours but may load them
// with <script>. data/index.js maps each API path to its file.

// ErrBundleDir is the error for a directory a bundle may not be written
// to: a symbolic link, not a directory, or not empty without Force.
var ErrBundleDir = errors.New("explore: bundle directory")

// BundleOptions tune [WriteBundle].
type BundleOptions struct {
	// Now decides whether the run counts as live (the bundle never
	// updates); zero means time.Now.
	Now time.Time
	// Force replaces a directory that is not empty, whatever it holds.
	Force bool
}

// WriteBundle writes the front end and every view of m as a directory dir,
// so that dir/index.html opens the explorer on the run from disk, with no
// server. The bundle is built in a fresh directory beside dir and renamed
// into place, so dir never holds a half-written bundle nor files of an
// earlier one, and nothing is written through a link: dir may be missing
// or empty, or, with o.Force, hold anything (which is removed); a dir that
// is a symbolic link is refused.
func WriteBundle(dir string, m *Model, o BundleOptions) (files int, err error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	dir = filepath.Clean(dir)
	exists, err := checkBundleDir(dir, o.Force)
	if err != nil {
		return 0, err
	}
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return 0, fmt.Errorf("explore: bundle: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-")
	if err != nil {
		return 0, fmt.Errorf("explore: bundle: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if files, err = writeBundle(tmp, m, o.Now); err != nil {
		return files, err
	}
	// MkdirTemp made it private; a bundle is for sharing.
	if err = os.Chmod(tmp, 0o755); err != nil {
		return files, err
	}
	if !exists {
		if err = os.Rename(tmp, dir); err != nil {
			return files, fmt.Errorf("explore: bundle: %w", err)
		}
		return files, nil
	}
	// dir is moved aside, then removed: RemoveAll removes links, never
	// what they point to.
	old, err := os.MkdirTemp(parent, "."+base+".old-")
	if err != nil {
		return files, fmt.Errorf("explore: bundle: %w", err)
	}
	aside := filepath.Join(old, base)
	if err = os.Rename(dir, aside); err != nil {
		os.Remove(old)
		return files, fmt.Errorf("explore: bundle: %w", err)
	}
	if err = os.Rename(tmp, dir); err != nil {
		_ = os.Rename(aside, dir)
		os.RemoveAll(old)
		return files, fmt.Errorf("explore: bundle: %w", err)
	}
	return files, os.RemoveAll(old)
}

// checkBundleDir says whether dir exists, and refuses a dir the bundle may
// not replace.
func checkBundleDir(dir string, force bool) (exists bool, err error) {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("explore: bundle: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return false, fmt.Errorf("%w %s is a symbolic link: give the directory itself", ErrBundleDir, dir)
	case !fi.IsDir():
		return false, fmt.Errorf("%w %s is not a directory", ErrBundleDir, dir)
	}
	if force {
		return true, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return false, fmt.Errorf("explore: bundle: %w", err)
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return false, fmt.Errorf("%w %s is not empty: give a new or empty directory, or --force to replace it", ErrBundleDir, dir)
	}
	return true, nil
}

// writeBundle writes the bundle into dir, a fresh directory: every file is
// created anew (O_EXCL), never opened through what dir already held.
func writeBundle(dir string, m *Model, now time.Time) (files int, err error) {
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		return 0, err
	}
	err = fs.WalkDir(Assets(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Assets(), p)
		if err != nil {
			return err
		}
		if p == "index.html" {
			// The bundle's page loads its data index before the app.
			b = bytes.Replace(b, []byte(`<script src="app.js">`), []byte(`<script src="data/index.js"></script>`+"\n"+`<script src="app.js">`), 1)
		}
		files++
		return createFile(filepath.Join(dir, p), b)
	})
	if err != nil {
		return files, err
	}
	index := map[string]string{}
	put := func(apiPath string, v any) error {
		name := "data/" + strconv.Itoa(len(index)) + ".js"
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("explore: bundle %s: %w", apiPath, err)
		}
		p, _ := json.Marshal(apiPath)
		script := make([]byte, 0, len(b)+len(p)+16)
		script = append(script, "RL_PUT("...)
		script = append(script, p...)
		script = append(script, ',')
		script = append(script, b...)
		script = append(script, ");\n"...)
		if err := createFile(filepath.Join(dir, name), script); err != nil {
			return err
		}
		index[apiPath] = name
		files++
		return nil
	}
	snap, err := m.Snapshot()
	if err != nil {
		return files, err
	}
	base := "/v1/runs/" + m.Run() + "/explore"
	if err := put("/v1/explore/runs", map[string]any{"runs": []RunSummary{snap.Summary(now)}}); err != nil {
		return files, err
	}
	// A bundle's run view shows every step, as its steps list does: it
	// is read from disk, whole.
	rv, err := snap.runView(now, 0)
	if err != nil {
		return files, err
	}
	if err := put(base, rv); err != nil {
		return files, err
	}
	steps, err := snap.Steps("", 0)
	if err != nil {
		return files, err
	}
	if err := put(base+"/steps", steps); err != nil {
		return files, err
	}
	// Each view is put as it is made, so the bundle's memory is that of
	// one view, not of the run.
	each := func(kind byte, fn func(id string) error) error {
		return snap.r.Scan([]byte{kind}, nil, func(k, v []byte) (bool, error) {
			id := string(v)
			if kind == kStep {
				id = strconv.FormatUint(binary.BigEndian.Uint64(k[1:]), 10)
			}
			return true, fn(id)
		})
	}
	err = each(kStep, func(seq string) error {
		n, _ := strconv.ParseUint(seq, 10, 64)
		v, ok, err := snap.StepView(n)
		if err != nil || !ok {
			return err
		}
		return put(base+"/steps/"+seq, v)
	})
	if err != nil {
		return files, err
	}
	err = each(kGroupOrd, func(id string) error {
		v, _, err := snap.GroupView(id)
		if err != nil {
			return err
		}
		if err := put(base+"/groups/"+id, v); err != nil {
			return err
		}
		sv, _, err := snap.SideView(id)
		if err != nil {
			return err
		}
		return put(base+"/side-by-side/"+id, sv)
	})
	if err != nil {
		return files, err
	}
	all, err := snap.Attempts("", 0)
	if err != nil {
		return files, err
	}
	if err := put(base+"/attempts", all); err != nil {
		return files, err
	}
	err = each(kAttemptOrd, func(id string) error {
		v, _, err := snap.AttemptView(id)
		if err != nil {
			return err
		}
		return put(base+"/attempts/"+id, v)
	})
	if err != nil {
		return files, err
	}
	tasks, err := snap.Tasks("", 0)
	if err != nil {
		return files, err
	}
	if err := put(base+"/tasks", tasks); err != nil {
		return files, err
	}
	err = each(kTaskOrd, func(id string) error {
		v, _, err := snap.TaskView(id, "", 0)
		if err != nil {
			return err
		}
		return put(base+"/tasks/"+id, v)
	})
	if err != nil {
		return files, err
	}
	ib, err := json.Marshal(map[string]any{"run": m.Run(), "files": index})
	if err != nil {
		return files, err
	}
	files++
	return files, createFile(filepath.Join(dir, "data", "index.js"), append(append([]byte("window.RL_BUNDLE_INDEX = "), ib...), ";\n"...))
}

// createFile writes a new file; it fails if path exists (as anything).
func createFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
