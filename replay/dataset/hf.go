package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// WriteHF writes runs as a Hugging Face datasets repository layout in dir:
// each table as one Parquet shard, data/<table>/train-00000-of-00001.parquet
// (the files of WriteParquet, byte for byte), and README.md, the dataset
// card: a YAML header whose configs name each table's files, then the
// tables' schemas, each run's configuration, and the ledger head each run
// was exported at with the SHA-256 of every shard, so a published dataset
// can be checked against the ledger (`rolloutledger prove`, `replay
// --verify`).
func WriteHF(dir string, runs []*Run) ([]File, error) {
	var files []File
	for _, t := range Tables {
		f, err := writeTableFile(dir, "data/"+t+"/train-00000-of-00001.parquet", t, runs)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	card := datasetCard(runs, files)
	path := filepath.Join(dir, "README.md")
	if err := writeFileAtomic(path, card); err != nil {
		return nil, err
	}
	return append(files, fileOf("README.md", "", 0, card)), nil
}

func datasetCard(runs []*Run, files []File) []byte {
	var b bytes.Buffer
	b.WriteString("---\nconfigs:\n")
	for i, t := range Tables {
		fmt.Fprintf(&b, "- config_name: %s\n", t)
		if i == 0 {
			b.WriteString("  default: true\n")
		}
		fmt.Fprintf(&b, "  data_files:\n  - split: train\n    path: data/%s/*.parquet\n", t)
	}
	b.WriteString("tags:\n- reinforcement-learning\n- agentic\n- rolloutledger\n---\n\n")
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Run
	}
	fmt.Fprintf(&b, "# rolloutledger export: %s\n\n", strings.Join(names, ", "))
	b.WriteString("Exported by `rolloutledger export --format hf` from the ledger's fact log,\n" +
		"folded with the projection rules of rule version " + fmt.Sprint(runs[0].RuleVersion) + ". The same history\n" +
		"exports to the same bytes: re-export the run and compare the SHA-256 below,\n" +
		"or check the ledger head against the ledger's recorded heads\n" +
		"(`rolloutledger replay --verify`, `rolloutledger prove`).\n\n")
	b.WriteString("## Ledger heads\n\n| run | facts | tree size | tree root |\n|---|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| `%s` | %d | %d | `%s` |\n", r.Run, r.Facts, r.Head.Size, r.Head.Root)
	}
	b.WriteString("\n## Files\n\n| file | rows | bytes | sha256 |\n|---|---|---|---|\n")
	for _, f := range files {
		fmt.Fprintf(&b, "| `%s` | %d | %d | `%s` |\n", f.Path, f.Rows, f.Bytes, f.SHA256)
	}
	b.WriteString("\n## Runs\n\n")
	for _, r := range runs {
		cfg, _ := json.MarshalIndent(struct {
			Model    string `json:"model"`
			Harness  string `json:"harness"`
			Notes    string `json:"notes,omitempty"`
			Declared any    `json:"declared_config"`
			Config   any    `json:"effective_config"`
			Counts   any    `json:"decisions"`
		}{r.Model, r.Harness, r.Notes, r.Declared, r.Config, r.Decisions}, "", "  ")
		fmt.Fprintf(&b, "### `%s`\n\n```json\n%s\n```\n\n", r.Run, cfg)
	}
	b.WriteString("## Schema\n\n")
	for _, t := range Tables {
		fmt.Fprintf(&b, "### `%s`\n\n| column | type | nullable |\n|---|---|---|\n", t)
		for _, f := range fieldsOf(t) {
			fmt.Fprintf(&b, "| `%s` | %s | %v |\n", f.Name, f.Type, f.Nullable)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// fieldsOf is a table's Arrow fields.
func fieldsOf(table string) []arrow.Field {
	var fs []arrow.Field
	add := func(f arrow.Field) { fs = append(fs, f) }
	switch table {
	case "attempts":
		for _, c := range attemptColumns {
			add(c.field)
		}
	case "turns":
		for _, c := range turnColumns {
			add(c.field)
		}
	case "tool_calls":
		for _, c := range toolCallColumns {
			add(c.field)
		}
	case "batches":
		for _, c := range batchColumns {
			add(c.field)
		}
	case "samples":
		for _, c := range sampleColumns {
			add(c.field)
		}
	case "tasks":
		for _, c := range taskColumns {
			add(c.field)
		}
	}
	return fs
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := createBeside(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	return commitFile(tmp, path, err)
}
