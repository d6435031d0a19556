package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
)

// Every fact type of the catalogue has a writer role, so a new type is a
// decision, not an accident.
func TestEveryFactTypeHasARole(t *testing.T) {
	for _, typ := range events.FactTypes() {
		if r, ok := auth.FactRoles[typ]; !ok || (r != auth.Producer && r != auth.Trainer) {
			t.Errorf("fact type %s: got role %q, want producer or trainer", typ, r)
		}
	}
	for _, typ := range []events.Type{events.TypeGradientApplied, events.TypePolicyPublished} {
		if auth.Producer.MayAppend(typ) {
			t.Errorf("a producer may append %s", typ)
		}
		if !auth.Trainer.MayAppend(typ) {
			t.Errorf("a trainer may not append %s", typ)
		}
	}
	for _, r := range []auth.Role{auth.Producer, auth.Trainer, auth.Reader} {
		if r.MayAppend("batch.sealed") {
			t.Errorf("%s may append a decision type", r)
		}
	}
}

func TestParseTokens(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, in string
	}{
		{"yaml list", "- name: w\n  token: " + secret + "\n  role: producer\n  runs: [run-a]\n"},
		{"yaml object", "tokens:\n  - name: w\n    sha256: " + auth.Hash(secret) + "\n    role: producer\n    runs: [run-a]\n"},
		{"json list", `[{"name":"w","token":"` + secret + `","role":"producer","runs":["run-a"]}]`},
		{"json object", `{"tokens":[{"name":"w","sha256":"` + auth.Hash(secret) + `","role":"producer","runs":["run-a"]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := auth.ParseTokens("test", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			a, err := auth.New(ts)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := a.Lookup(secret)
			if !ok || p.Name != "w" || p.Role != auth.Producer || !p.InScope("run-a") || p.InScope("run-b") {
				t.Fatalf("got %+v %v, want producer w limited to run-a", p, ok)
			}
			if _, ok := a.Lookup(secret[:len(secret)-1]); ok {
				t.Error("a prefix of the token was accepted")
			}
			if _, ok := a.Lookup(""); ok {
				t.Error("the empty token was accepted")
			}
		})
	}
}

func TestTokenErrors(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"misspelt key", `[{"name":"w","sha265":"x","role":"reader"}]`, []string{"line 1", "unknown key", "did you mean sha256"}},
		{"short token", `[{"name":"w","token":"hunter2","role":"reader"}]`, []string{`token "w"`, "7 characters", "at least 32"}},
		{"bad role", `[{"name":"w","token":"` + secret + `","role":"root"}]`, []string{`token "w"`, "role is not one of"}},
		{"misspelt role", `[{"name":"w","token":"` + secret + `","role":"Producers"}]`, []string{"did you mean producer"}},
		{"both secrets", `[{"name":"w","token":"` + secret + `","sha256":"` + auth.Hash(secret) + `","role":"reader"}]`, []string{"not both"}},
		{"no secret", `[{"name":"w","role":"reader"}]`, []string{"no token or sha256"}},
		{"bad hash", `[{"name":"w","sha256":"abc","role":"reader"}]`, []string{"64 hex digits"}},
		{"same name", `[{"name":"w","token":"` + secret + `","role":"reader"},{"name":"w","token":"` + secret + `x","role":"reader"}]`, []string{"name used twice"}},
		{"same secret", `[{"name":"a","token":"` + secret + `","role":"reader"},{"name":"b","sha256":"` + auth.Hash(secret) + `","role":"admin"}]`, []string{`same secret as token "a"`}},
		{"bad pattern", `[{"name":"w","token":"` + secret + `","role":"reader","runs":["run-a","run-["]}]`, []string{`token "w"`, "runs[1]"}},
		{"no name, every problem", `[{"token":"short","role":"x"}]`, []string{"token 0", "no name", "role is not one of", "5 characters"}},
		{"lines", "- name: a\n  token: " + secret + "\n  role: reader\n- name: b\n  token: " + secret + "x\n  role: root\n", []string{`token "b" (test line 4)`}},
		{"empty", ``, []string{"no tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := auth.ParseTokens("test", []byte(tc.in))
			if err == nil {
				_, err = auth.New(ts)
			}
			if err == nil {
				t.Fatal("got no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error %q shows a secret", err)
			}
		})
	}
}

func TestLoadFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(file, []byte("- {name: a, token: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, role: admin}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{auth.EnvTokens: `[{"name":"b","token":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","role":"reader"}]`}
	ts, err := auth.Load(file, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "a" || ts[1].Name != "b" {
		t.Fatalf("got %+v, want a from the file and b from the environment", ts)
	}
	if _, err := auth.Load(filepath.Join(dir, "missing.yaml"), func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("got %v, want an error naming the missing file", err)
	}
}

func TestRolesAllow(t *testing.T) {
	for _, tc := range []struct {
		role auth.Role
		want map[auth.Access]bool
	}{
		{auth.Producer, map[auth.Access]bool{auth.Append: true, auth.ReadAdmission: true}},
		{auth.Trainer, map[auth.Access]bool{auth.Append: true, auth.ReadBatches: true}},
		{auth.Reader, map[auth.Access]bool{auth.ReadBatches: true, auth.ReadAdmission: true, auth.Read: true}},
		{auth.Admin, map[auth.Access]bool{auth.Append: true, auth.ReadBatches: true, auth.ReadAdmission: true, auth.Read: true, auth.Other: true}},
	} {
		for _, a := range []auth.Access{auth.Append, auth.ReadBatches, auth.ReadAdmission, auth.Read, auth.Other} {
			if got := tc.role.Allows(a); got != tc.want[a] {
				t.Errorf("%s allows %s: got %v, want %v", tc.role, a, got, tc.want[a])
			}
		}
		if !tc.role.Allows(auth.Open) {
			t.Errorf("%s may not use open routes", tc.role)
		}
	}
}

// A secret that lands in the wrong place of a token file is never shown:
// not in a role, a run, a name, a key, or a syntax error's quote of the
// line. Each misplacement is still refused, saying where.
func TestTokenErrorsNeverShowValues(t *testing.T) {
	const secret = "s3cr3t-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	hash := auth.Hash(secret)
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"secret in the role", "- name: w\n  sha256: " + auth.Hash("x") + "\n  role: admin " + secret + "\n", []string{`token "w"`, "line 1", "role is not one of"}},
		{"secret as the role", `[{"name":"w","sha256":"` + hash + `","role":"` + secret + `"}]`, []string{"role is not one of"}},
		{"secret in the runs", "- name: w\n  token: " + secret + "x\n  role: reader\n  runs: [\"" + secret + "[\"]\n", []string{"runs[0]"}},
		{"secret as a run list", "- name: w\n  token: " + secret + "x\n  role: reader\n  runs: " + secret + "\n", []string{"line 4", "runs is not a list"}},
		{"secret in the name", "- name: " + secret + "\n  role: producer\n", []string{"token 0", "not a valid name", "no token or sha256"}},
		{"secret and name swapped", "- name: " + secret + "\n  token: ops\n  role: admin\n", []string{"not a valid name", "3 characters"}},
		{"secret as a key", "- name: w\n  " + secret + ": producer\n", []string{"line 2", "unknown key"}},
		{"secret as a key, object form", "tokens: []\n" + secret + ": 1\n", []string{"line 2", "unknown key"}},
		{"secret as the value of an unknown key", "- name: w\n  tokne: " + secret + "\n  role: admin\n", []string{"line 2", "did you mean token"}},
		{"unclosed quote", "- name: w\n  token: \"" + secret + "\n  role: admin\n", []string{"not valid YAML or JSON"}},
		{"tab indentation", "- name: w\n\ttoken: " + secret + "\n", []string{"line 2", "not valid YAML or JSON"}},
		{"broken JSON", `[{"name":"w","token":"` + secret + `","role":"admin"`, []string{"not valid YAML or JSON"}},
		{"a mapping where a string goes", "- name: w\n  token: {" + secret + ": 1}\n  role: admin\n", []string{"line 2", "token is not a string"}},
		{"an anchor named like a secret", "- name: w\n  token: *" + secret[:20] + "\n  role: admin\n", []string{"not valid YAML or JSON"}},
		{"a secret as the whole file", secret + "\n", []string{"want a list of tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := auth.ParseTokens("tokens.yaml", []byte(tc.in))
			if err == nil {
				_, err = auth.New(ts)
			}
			if err == nil {
				t.Fatal("got no error")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("got %q, want it to mention %q", msg, w)
				}
			}
			for _, leak := range []string{secret, secret[:20], hash, "admin " + secret[:8]} {
				if strings.Contains(msg, leak) {
					t.Errorf("the error %q shows %q", msg, leak)
				}
			}
		})
	}
	for name, ok := range map[string]bool{"ops": true, "worker-pool-a": true, "trainer.r7_x": true, "a": true,
		"": false, "-a": false, "a b": false, "a:b": false, strings.Repeat("a", auth.MaxNameLength+1): false, secret: false} {
		if auth.ValidName(name) != ok {
			t.Errorf("ValidName(%q): got %v, want %v", name, !ok, ok)
		}
	}
}
