package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinTokenLength is the shortest token accepted in clear: 128 bits of hex.
const MinTokenLength = 32

// MaxNameLength bounds a token's name: shorter than any token accepted,
// so a secret put in the name field by mistake is refused, not logged.
const MaxNameLength = MinTokenLength - 1

// Token is one entry of a token file.
type Token struct {
	// Name identifies the token in logs and errors; unique. It is 1 to
	// [MaxNameLength] letters, digits, '.', '_' or '-', starting with a
	// letter or a digit.
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

	// where names the entry in errors: its source and line.
	where string
}

// ValidName reports whether name may name a token (see [Token.Name]).
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameLength {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Hash is the hex SHA-256 of a token, the form a token file may store.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// tokenKeys are the keys of an entry, in the order errors list them.
var tokenKeys = []string{"name", "token", "sha256", "role", "runs"}

// ParseTokens reads a token list in YAML or JSON: either a list of entries
// or an object whose "tokens" key holds the list. what names the source in
// errors (a file name, an environment variable).
//
// Unknown keys are errors, so a misspelt "sha256" cannot silently leave a
// token without a secret. Every problem is reported at once, by line, and
// no error ever shows a value, a key or a line of the file: a secret put
// in the wrong place ("role: admin <secret>", a secret as a key, a quote
// left open) must not reach a terminal or a log. Only a token's name is
// shown, and only when it is a valid name ([ValidName]), which a secret
// cannot be.
func ParseTokens(what string, data []byte) ([]Token, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("auth: %s: no tokens", what)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("auth: %s: %s", what, syntaxError(err))
	}
	p := &tokenParser{what: what}
	list := p.list(&doc)
	var out []Token
	for i, item := range list {
		if t, ok := p.entry(i, item); ok {
			out = append(out, t)
		}
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// tokenParser turns a YAML document into tokens, collecting problems.
type tokenParser struct {
	what string
	errs []error
}

func (p *tokenParser) bad(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("auth: %s line %d: "+format, append([]any{p.what, n.Line}, args...)...))
}

// list finds the entries: the document's list, or its "tokens" list.
func (p *tokenParser) list(doc *yaml.Node) []*yaml.Node {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	switch root.Kind {
	case yaml.SequenceNode:
		return root.Content
	case yaml.MappingNode:
		var list []*yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			switch {
			case k.Kind != yaml.ScalarNode || k.Value != "tokens":
				p.bad(k, "unknown key%s (the object form has only tokens)", suggest(k, []string{"tokens"}))
			case list != nil:
				p.bad(k, "tokens is given twice")
			case v.Kind != yaml.SequenceNode:
				p.bad(v, "tokens is not a list")
			default:
				list = v.Content
			}
		}
		return list
	}
	p.bad(root, "want a list of tokens, or an object whose tokens key holds the list")
	return nil
}

// entry reads the i-th entry.
func (p *tokenParser) entry(i int, n *yaml.Node) (Token, bool) {
	t := Token{where: fmt.Sprintf("%s line %d", p.what, n.Line)}
	if n.Kind != yaml.MappingNode {
		p.bad(n, "token %d is not an object of %s", i, strings.Join(tokenKeys, ", "))
		return t, false
	}
	ok := true
	seen := map[string]bool{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		if k.Kind != yaml.ScalarNode || !slices.Contains(tokenKeys, k.Value) {
			p.bad(k, "token %d: unknown key%s (want %s)", i, suggest(k, tokenKeys), strings.Join(tokenKeys, ", "))
			ok = false
			continue
		}
		if seen[k.Value] {
			p.bad(k, "token %d: %s is given twice", i, k.Value)
			ok = false
			continue
		}
		seen[k.Value] = true
		if k.Value == "runs" {
			if v.Kind != yaml.SequenceNode {
				p.bad(v, "token %d: runs is not a list of run ids or patterns", i)
				ok = false
				continue
			}
			for r, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					p.bad(item, "token %d: runs[%d] is not a run id or pattern", i, r)
					ok = false
					continue
				}
				t.Runs = append(t.Runs, item.Value)
			}
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			p.bad(v, "token %d: %s is not a string", i, k.Value)
			ok = false
			continue
		}
		switch k.Value {
		case "name":
			t.Name = v.Value
		case "token":
			t.Token = v.Value
		case "sha256":
			t.SHA256 = v.Value
		case "role":
			t.Role = Role(v.Value)
		}
	}
	return t, ok
}

// suggest names the known key a misspelt one is closest to. It never
// shows the key itself, which may be a secret given as a key.
func suggest(k *yaml.Node, known []string) string {
	if k.Kind != yaml.ScalarNode {
		return ""
	}
	for _, w := range known {
		if editDistance(strings.ToLower(k.Value), w) <= 2 {
			return "; did you mean " + w + "?"
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, giving up (a large
// number) for strings too long to be a misspelt key.
func editDistance(a, b string) int {
	if len(a) > 2*len(b)+2 {
		return len(a)
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// yamlLine finds the line number a YAML error names.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// syntaxError says where a token file is not YAML (or JSON), without the
// parser's own words, which may quote the file.
func syntaxError(err error) string {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		return "line " + m[1] + ": not valid YAML or JSON (check quotes, brackets and indentation there)"
	}
	return "not valid YAML or JSON"
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
		// A name is shown only when it is a valid one: a secret cannot be.
		who := fmt.Sprintf("token %d", i)
		if ValidName(t.Name) {
			who = fmt.Sprintf("token %q", t.Name)
		}
		if t.where != "" {
			who += " (" + t.where + ")"
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("auth: %s: "+format, append([]any{who}, args...)...))
		}
		switch {
		case t.Name == "":
			bad("no name")
		case !ValidName(t.Name):
			bad("the name is not a valid name (1 to %d letters, digits, '.', '_' or '-'); it is not shown, in case it is a secret", MaxNameLength)
		case names[t.Name]:
			bad("name used twice")
		}
		names[t.Name] = true
		if !t.Role.Valid() {
			bad("the role is not one of producer, trainer, reader, admin%s", suggestRole(t.Role))
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
		for j, r := range t.Runs {
			if _, err := path.Match(r, ""); err != nil || r == "" {
				bad("runs[%d] is not a run id or pattern (path.Match syntax: *, ?, [a-z])", j)
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

// suggestRole names the role a misspelt one is closest to, never the
// value itself.
func suggestRole(r Role) string {
	v := strings.ToLower(strings.TrimSpace(string(r)))
	for _, want := range Roles {
		if editDistance(v, string(want)) <= 2 {
			return "; did you mean " + string(want) + "?"
		}
	}
	return ""
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
