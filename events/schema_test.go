package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// schemaFiles are the committed copies of events.JSONSchema(): the
// repository's, and the one the Python SDK ships in its package.
var schemaFiles = []string{
	filepath.Join("schema", "catalogue.schema.json"),
	filepath.Join("..", "sdk", "python", "src", "rolloutledger", "catalogue.schema.json"),
}

// TestSchemaIsCurrent fails while a committed schema differs from the one
// the catalogue's types, tags and rules make today.
func TestSchemaIsCurrent(t *testing.T) {
	want := events.JSONSchema()
	for _, path := range schemaFiles {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v: run go generate ./events/...", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale, %s: run go generate ./events/...", path, firstDifference(got, want))
		}
	}
}

func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, want %q", i+1, clipped(strings.TrimSpace(gl)), clipped(strings.TrimSpace(wl)))
		}
	}
	return "it differs"
}

type schemaDoc struct {
	Defs  map[string]json.RawMessage `json:"$defs"`
	OneOf []struct {
		Properties struct {
			Type struct{ Const events.Type } `json:"type"`
			V    struct{ Const int }         `json:"v"`
			Data struct {
				Ref string `json:"$ref"`
			} `json:"data"`
		} `json:"properties"`
	} `json:"oneOf"`
}

// TestSchemaCoversCatalogue: every fact type has its current version's
// branch, and every branch its schema.
func TestSchemaCoversCatalogue(t *testing.T) {
	var doc schemaDoc
	if err := json.Unmarshal(events.JSONSchema(), &doc); err != nil {
		t.Fatal(err)
	}
	branches := map[string]bool{}
	for _, b := range doc.OneOf {
		p := b.Properties
		branches[fmt.Sprintf("%s v%d", p.Type.Const, p.V.Const)] = true
		if _, ok := doc.Defs[strings.TrimPrefix(p.Data.Ref, "#/$defs/")]; !ok {
			t.Errorf("%s v%d: got $ref %q, want a schema in $defs", p.Type.Const, p.V.Const, p.Data.Ref)
		}
	}
	for _, typ := range events.FactTypes() {
		if b := fmt.Sprintf("%s v%d", typ, events.CurrentVersion(typ)); !branches[b] {
			t.Errorf("no branch of oneOf for %s", b)
		}
	}
}

// TestSchemaKeywordsDocumented: every keyword of the schema's own, every
// member of a rule and every format is explained in events/schema/README.md.
func TestSchemaKeywordsDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("schema", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(events.JSONSchema(), &root); err != nil {
		t.Fatal(err)
	}
	words := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if strings.HasPrefix(k, "x-rolloutledger-") {
					words[k] = true
				}
				if k == "x-rolloutledger-rules" {
					for _, r := range e.([]any) {
						for member := range r.(map[string]any) {
							words[member] = true
						}
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(root)
	for name := range root["x-rolloutledger-formats"].(map[string]any) {
		words[name] = true
	}
	for _, w := range slices.Sorted(func(yield func(string) bool) {
		for w := range words {
			if !yield(w) {
				return
			}
		}
	}) {
		if !bytes.Contains(readme, []byte("`"+w+"`")) {
			t.Errorf("schema/README.md does not explain `%s`", w)
		}
	}
}
