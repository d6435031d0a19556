package explore

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
)

// searchModel is a run of three attempts whose turn text and tool calls
// hold "apply_patch" in various cases.
func searchModel() *Model {
	m := NewModel("r")
	facts := []events.Fact{&events.GroupStarted{Group: "g", Task: "t", Size: 3, Purpose: events.PurposeTrain}}
	for _, a := range []string{"g/a", "g/b", "g/c"} {
		facts = append(facts, &events.AttemptStarted{Attempt: a, Group: "g", Task: "t", Engine: "e", VM: "v"})
	}
	turn := func(a string, n int, text string) *events.TurnGenerated {
		return &events.TurnGenerated{Attempt: a, Turn: n, CompletionTokens: 3, VersionSegments: events.SingleVersion(0), Finish: events.FinishToolCall, Text: text}
	}
	facts = append(facts,
		turn("g/a", 0, "I will call Apply_Patch now, then APPLY_PATCH again."),
		&events.ToolCalled{Attempt: "g/a", Turn: 0, Call: 0, Tool: "apply_patch", Input: "*** Begin Patch", Output: "patch applied"},
		// g/b's turn 1 arrives before its turn 0, its tool call before
		// the turn: the order the search finds them in is the turns'.
		&events.ToolCalled{Attempt: "g/b", Turn: 1, Call: 0, Tool: "bash", Input: "git apply_patch.diff", Output: "ok"},
		turn("g/b", 1, "nothing here"),
		turn("g/b", 0, "no match"),
		turn("g/c", 0, "Ünïcode ÄPPLY text: äpply"),
	)
	feed(m, facts...)
	return m
}

func hitKeys(hs []SearchHit) []string {
	var out []string
	for _, h := range hs {
		k := fmt.Sprintf("%s/%d/%s", h.Attempt, h.Turn, h.Field)
		if h.Call != nil {
			k += fmt.Sprint("#", *h.Call)
		}
		out = append(out, fmt.Sprintf("%s×%d", k, h.Matches))
	}
	return out
}

// Search finds the text whatever its case, in turn text and tool input
// and output, in the order attempts started and turns go.
func TestSearchText(t *testing.T) {
	m := searchModel()
	for _, c := range []struct {
		q    string
		want []string
	}{
		// A tool's name is not its input: only the text and g/b's input
		// hold the query.
		{"apply_patch", []string{"g/a/0/text×2", "g/b/1/tool_input#0×1"}},
		{"PATCH", []string{"g/a/0/text×2", "g/a/0/tool_input#0×1", "g/a/0/tool_output#0×1", "g/b/1/tool_input#0×1"}},
		{"äpply", []string{"g/c/0/text×2"}},
		{"absent", nil},
	} {
		v, err := m.Search(c.q, "", 50)
		if err != nil {
			t.Fatal(err)
		}
		got := hitKeys(v.Hits)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("search %q: got %v, want %v", c.q, got, c.want)
		}
		if v.Next != "" || v.Stopped != "" || v.Searched != 3 {
			t.Errorf("search %q: next %q, stopped %q, searched %d; want the run searched to its end", c.q, v.Next, v.Stopped, v.Searched)
		}
	}
	v, _ := m.Search("apply_patch", "", 50)
	if h := v.Hits[0]; h.Match != "Apply_Patch" || h.Before != "I will call " || !strings.HasPrefix(h.After, " now, then") || h.Offset != 12 {
		t.Errorf("the first hit: %+v, want the match as written, with its context", h)
	}
}

// Pages follow each other by cursor: every hit once, in order, whatever
// the page size.
func TestSearchPages(t *testing.T) {
	m := searchModel()
	all, _ := m.Search("p", "", MaxSearchHits)
	for limit := 1; limit <= 4; limit++ {
		var got []SearchHit
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatalf("limit %d: more than 20 pages", limit)
			}
			v, err := m.Search("p", cursor, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Hits) > limit {
				t.Fatalf("limit %d: a page of %d hits", limit, len(v.Hits))
			}
			got = append(got, v.Hits...)
			if v.Next == "" {
				break
			}
			cursor = v.Next
		}
		if strings.Join(hitKeys(got), ",") != strings.Join(hitKeys(all.Hits), ",") {
			t.Errorf("limit %d: pages hold %v, want %v", limit, hitKeys(got), hitKeys(all.Hits))
		}
	}
}

