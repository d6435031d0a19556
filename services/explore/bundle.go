package explore

import (
	"bytes"
	"encoding/json"
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

// WriteBundle writes the front end and every view of m into dir, so that
// dir/index.html opens the explorer on the run from disk, with no server.
// now decides whether the run counts as live (it never updates).
func WriteBundle(dir string, m *Model, now time.Time) (files int, err error) {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
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
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
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
		if err := os.WriteFile(filepath.Join(dir, name), script, 0o644); err != nil {
			return err
		}
		index[apiPath] = name
		files++
		return nil
	}
	base := "/v1/runs/" + m.Run() + "/explore"
	if err := put("/v1/explore/runs", map[string]any{"runs": []RunSummary{m.Summary(now)}}); err != nil {
		return files, err
	}
	if err := put(base, m.RunView(now)); err != nil {
		return files, err
	}
	for seq := range uint64(len(m.batches)) {
		if v, ok := m.StepView(seq + 1); ok {
			if err := put(base+"/steps/"+strconv.FormatUint(seq+1, 10), v); err != nil {
				return files, err
			}
		}
	}
	for _, id := range m.groupList {
		v, _ := m.GroupView(id)
		if err := put(base+"/groups/"+id, v); err != nil {
			return files, err
		}
	}
	if err := put(base+"/attempts", map[string]any{"attempts": m.Attempts()}); err != nil {
		return files, err
	}
	for _, id := range m.attList {
		v, _ := m.AttemptView(id)
		if err := put(base+"/attempts/"+id, v); err != nil {
			return files, err
		}
	}
	if err := put(base+"/tasks", map[string]any{"tasks": m.Tasks()}); err != nil {
		return files, err
	}
	for _, id := range m.taskOrder {
		v, _ := m.TaskView(id)
		if err := put(base+"/tasks/"+id, v); err != nil {
			return files, err
		}
	}
	ib, err := json.Marshal(map[string]any{"run": m.Run(), "files": index})
	if err != nil {
		return files, err
	}
	files++
	return files, os.WriteFile(filepath.Join(dir, "data", "index.js"), append(append([]byte("window.RL_BUNDLE_INDEX = "), ib...), ";\n"...), 0o644)
}
