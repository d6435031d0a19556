package explore

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rolloutledger/rolloutledger/events"
)

// Bounds of a text search: what one request may scan and return.
const (
	// MaxQueryBytes bounds a search's query.
	MaxQueryBytes = 200
	// DefaultSearchHits and MaxSearchHits bound the hits of one page.
	DefaultSearchHits = 50
	MaxSearchHits     = 200
	// SearchScanBytes bounds the text one request scans, and the stored
	// turns and tool calls it reads: past either the page ends early, and
	// its cursor goes on from there.
	SearchScanBytes = 32 << 20
	// snippetBytes is how much context a hit shows on each side.
	snippetBytes = 60
)

// SearchHit is one text field holding the query: a turn's text, or a tool
// call's input or output.
type SearchHit struct {
	Attempt string `json:"attempt"`
	Group   string `json:"group"`
	Task    string `json:"task"`
	Turn    int    `json:"turn"`
	// Field is "text", "tool_input" or "tool_output"; Call and Tool name
	// the tool call of the last two.
	Field string `json:"field"`
	Call  *int   `json:"call,omitempty"`
	Tool  string `json:"tool,omitempty"`
	// Offset is the first match's byte offset in the field, Matches how
	// many times the query occurs in it.
	Offset  int `json:"offset"`
	Matches int `json:"matches"`
	// Before, Match and After are the first match with some context.
	Before string `json:"before"`
	Match  string `json:"match"`
	After  string `json:"after"`
}

// SearchView is one page of a search of a run's text.
type SearchView struct {
	Query string      `json:"query"`
	Hits  []SearchHit `json:"hits"`
	// Next is the cursor of the next page; empty when the run's text was
	// searched to its end.
	Next string `json:"next"`
	// Stopped says why the page ended before the run's end: "hits" (the
	// page is full) or "bytes" (the scan bound); empty at the end.
	Stopped string `json:"stopped"`
	// Scanned counts the bytes of text this page scanned.
	Scanned int64 `json:"scanned_bytes"`
	// Searched is how many of the run's Attempts the search has passed.
	Searched int `json:"attempts_searched"`
	Attempts int `json:"attempts"`
}

// searchPos is where a search stands: the attempt's place in the order
// started, a turn number and a field code — 0 the text, 1+2c the input of
// the turn's tool call number c, 2+2c its output — numbers, not places,
// so a cursor stays right while turns and calls arrive out of order. Text
// that arrives behind a cursor is not on the following pages (a page never
// repeats a hit); a new search finds it.
type searchPos struct {
	attempt, turn, field int
}

func (p searchPos) String() string {
	return strconv.Itoa(p.attempt) + "." + strconv.Itoa(p.turn) + "." + strconv.Itoa(p.field)
}

func parseCursor(s string, attempts int) (searchPos, error) {
	var p searchPos
	if s == "" {
		return p, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return p, fmt.Errorf("cursor %q is not one this search returned", s)
	}
	var n [3]int
	for i, x := range parts {
		v, err := strconv.Atoi(x)
		if err != nil || v < 0 {
			return p, fmt.Errorf("cursor %q is not one this search returned", s)
		}
		n[i] = v
	}
	if n[0] > attempts {
		return p, fmt.Errorf("cursor %q is past the run's %d attempts", s, attempts)
	}
	return searchPos{n[0], n[1], n[2]}, nil
}

// matcher finds a query in text whatever its case: ASCII letters fold by
// hand (the common case, no allocation); any other query by Unicode's
// simple case folding.
type matcher struct {
	lower string // the query lower-cased, when ASCII
	re    *regexp.Regexp
}

func newMatcher(q string) matcher {
	for i := range len(q) {
		if q[i] >= utf8.RuneSelf {
			return matcher{re: regexp.MustCompile(`(?i)` + regexp.QuoteMeta(q))}
		}
	}
	return matcher{lower: strings.ToLower(q)}
}

// index is the start and end of the first match in s at or after from, or
// -1.
func (m matcher) index(s string, from int) (int, int) {
	if m.re != nil {
		loc := m.re.FindStringIndex(s[from:])
		if loc == nil {
			return -1, -1
		}
		return from + loc[0], from + loc[1]
	}
	q := m.lower
	c0 := q[0]
	c1 := c0
	if 'a' <= c0 && c0 <= 'z' {
		c1 = c0 - 'a' + 'A'
	}
	for i := from; i+len(q) <= len(s); i++ {
		if b := s[i]; b != c0 && b != c1 {
			continue
		}
		if equalFoldASCII(s[i:i+len(q)], q) {
			return i, i + len(q)
		}
	}
	return -1, -1
}

