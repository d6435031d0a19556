package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinTokenLength is the shortest token accepted in clear: 128 bits of hex.
const MinTokenLength = 32

// Token is one entry of a token file.
type Token struct {
	// Name identifies the token in logs and errors; unique.
	Name string `yaml:"name" json:"name"`
	// Token is the secret itself; give either it or SHA256.
	Token string `yaml:"token,omitempty" json:"token,omitempty"`
	// SHA256 is the hex SHA-256 of the secret, so the file need not hold
	// the secret.
	SHA256 string `yaml:"sha256,omitempty" json:"sha256,omitempty"`
	Role   Role   `yaml:"role" json:"role"`
	// Runs limits the token to these runs (path.Match patterns); empty
	// means every run.
	Runs []string `yaml:"runs,omitempty" json:"runs,omitempty"`
}

// Hash is the hex SHA-256 of a token, the form a token file may store.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// ParseTokens reads a token list in YAML or JSON: either a list of entries
// or an object whose "tokens" key holds the list. Unknown keys are errors, so
// a misspelt "sha256" cannot silently leave a token without a secret. what
// names the source in errors (a file name, an environment variable).
func ParseTokens(what string, data []byte) ([]Token, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("auth: %s: no tokens", what)
	}
	var list []Token
	errList := strictYAML(data, &list)
	if errList == nil {
		return list, nil
	}
	var doc struct {
		Tokens []Token `yaml:"tokens"`
	}
	if err := strictYAML(data, &doc); err != nil {
		// Report the error of the shape the data looks like.
		if t := bytes.TrimSpace(data); t[0] == '[' || t[0] == '-' {
			err = errList
		}
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	return doc.Tokens, nil
}

func strictYAML(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// LoadFile reads the token file at name.
func LoadFile(name string) ([]Token, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	return ParseTokens(name, data)
}

// Environment variables that configure tokens.
const (
	// EnvTokens holds a token list inline (YAML or JSON).
	EnvTokens = "ROLLOUTLEDGER_TOKENS"
	// EnvTokensFile names a token file.
	EnvTokensFile = "ROLLOUTLEDGER_TOKENS_FILE"
)

// Load gathers the tokens of a token file (when file is not empty) and of
// the inline list in $ROLLOUTLEDGER_TOKENS (when set). getenv is os.Getenv
// outside tests.
func Load(file string, getenv func(string) string) ([]Token, error) {
	var all []Token
	if file != "" {
		ts, err := LoadFile(file)
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
	}
	if inline := getenv(EnvTokens); strings.TrimSpace(inline) != "" {
		ts, err := ParseTokens("$"+EnvTokens, []byte(inline))
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
	}
	return all, nil
}

type entry struct {
	hash [sha256.Size]byte
	p    Principal
}

// Authenticator knows the tokens and checks requests against them.
type Authenticator struct {
	entries []entry
}

// New checks the tokens and returns an Authenticator for them. Every problem
// is reported at once, naming the token by its name or position, never by
// its secret.
func New(tokens []Token) (*Authenticator, error) {
	var errs []error
	a := &Authenticator{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]string{}
	for i, t := range tokens {
		who := fmt.Sprintf("token %d", i)
		if t.Name != "" {
			who = fmt.Sprintf("token %q", t.Name)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("auth: %s: "+format, append([]any{who}, args...)...))
		}
		switch {
		case t.Name == "":
			bad("no name")
		case names[t.Name]:
			bad("name used twice")
		}
		names[t.Name] = true
		if !t.Role.Valid() {
			bad("role %q is not one of producer, trainer, reader, admin", t.Role)
		}
		var h [sha256.Size]byte
		switch {
		case t.Token != "" && t.SHA256 != "":
			bad("give token or sha256, not both")
		case t.Token != "":
			if len(t.Token) < MinTokenLength {
				bad("the token is %d characters; use at least %d (e.g. openssl rand -hex 32)", len(t.Token), MinTokenLength)
			}
			for _, c := range []byte(t.Token) {
				if c < 0x21 || c > 0x7e {
					bad("the token holds a character that is not printable ASCII")
					break
				}
			}
			h = sha256.Sum256([]byte(t.Token))
		case t.SHA256 != "":
			b, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(t.SHA256), "sha256:"))
			if err != nil || len(b) != sha256.Size {
				bad("sha256 is not 64 hex digits")
			}
			copy(h[:], b)
		default:
			bad("no token or sha256")
		}
		if other, dup := hashes[h]; dup && h != ([sha256.Size]byte{}) {
			bad("same secret as token %q", other)
		}
		hashes[h] = t.Name
		for _, r := range t.Runs {
			if _, err := path.Match(r, ""); err != nil || r == "" {
				bad("runs: %q is not a run id or pattern", r)
			}
		}
		a.entries = append(a.entries, entry{hash: h, p: Principal{Name: t.Name, Role: t.Role, Runs: t.Runs}})
	}
	if len(tokens) == 0 {
		errs = append(errs, errors.New("auth: no tokens"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return a, nil
}

// Lookup returns the principal whose token is token, comparing its hash
// with every known hash in constant time.
func (a *Authenticator) Lookup(token string) (*Principal, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.entries {
		if subtle.ConstantTimeCompare(h[:], a.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	p := a.entries[found].p
	return &p, true
}

// Names lists the tokens' names and roles, for a startup log line.
func (a *Authenticator) Names() []string {
	out := make([]string, len(a.entries))
	for i, e := range a.entries {
		out[i] = e.p.Name + ":" + string(e.p.Role)
	}
	return out
}
