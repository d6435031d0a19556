package main_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/cli"
)

// run runs the command line in-process with the token variables cleared
// unless env sets them.
func run(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	for _, k := range []string{"ROLLOUTLEDGER_TOKENS", "ROLLOUTLEDGER_TOKENS_FILE"} {
		t.Setenv(k, env[k])
	}
	var out bytes.Buffer
	code := cli.Main(args, &out, &out)
	return code, out.String()
}

func TestServeRefusesToStartWithoutTokens(t *testing.T) {
	// Nothing listens on port 1: serve must refuse before it needs Kafka.
	code, out := run(t, nil, "serve", "--brokers", "127.0.0.1:1", "--addr", "127.0.0.1:0")
	if code == 0 {
		t.Fatal("serve without tokens exited 0")
	}
	for _, want := range []string{"no API tokens", "--tokens-file", "ROLLOUTLEDGER_TOKENS_FILE", "ROLLOUTLEDGER_TOKENS", "--insecure"} {
		if !strings.Contains(out, want) {
			t.Errorf("the message does not mention %s:\n%s", want, out)
		}
	}
}

func TestServeTokenConfigurationErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("- {name: ops, token: 0123456789abcdef0123456789abcdef, role: admin}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- {name: ops, token: hunter2, role: boss}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"insecure and tokens", nil, []string{"--tokens-file", good, "--insecure"}, []string{"--insecure and API tokens both given"}},
		{"bad token file", nil, []string{"--tokens-file", bad}, []string{`token "ops"`, "role is not one of", "at least 32"}},
		{"bad inline tokens", map[string]string{"ROLLOUTLEDGER_TOKENS": "[{"}, nil, []string{"$ROLLOUTLEDGER_TOKENS"}},
		{"missing token file", map[string]string{"ROLLOUTLEDGER_TOKENS_FILE": filepath.Join(dir, "nope.yaml")}, nil, []string{"nope.yaml"}},
		{"half a TLS pair", nil, []string{"--tokens-file", good, "--tls-cert", good}, []string{"--tls-key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--brokers", "127.0.0.1:1", "--addr", "127.0.0.1:0"}, tc.args...)
			code, out := run(t, tc.env, args...)
			if code == 0 {
				t.Fatalf("exit 0, want a refusal:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("got %q, want it to mention %q", out, w)
				}
			}
			if strings.Contains(out, "hunter2") || strings.Contains(out, "0123456789abcdef0123456789abcdef") {
				t.Errorf("the error shows a secret: %s", out)
			}
		})
	}
}

func TestDevListensOnLoopbackOnly(t *testing.T) {
	for _, args := range [][]string{
		{"dev", "--addr", "0.0.0.0:0", "--kafka-addr", "127.0.0.1:0"},
		{"dev", "--addr", ":7070", "--kafka-addr", "127.0.0.1:0"},
		{"dev", "--addr", "127.0.0.1:0", "--kafka-addr", "[::]:0"},
		{"dev", "--addr", "192.0.2.1:7070", "--kafka-addr", "127.0.0.1:0"},
	} {
		code, out := run(t, nil, append(args, "--data", t.TempDir())...)
		if code == 0 || !strings.Contains(out, "loopback only") {
			t.Errorf("%v: got exit %d %q, want a refusal saying dev listens on loopback only", args, code, out)
		}
	}
}