// equalFoldASCII says whether s equals lower, a lower-case ASCII string,
// but for the case of its letters.
func equalFoldASCII(s, lower string) bool {
	for i := range len(lower) {
		b := s[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != lower[i] {
			return false
		}
	}
	return true
}

// ValidateSearch checks a search's query and page size as a request gives
// them; limit "" is DefaultSearchHits.
func ValidateSearch(q, limit string) (int, error) {
	switch {
	case strings.TrimSpace(q) == "":
		return 0, fmt.Errorf("q is required: the text to search for")
	case len(q) > MaxQueryBytes:
		return 0, fmt.Errorf("q is %d bytes, at most %d are searched for", len(q), MaxQueryBytes)
	case !utf8.ValidString(q):
		return 0, fmt.Errorf("q is not UTF-8 text")
	}
	return parseLimit(limit, DefaultSearchHits, MaxSearchHits)
}

// parseLimit is a request's page size: limit as given, from 1 to most, or
// def when it is "".
func parseLimit(limit string, def, most int) (int, error) {
	if limit == "" {
		return def, nil
	}
	n, err := strconv.Atoi(limit)
	if err != nil || n < 1 || n > most {
		return 0, fmt.Errorf("limit %q is not an integer from 1 to %d", limit, most)
	}
	return n, nil
}

// Search finds q, whatever its case, in the run's turn text and tool
// inputs and outputs, attempt by attempt in the order they started, turn by
// turn: at most limit hits (one per field, with how many times it occurs
// there) and about SearchScanBytes of text per page; the page's Next
// cursor goes on from where it stopped. q must pass [ValidateSearch].
func (s *Snapshot) Search(q, cursor string, limit int) (SearchView, error) {
	attempts := int(s.sum.Attempts)
	v := SearchView{Query: q, Hits: []SearchHit{}, Attempts: attempts}
	pos, err := parseCursor(cursor, attempts)
	if err != nil {
		return v, err
	}
	mt := newMatcher(q)
	scan := func(a *events.AttemptStarted, turn int, field, text string, call *int, tool string) bool {
		v.Scanned += int64(len(text))
		start, end := mt.index(text, 0)
		if start < 0 {
			return false
		}
		h := SearchHit{Attempt: a.Attempt, Group: a.Group, Task: a.Task, Turn: turn, Field: field, Call: call, Tool: tool,
			Offset: start, Matches: 1, Match: text[start:end]}
		h.Before, h.After = snippet(text, start, end)
		for from := end; ; h.Matches++ {
			if _, from = mt.index(text, from); from < 0 {
				break
			}
		}
		v.Hits = append(v.Hits, h)
		return true
	}
	done := false
	// What a page reads is bounded too: the turns and tool calls it reads
	// to find the text, which a run without text has none of.
	var read int64
	err = s.ordered(kAttemptOrd, uint64(pos.attempt), func(ord uint64, id string) (bool, error) {
		ai := int(ord - 1)
		if read >= SearchScanBytes && ai > pos.attempt {
			v.Next, v.Stopped, v.Searched = searchPos{ai, 0, 0}.String(), "bytes", ai
			done = true
			return false, nil
		}
		a, err := s.attempt(id)
		if err != nil || a == nil || !a.started() {
			return err == nil, err
		}
		turns, n, err := s.turnsRead(id)
		if err != nil {
			return false, err
		}
		read += n
		for _, st := range turns {
			t := st.turn
			if ai == pos.attempt && t.Turn < pos.turn {
				continue
			}
			first := 0
			if ai == pos.attempt && t.Turn == pos.turn {
				first = pos.field
			}
			// Fields are coded by the tool call's number, not its place in
			// the turn, so a call that arrives between two pages moves no
			// other call's code: a page never repeats a hit.
			stop := func(hit bool, code int) bool {
				next := searchPos{ai, t.Turn, code + 1}
				switch {
				case hit && len(v.Hits) >= limit:
					v.Next, v.Stopped, v.Searched = next.String(), "hits", ai
					return true
				case v.Scanned >= SearchScanBytes:
					v.Next, v.Stopped, v.Searched = next.String(), "bytes", ai
					return true
				}
				return false
			}
			if first == 0 && stop(scan(a.S, t.Turn, "text", t.Text, nil, ""), 0) {
				done = true
				return false, nil
			}
			for _, c := range st.tools {
				call := c.Call
				if code := 1 + 2*call; code >= first && stop(scan(a.S, t.Turn, "tool_input", c.Input, &call, c.Tool), code) {
					done = true
					return false, nil
				}
				if code := 2 + 2*call; code >= first && stop(scan(a.S, t.Turn, "tool_output", c.Output, &call, c.Tool), code) {
					done = true
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil || done {
		return v, err
	}
	v.Searched = attempts
	return v, nil
}

// snippet is up to snippetBytes of text on each side of text[start:end],
// cut at rune boundaries.
func snippet(text string, start, end int) (before, after string) {
	b := max(0, start-snippetBytes)
	for b < start && !utf8.RuneStart(text[b]) {
		b++
	}
	e := min(len(text), end+snippetBytes)
	for e < len(text) && !utf8.RuneStart(text[e]) {
		e--
	}
	return text[b:start], text[end:e]
}