// A tool call that arrives between two pages, numbered before calls the
// first page found, moves no cursor: the next page repeats nothing, and
// goes on with the calls after the cursor.
func TestSearchPagesWhileCallsArrive(t *testing.T) {
	m := NewModel("r")
	feed(m, &events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"},
		&events.TurnGenerated{Attempt: "g/a", Turn: 0, CompletionTokens: 3, VersionSegments: events.SingleVersion(0), Finish: events.FinishToolCall, Text: "no match"},
		&events.ToolCalled{Attempt: "g/a", Turn: 0, Call: 2, Tool: "bash", Input: "needle two", Output: "-"},
		&events.ToolCalled{Attempt: "g/a", Turn: 0, Call: 3, Tool: "bash", Input: "needle three", Output: "-"})
	first, err := m.Search("needle", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := hitKeys(first.Hits); strings.Join(got, ",") != "g/a/0/tool_input#2×1" || first.Next == "" {
		t.Fatalf("the first page: %v, next %q; want call 2's input and a cursor", got, first.Next)
	}
	// Calls 0 and 1 arrive late, before the cursor's call.
	feed2 := []events.Fact{
		&events.ToolCalled{Attempt: "g/a", Turn: 0, Call: 0, Tool: "bash", Input: "needle zero", Output: "-"},
		&events.ToolCalled{Attempt: "g/a", Turn: 0, Call: 1, Tool: "bash", Input: "needle one", Output: "-"},
	}
	for i, f := range feed2 {
		ev := events.New("r", "test", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), f)
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		m.Fact(0, int64(100+i), v, ev)
	}
	var rest []SearchHit
	for cursor := first.Next; cursor != ""; {
		v, err := m.Search("needle", cursor, 1)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, v.Hits...)
		cursor = v.Next
	}
	if got := hitKeys(rest); strings.Join(got, ",") != "g/a/0/tool_input#3×1" {
		t.Errorf("the pages after the cursor: %v, want call 3's input only (nothing repeated)", got)
	}
	if all, _ := m.Search("needle", "", MaxSearchHits); len(all.Hits) != 4 {
		t.Errorf("a new search finds %d hits, want all 4", len(all.Hits))
	}
}

// One request scans a bounded amount of text, and the cursor goes on from
// where it stopped.
func TestSearchBounded(t *testing.T) {
	m := NewModel("r")
	// Turns with as much text as a fact holds, more than one page scans.
	big := strings.Repeat("x", 60<<10)
	turns := SearchScanBytes/len(big) + 3
	facts := []events.Fact{&events.GroupStarted{Group: "g", Task: "t", Size: 1, Purpose: events.PurposeTrain},
		&events.AttemptStarted{Attempt: "g/a", Group: "g", Task: "t", Engine: "e", VM: "v"}}
	for n := range turns {
		text := big
		if n == turns-1 {
			text += " needle"
		}
		facts = append(facts, &events.TurnGenerated{Attempt: "g/a", Turn: n, CompletionTokens: 1, VersionSegments: events.SingleVersion(0), Finish: events.FinishStop, Text: text})
	}
	feed(m, facts...)
	v, err := m.Search("needle", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if v.Stopped != "bytes" || v.Next == "" || len(v.Hits) != 0 || v.Scanned > SearchScanBytes+int64(len(big)) {
		t.Fatalf("first page: stopped %q, next %q, %d hits, %d bytes scanned; want it stopped by the scan bound", v.Stopped, v.Next, len(v.Hits), v.Scanned)
	}
	v, err = m.Search("needle", v.Next, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Hits) != 1 || v.Hits[0].Turn != turns-1 || v.Next != "" {
		t.Errorf("second page: %v, next %q; want the needle in turn %d and the end", hitKeys(v.Hits), v.Next, turns-1)
	}
}

// The search route is a view like the others: behind the run scope, and
// bad input is a 400 naming what was wrong.
func TestSearchRoute(t *testing.T) {
	kc := exploreKafka(t, "run-a-search", "run-b-search")
	a, err := auth.New([]auth.Token{{Name: "a", Token: "tok-" + strings.Repeat("a", 40), Role: auth.Reader, Runs: []string{"run-a*"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Kafka: kc, Runs: runList{"run-a-search", "run-b-search"}}
	rt := auth.NewRouter(a, nil)
	s.Register(rt)
	get := func(path string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer tok-"+strings.Repeat("a", 40))
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, c := range []struct {
		path string
		want int
		says string
	}{
		{"/v1/runs/run-a-search/explore/search?q=x", http.StatusOK, `"hits":[]`},
		{"/v1/runs/run-b-search/explore/search?q=x", http.StatusForbidden, ""},
		{"/v1/runs/run-a-search/explore/search", http.StatusBadRequest, "q is required"},
		{"/v1/runs/run-a-search/explore/search?q=x&limit=0", http.StatusBadRequest, "limit"},
		{"/v1/runs/run-a-search/explore/search?q=" + strings.Repeat("x", MaxQueryBytes+1), http.StatusBadRequest, "at most 200"},
		{"/v1/runs/run-a-search/explore/search?q=x&cursor=nope", http.StatusBadRequest, "cursor"},
		{"/v1/runs/run-a-search/explore/search?q=x&cursor=9.0.0", http.StatusBadRequest, "past the run's 0 attempts"},
		{"/v1/runs/run-a-search/explore/steps", http.StatusOK, `"steps":[]`},
		{"/v1/runs/run-a-search/explore/steps?limit=10001", http.StatusBadRequest, "limit"},
		{"/v1/runs/run-a-search/explore/steps?cursor=nope", http.StatusBadRequest, "cursor"},
		{"/v1/runs/run-b-search/explore/steps", http.StatusForbidden, ""},
		{"/v1/runs/run-b-search/explore/side-by-side/g", http.StatusForbidden, ""},
		{"/v1/runs/run-a-search/explore/side-by-side/g", http.StatusNotFound, "no group"},
	} {
		code, body := get(c.path)
		if code != c.want || !strings.Contains(body, c.says) {
			t.Errorf("%s: got %d %s, want %d saying %q", c.path, code, body, c.want, c.says)
		}
	}
}
