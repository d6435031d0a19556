// Package docs embeds the documentation whose examples are executable, so
// that tests and benchmarks run them as written: every SQL block of
// analysts.md runs against a real read model in the pgsink's tests, and is
// timed at scale by `rolloutledger bench --only analysts`.
package docs

import (
	_ "embed"
	"regexp"
	"strconv"
	"strings"
)

// Analysts is docs/analysts.md.
//
//go:embed analysts.md
var Analysts string

// Block is one ```sql block of a document.
type Block struct {
	// Line is the block's first line (of SQL) in the document, from 1.
	Line int
	// SQL is the block's text, psql meta-commands and variables
	// (:'run') as written.
	SQL string
	// Rows is the row count psql printed in the output block after it
	// ("(N rows)"), or -1 when no output follows.
	Rows int
}

var rowsLine = regexp.MustCompile(`(?m)^\((\d+) rows?\)$`)

// SQLBlocks returns the ```sql blocks of a Markdown document in order.
func SQLBlocks(md string) []Block {
	lines := strings.Split(md, "\n")
	var out []Block
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sql" {
			continue
		}
		b := Block{Line: i + 2, Rows: -1}
		var sql []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			sql = append(sql, lines[i])
		}
		b.SQL = strings.Join(sql, "\n") + "\n"
		// The output block, if the next fence after blank lines is a bare one.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) && strings.TrimSpace(lines[j]) == "```" {
			var o []string
			for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
				o = append(o, lines[j])
			}
			if m := rowsLine.FindStringSubmatch(strings.Join(o, "\n")); m != nil {
				b.Rows, _ = strconv.Atoi(m[1])
			}
		}
		out = append(out, b)
	}
	return out
}

// Reads reports whether a block only reads: every statement in it is a
// SELECT (or WITH ... SELECT), a SET, or a psql meta-command.
func (b Block) Reads() bool {
	for _, st := range Statements(b.SQL) {
		w := strings.ToUpper(strings.Fields(st)[0])
		if w != "SELECT" && w != "WITH" && w != "SET" && !strings.HasPrefix(w, `\`) {
			return false
		}
	}
	return true
}

// Statements splits a block into its statements: psql meta-commands one a
// line, SQL up to each ';' at the end of a line.
func Statements(sql string) []string {
	var out []string
	var cur []string
	for _, l := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(l)
		if t == "" && len(cur) == 0 {
			continue
		}
		if strings.HasPrefix(t, `\`) && len(cur) == 0 {
			out = append(out, t)
			continue
		}
		cur = append(cur, l)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}
