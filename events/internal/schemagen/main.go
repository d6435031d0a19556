// Command schemagen writes the catalogue's JSON Schema, [events.JSONSchema],
// where the repository keeps it: events/schema/catalogue.schema.json, and
// the copy the Python SDK ships inside its package. Run it with
//
//	go generate ./events/...
//
// which runs it in the events directory; events' tests fail while either
// file differs from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rolloutledger/rolloutledger/events"
)

// outputs are the files written, relative to the events directory.
var outputs = []string{
	filepath.Join("schema", "catalogue.schema.json"),
	filepath.Join("..", "sdk", "python", "src", "rolloutledger", "catalogue.schema.json"),
}

func main() {
	dir := flag.String("dir", ".", "the events package's directory")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	schema := events.JSONSchema()
	for _, out := range outputs {
		path := filepath.Join(dir, out)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, schema) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, schema, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
