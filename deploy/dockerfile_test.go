package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	digest "github.com/opencontainers/go-digest"
)

// offlineImages answers BuildKit's base-image lookups without a registry:
// the lint rules need an image's config, not its layers.
type offlineImages struct{}

func (offlineImages) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{}, "rootfs": map[string]any{"type": "layers"}})
	return ref, digest.FromBytes(cfg), cfg, nil
}

// The Dockerfile passes every lint rule of BuildKit (what `docker build
// --check` runs), including the experimental ones, and keeps the runtime
// image's promises: a non-root user, a health check, the binary as the
// entrypoint.
func TestDockerfileLint(t *testing.T) {
	dt, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	st := llb.Local("context")
	def, err := st.Marshal(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	src := llb.NewSourceMap(&st, "Dockerfile", "Dockerfile", dt)
	src.Definition = def
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{
		SourceMap:    src,
		MetaResolver: offlineImages{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Fatalf("Dockerfile does not build: %s", res.Error.Message)
	}
	for _, w := range res.Warnings {
		line := int32(0)
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = w.Location.Ranges[0].Start.Line
		}
		t.Errorf("Dockerfile:%d: %s: %s (%s)", line, w.RuleName, w.Detail, w.URL)
	}

	ast, err := parser.Parse(strings.NewReader(string(dt)))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages; want a build stage and a runtime stage", len(stages))
	}
	final := stages[len(stages)-1]
	var user, entry string
	var health *instructions.HealthCheckCommand
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.HealthCheckCommand:
			health = c
		case *instructions.EntrypointCommand:
			entry = strings.Join(c.CmdLine, " ")
		}
	}
	if user == "" || slices.Contains([]string{"root", "0", "0:0", "root:root"}, user) {
		t.Errorf("the runtime stage runs as %q; want a non-root user", user)
	}
	if health == nil || len(health.Health.Test) < 2 || health.Health.Test[0] != "CMD" {
		t.Errorf("the runtime stage has no exec-form HEALTHCHECK (the image has no shell)")
	}
	if entry != "/usr/local/bin/rolloutledger" {
		t.Errorf("entrypoint %q, want the ledger binary", entry)
	}
	if strings.Contains(final.BaseName, "golang") {
		t.Errorf("the runtime stage is based on %s: the toolchain ships with the image", final.BaseName)
	}
}
