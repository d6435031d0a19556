package main_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/cli"
)

// compose is the part of the Compose file format the stack relies on.
type compose struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Build       any            `yaml:"build"`
		Command     []string       `yaml:"command"`
		Environment map[string]any `yaml:"environment"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Volumes []string `yaml:"volumes"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// No Docker engine runs where the tests do, so the compose file is checked
// structurally: every service has an image or a build, the servers have
// health checks the ledger waits for, named volumes are declared, and every
// ledger command in it is accepted by this build's command line.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(false)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"kafka", "postgres", "ingest"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	for name, s := range c.Services {
		if (s.Image == "") == (s.Build == nil) {
			t.Errorf("service %s: want exactly one of image and build", name)
		}
		for dep, d := range s.DependsOn {
			dc, ok := c.Services[dep]
			if !ok {
				t.Errorf("service %s depends on unknown %s", name, dep)
				continue
			}
			if d.Condition == "service_healthy" && dc.Healthcheck == nil {
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
		for _, v := range s.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				if _, ok := c.Volumes[vol]; !ok {
					t.Errorf("service %s mounts undeclared volume %s", name, vol)
				}
			}
		}
		if s.Build != nil && len(s.Command) > 0 {
			args := append(append([]string{}, s.Command...), "--help")
			if code := cli.Main(args, io.Discard, io.Discard); code != 0 {
				t.Errorf("service %s: command %v is not accepted by rolloutledger (exit %d)", name, s.Command, code)
			}
		}
	}
	if _, err := os.Stat("../../Dockerfile"); err != nil {
		t.Errorf("services build from the Dockerfile: %v", err)
	}
}
