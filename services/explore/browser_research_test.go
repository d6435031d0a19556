package explore_test

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// researchRun has text, tool input and output, and token ids inlined, in
// groups of 8.
var researchRun = simulate.Options{Seed: 11, Trainer: true, Steps: 3, BatchGroups: 2, GroupSize: 8, Tasks: 8, MinTurns: 2, MaxTurns: 10,
	MaxStaleness: 1, Tokens: true, Text: true, Workers: 4}

// vocabWords are the pieces the test's vocabulary is made of: token id i
// is vocabWords[i % len] (ids of a simulated run are not real text).
var vocabWords = []string{" the", " code", "(", ")", " def", "ing", "\n", " return", " x", " =", " test", ".py", " if", ":", " None", " self"}

// registerVocabulary writes engine's vocabulary of size tokens as a
// producer does: chunks of per tokens, each its own fact.
func registerVocabulary(t *testing.T, s *stack.Stack, run, engine string, size, per int) {
	t.Helper()
	chunks := (size + per - 1) / per
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for c := range chunks {
		v := &events.VocabularyRegistered{Engine: engine, Model: "sim-model", Size: int64(size), Chunk: c, Chunks: chunks, First: int32(c * per)}
		for id := c * per; id < min(size, c*per+per); id++ {
			v.Pieces = append(v.Pieces, vocabWords[id%len(vocabWords)]...)
			v.Offsets = append(v.Offsets, int32(len(v.Pieces)))
		}
		b, err := events.Encode(events.New(run, "proxy", at, v))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/events", bytes.NewReader(append(append([]byte("["), b...), ']')))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("registering vocabulary chunk %d: %d %s", c, resp.StatusCode, body)
		}
	}
}

// waitTrained waits until the explorer's view of run has trained step n
// and then until the explorer and the projector have both folded every
// fact of the run the log holds and agree on its decisions, so that the
// page and the API are read from the same history.
func waitTrained(t *testing.T, s *stack.Stack, kc kafkalog.Config, run string, n int) {
	t.Helper()
	api := s.URL() + "/v1/runs/" + run + "/explore"
	testenv.CheckFor(t, 3*time.Minute, fmt.Sprintf("step %d of %s trained", n, run), func() bool {
		steps := field(getJSON(t, api, tokReader), "steps").([]any)
		return len(steps) >= n && field(steps[n-1], "trained") == true
	})
	// Every fact the tests send is acknowledged before this is called, so
	// the log's count is final.
	logged := float64(len(ledgertest.Facts(t, kc)[run]))
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("%s at the end: %s", run, seen)
		}
	}()
	testenv.CheckFor(t, 2*time.Minute, fmt.Sprintf("the explorer and the projector fold every fact of %s and agree on its decisions", run), func() bool {
		st := getJSON(t, s.URL()+"/v1/runs/"+run+"/status", tokReader)
		v := getJSON(t, api, tokReader)
		seen = fmt.Sprintf("log %v facts; projector %v facts, %v batches, %v admitted, %v rejected, %v findings; explorer %v, %v, %v, %v, %v",
			logged, field(st, "facts_folded"), field(st, "batches_sealed"), field(st, "tasks_admitted"), field(st, "tasks_rejected"), field(st, "findings"),
			field(v, "facts"), field(v, "batches"), field(v, "tasks_admitted"), field(v, "tasks_rejected"), field(v, "findings"))
		return field(st, "facts_folded") == logged && field(v, "facts") == logged &&
			field(st, "batches_sealed") == field(v, "batches") && field(st, "tasks_admitted") == field(v, "tasks_admitted") &&
			field(st, "tasks_rejected") == field(v, "tasks_rejected") && field(st, "findings") == field(v, "findings")
	})
}

// TestExplorerResearcher walks what a researcher does every day: search a
// run's text, open a hit's turn, move with the keyboard, sort a table,
// compare two runs, read a group side by side, and read decoded tokens
// under the overlays.
func TestExplorerResearcher(t *testing.T) {
	chromiumPath(t)
	s, kc := startExplorerStack(t)
	const run, other = "run-a-research", "run-a-baseline"
	trained := simulateRun(t, s, run, researchRun).Steps
	base := researchRun
	base.Seed = 12
	baseTrained := simulateRun(t, s, other, base).Steps
	if len(trained) < 2 || len(baseTrained) < 2 {
		t.Fatalf("the trainer stand-in trained %d and %d steps, want at least 2 of each", len(trained), len(baseTrained))
	}
	api := s.URL() + "/v1/runs/" + run + "/explore"
	attempts := field(getJSON(t, api+"/attempts", tokReader), "attempts").([]any)
	first := field(attempts[0], "attempt").(string)
	engine := field(getJSON(t, api+"/attempts/"+url.PathEscape(first), tokReader), "engine").(string)
	registerVocabulary(t, s, run, engine, 151_936, 20_000)
	// The steps the trainer stand-in trained (the last batch may be
	// sealed after it stopped).
	waitTrained(t, s, kc, run, len(trained))
	waitTrained(t, s, kc, other, len(baseTrained))

	b := newBrowser(t)
	ui := s.URL() + "/ui/"
	b.run(chromedp.Navigate(ui+"index.html#/runs/-/none"), chromedp.Evaluate(`sessionStorage.setItem("rl-token", `+strconv.Quote(tokReader)+`)`, nil))
	shots := map[string]string{}
	hash := func() string {
		var h string
		b.run(chromedp.Evaluate(`location.hash`, &h))
		return h
	}
	key := func(k string) { b.run(chromedp.KeyEvent(k)) }

	const query = "PYTEST"
	var hit map[string]any
	t.Run("search", func(t *testing.T) {
		b.t = t
		b.open(ui+"#/runs/"+run, "run")
		// "/" focuses the search field; typing there fires no shortcut.
		key("/")
		var focus string
		b.run(chromedp.Evaluate(`document.activeElement.id`, &focus))
		if focus != "searchq" {
			t.Fatalf("after /, the focus is on %q, want the search field", focus)
		}
		before := hash()
		b.run(chromedp.SendKeys(`#searchq`, "jk?"+query, chromedp.ByQuery))
		if h := hash(); h != before {
			t.Errorf("typing j and k in the search field moved the view to %s", h)
		}
		var help bool
		b.run(chromedp.Evaluate(`!document.querySelector("#help").hidden`, &help))
		if help {
			t.Error("typing ? in the search field opened the help")
		}
		b.run(chromedp.SetValue(`#searchq`, query, chromedp.ByQuery), chromedp.SendKeys(`#searchq`, kb.Enter, chromedp.ByQuery))
		b.waitView("search", 0)
		page1 := getJSON(t, api+"/search?q="+query, tokReader)
		hits := field(page1, "hits").([]any)
		if len(hits) == 0 {
			t.Fatalf("the API finds no %q in the run's text", query)
		}
		sameNumber(t, b.values(), "hits", float64(len(hits)))
		var tools int
		for _, h := range hits {
			if field(h, "field") == "tool_input" {
				tools++
			}
		}
		if tools == 0 {
			t.Errorf("no hit in a tool call's input: %v", hits)
		}
		var marks []string
		b.run(chromedp.Evaluate(`[...document.querySelectorAll("td.snip mark")].map(m => m.textContent)`, &marks))
		for _, m := range marks {
			if !strings.EqualFold(m, query) {
				t.Errorf("a hit marks %q, want %q in any case", m, query)
			}
		}
		shots["search"] = b.screenshot("search")
		if field(page1, "next") != "" {
			t.Fatalf("the first page of %q holds %d hits and goes on; the test wants them all on one", query, len(hits))
		}
		// Pages of 10 come one after the other by their cursor, until
		// every hit is shown.
		b.open(ui+"#/runs/"+run+"/search?q="+query+"&limit=10", "search")
		for pages := 1; ; pages++ {
			var more bool
			b.run(chromedp.Evaluate(`!!document.querySelector("[data-more-hits]")`, &more))
			if !more {
				sameNumber(t, b.values(), "hits", float64(len(hits)))
				if want := (len(hits) + 9) / 10; pages != want {
					t.Errorf("%d pages of 10 for %d hits, want %d", pages, len(hits), want)
				}
				break
			}
			sameNumber(t, b.values(), "hits", float64(min(10*pages, len(hits))))
			n := b.waitView("search", 0)
			b.run(chromedp.Click(`[data-more-hits]`, chromedp.ByQuery))
			b.waitView("search", n)
		}
		hit = hits[0].(map[string]any)
		b.checkClean(s.URL() + "/")
	})

	t.Run("hit", func(t *testing.T) {
		b.t = t
		if hit == nil {
			t.Fatal("the search found nothing to open")
		}
		b.open(ui+"#/runs/"+run+"/search?q="+query, "search")
		b.run(chromedp.Click(`tbody tr[data-row="0"] td.snip`, chromedp.ByQuery))
		b.waitView("attempt", 0)
		turn := int(field(hit, "turn").(float64))
		want := "#/runs/" + run + "/attempts/" + url.PathEscape(field(hit, "attempt").(string)) + "/turns/" + strconv.Itoa(turn) + "?hl=" + query
		if h := hash(); h != want {
			t.Errorf("the hit opened %s, want %s", h, want)
		}
		// The turn is scrolled to and marked, the match highlighted in it.
		var got struct {
			Target   bool
			Top      float64
			Height   float64
			Marks    []string
			SelCount int
		}
		testenv.CheckFor(t, 5*time.Second, "the hit's turn in view", func() bool {
			b.run(chromedp.Evaluate(`(() => { const el = document.querySelector('[data-turn-n="`+strconv.Itoa(turn)+`"]'); const r = el.getBoundingClientRect();
				return {Target: el.classList.contains("target"), Top: r.top, Height: innerHeight, Marks: [...el.querySelectorAll("mark")].map(m => m.textContent), SelCount: document.querySelectorAll(".turn.sel").length}; })()`, &got))
			return got.Top >= 0 && got.Top < got.Height/2
		})
		if !got.Target || len(got.Marks) == 0 || got.SelCount != 1 {
			t.Errorf("the hit's turn: marked %v, %d highlights %q, %d selected; want it marked with the match highlighted", got.Target, len(got.Marks), got.Marks, got.SelCount)
		}
		for _, m := range got.Marks {
			if !strings.EqualFold(m, query) {
				t.Errorf("the turn marks %q, want %q", m, query)
			}
		}
		shots["hit"] = b.screenshot("search-hit")
		b.checkClean(s.URL() + "/")
	})

	t.Run("keyboard", func(t *testing.T) {
		b.t = t
		if hit == nil {
			t.Fatal("the search found nothing to open")
		}
		a := field(hit, "attempt").(string)
		av := getJSON(t, api+"/attempts/"+url.PathEscape(a), tokReader)
		turns := field(av, "turn_list").([]any)
		b.open(ui+"#/runs/"+run+"/attempts/"+url.PathEscape(a), "attempt")
		// j goes down the turns, k back up; the link follows.
		key("j")
		key("j")
		want := "/turns/" + strconv.Itoa(int(field(turns[min(1, len(turns)-1)], "turn").(float64)))
		if h := hash(); !strings.HasSuffix(h, want) {
			t.Errorf("after j j: %s, want the second turn's link (%s)", h, want)
		}
		key("k")
		if h := hash(); !strings.HasSuffix(h, "/turns/"+strconv.Itoa(int(field(turns[0], "turn").(float64)))) {
			t.Errorf("after k: %s, want the first turn's link", h)
		}
		// ? shows the help, Esc closes it.
		var shown bool
		b.run(chromedp.Evaluate(`scrollTo(0, 0)`, nil))
		key("?")
		b.run(chromedp.Evaluate(`!document.querySelector("#help").hidden`, &shown))
		if !shown {
			t.Error("? did not show the help")
		}
		// The window as the user sees it, the help over the page.
		var buf []byte
		b.run(chromedp.CaptureScreenshot(&buf))
		shots["keys"] = filepath.Join(b.shots, "keys.png")
		if err := os.WriteFile(shots["keys"], buf, 0o644); err != nil {
			t.Fatal(err)
		}
		key(kb.Escape)
		b.run(chromedp.Evaluate(`!document.querySelector("#help").hidden`, &shown))
		if shown {
			t.Error("Esc did not close the help")
		}
		// n and p go to the next and previous attempt.
		if next, _ := field(av, "next_attempt").(string); next != "" {
			n := b.waitView("attempt", 0)
			key("n")
			b.waitView("attempt", n)
			if h := hash(); !strings.Contains(h, "/attempts/"+url.PathEscape(next)) {
				t.Errorf("n went to %s, want attempt %s", h, next)
			}
			n = b.waitView("attempt", 0)
			key("p")
			b.waitView("attempt", n)
			if h := hash(); !strings.Contains(h, "/attempts/"+url.PathEscape(a)) {
				t.Errorf("p went to %s, want attempt %s", h, a)
			}
		}
		// On a step, n goes to the next step; on a list, j selects rows
		// and Enter opens one.
		b.open(ui+"#/runs/"+run+"/steps/1", "step")
		key("n")
		b.waitView("step", 0)
		testenv.CheckFor(t, 5*time.Second, "step 2", func() bool { return strings.HasSuffix(hash(), "/steps/2") })
		b.open(ui+"#/runs/"+run+"/tasks", "tasks")
		var row string
		key("j")
		b.run(chromedp.Evaluate(`document.querySelector("tr.sel").dataset.row`, &row))
		key(kb.Enter)
		b.waitView("task", 0)
		if h := hash(); !strings.HasSuffix(h, "/tasks/"+url.PathEscape(row)) {
			t.Errorf("Enter on task %s opened %s", row, h)
		}
		b.checkClean(s.URL() + "/")
	})

	t.Run("sort", func(t *testing.T) {
		b.t = t
		rows := field(getJSON(t, api+"/attempts", tokReader), "attempts").([]any)
		type rr struct {
			id     string
			reward *float64
		}
		var want []rr
		for _, r := range rows {
			x := rr{id: field(r, "attempt").(string)}
			if f, ok := field(r, "reward").(float64); ok {
				x.reward = &f
			}
			want = append(want, x)
		}
		order := func(desc bool) []string {
			w := slices.Clone(want)
			slices.SortStableFunc(w, func(a, b rr) int {
				switch {
				case a.reward == nil && b.reward == nil:
					return 0
				case a.reward == nil:
					return 1
				case b.reward == nil:
					return -1
				case desc:
					return cmp.Compare(*b.reward, *a.reward)
				}
				return cmp.Compare(*a.reward, *b.reward)
			})
			var ids []string
			for _, x := range w {
				ids = append(ids, x.id)
			}
			return ids
		}
		b.open(ui+"#/runs/"+run+"/attempts", "attempts")
		for i, desc := range []bool{false, true} {
			n := b.waitView("attempts", 0)
			b.run(chromedp.Evaluate(`[...document.querySelectorAll("th")].find(th => th.textContent === "reward").click()`, nil))
			b.waitView("attempts", n)
			var got []string
			b.run(chromedp.Evaluate(`[...document.querySelectorAll("tr[data-row]")].map(r => r.dataset.row)`, &got))
			if w := order(desc); !slices.Equal(got, w) {
				t.Errorf("click %d on reward: rows %v, want %v", i+1, got, w)
			}
		}
		shots["sorted"] = b.screenshot("attempts-sorted")
		// A table sorted in the page: tasks by attempts, numbers as numbers.
		b.open(ui+"#/runs/"+run+"/tasks", "tasks")
		b.run(chromedp.Evaluate(`[...document.querySelectorAll("th")].find(th => th.textContent === "attempts").click()`, nil))
		var counts []float64
		b.run(chromedp.Evaluate(`[...document.querySelectorAll("#main tbody tr")].map(r => Number(r.cells[8].textContent))`, &counts))
		if !slices.IsSorted(counts) || len(counts) == 0 {
			t.Errorf("tasks sorted by attempts: %v", counts)
		}
		b.checkClean(s.URL() + "/")
	})

	t.Run("compare", func(t *testing.T) {
		b.t = t
		b.open(ui+"#/", "runs")
		for _, r := range []string{run, other} {
			n := b.waitView("runs", 0)
			b.run(chromedp.Click(`input[data-pick="`+r+`"]`, chromedp.ByQuery))
			b.waitView("runs", n)
		}
		b.run(chromedp.Click(`a[data-compare]`, chromedp.ByQuery))
		b.waitView("compare", 0)
		page := b.values()
		for _, r := range []string{run, other} {
			sameNumber(t, page, "steps-"+r, float64(len(field(getJSON(t, s.URL()+"/v1/runs/"+r+"/explore", tokReader), "steps").([]any))))
		}
		var legends map[string]int
		b.run(chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll(".chart")].map(c => [c.dataset.chart, c.querySelectorAll(".legend span").length]))`, &legends))
		for _, c := range []string{"pass_rate", "mean_reward", "reward_spread", "loss", "grad_norm", "tokens", "trained_staleness"} {
			if legends[c] != 2 {
				t.Errorf("compare chart %s: %d series, want one per run (2)", c, legends[c])
			}
		}
		var lines int
		b.run(chromedp.Evaluate(`document.querySelectorAll('[data-chart="mean_reward"] polyline').length`, &lines))
		if lines != 2 {
			t.Errorf("the mean reward chart draws %d lines, want 2", lines)
		}
		shots["compare"] = b.screenshot("compare")
		b.checkClean(s.URL() + "/")
	})

	t.Run("side-by-side", func(t *testing.T) {
		b.t = t
		g := field(getJSON(t, api+"/steps/1", tokReader), "groups", 0, "group").(string)
		side := getJSON(t, api+"/side-by-side/"+url.PathEscape(g), tokReader)
		n := len(field(side, "attempts").([]any))
		if n != 8 {
			t.Fatalf("group %s has %d attempts, want 8", g, n)
		}
		b.open(ui+"#/runs/"+run+"/groups/"+url.PathEscape(g), "group")
		// Every attempt is a column in view at 1,400 px: none hidden, no
		// sideways scroll.
		var geo struct {
			Cols   []float64
			Width  float64
			Scroll float64
		}
		b.run(chromedp.Evaluate(`({Cols: [...document.querySelectorAll(".sbs-head .col")].map(c => c.getBoundingClientRect().right), Width: innerWidth, Scroll: document.documentElement.scrollWidth})`, &geo))
		if len(geo.Cols) != 8 || geo.Scroll > geo.Width {
			t.Errorf("%d columns, page %v px wide in a %v px window", len(geo.Cols), geo.Scroll, geo.Width)
		}
		for i, r := range geo.Cols {
			if r > geo.Width {
				t.Errorf("column %d ends at %v px, past the %v px window", i, r, geo.Width)
			}
		}
		// Turn by turn, a cell that differs from the first attempt's marks
		// what differs; one that does not is shown as the same.
		most := 0
		for _, a := range field(side, "attempts").([]any) {
			most = max(most, len(field(a, "turn_list").([]any)))
		}
		var cells struct {
			Rows, Differ, Marked int
		}
		b.run(chromedp.Evaluate(`(() => { const rows = document.querySelectorAll("[data-turn-row]"); let differ = 0, marked = 0;
			rows.forEach(r => [...r.querySelectorAll(".cell")].slice(1).forEach(c => { if (c.dataset.same === "false") { differ++; if (c.querySelector("ins, .differs")) marked++; } }));
			return {Rows: rows.length, Differ: differ, Marked: marked}; })()`, &cells))
		if cells.Rows != min(most, 30) || cells.Differ == 0 || cells.Marked != cells.Differ {
			t.Errorf("side by side: %d turn rows (want %d), %d cells differ, %d of them mark what", cells.Rows, min(most, 30), cells.Differ, cells.Marked)
		}
		shots["group"] = b.screenshot("group-side-by-side")
		b.checkClean(s.URL() + "/")
	})

	t.Run("decoded-tokens", func(t *testing.T) {
		b.t = t
		if hit == nil {
			t.Fatal("the search found nothing to open")
		}
		a := field(hit, "attempt").(string)
		av := getJSON(t, api+"/attempts/"+url.PathEscape(a), tokReader)
		if field(av, "vocabulary") == nil {
			t.Fatal("the attempt view has no vocabulary")
		}
		ids := field(av, "turn_list", 0, "token_ids").([]any)
		for _, overlay := range []string{"logprob", "mask", "version", "advantage"} {
			b.open(ui+"#/runs/"+run+"/attempts/"+url.PathEscape(a)+"?overlay="+overlay, "attempt")
			var spans []string
			var colours []string
			b.run(chromedp.Evaluate(`[...document.querySelectorAll('[data-toks="0"] span')].map(s => s.textContent)`, &spans),
				chromedp.Evaluate(`[...document.querySelectorAll('[data-toks="0"] span')].slice(0, 50).map(s => s.style.background)`, &colours))
			if len(spans) != len(ids) {
				t.Fatalf("%s: %d token spans, want %d", overlay, len(spans), len(ids))
			}
			for i, id := range ids {
				want := strings.ReplaceAll(vocabWords[int(id.(float64))%len(vocabWords)], "\n", "↵")
				if spans[i] != want {
					t.Errorf("%s: token %d (id %v) shows %q, want %q", overlay, i, id, spans[i], want)
					break
				}
			}
			if slices.Contains(colours, "") {
				t.Errorf("%s: a token has no overlay colour", overlay)
			}
			if overlay == "logprob" {
				shots["tokens"] = b.screenshot("attempt-tokens")
			}
		}
		// The ids are a click away.
		b.open(ui+"#/runs/"+run+"/attempts/"+url.PathEscape(a)+"?tokens=ids", "attempt")
		var firstSpan string
		b.run(chromedp.Evaluate(`document.querySelector('[data-toks="0"] span').textContent`, &firstSpan))
		if firstSpan != strconv.Itoa(int(ids[0].(float64))) {
			t.Errorf("tokens=ids: the first token shows %q, want its id %v", firstSpan, ids[0])
		}
		b.checkClean(s.URL() + "/")
	})

	if dir := os.Getenv("RL_EXPLORER_DOCS"); dir != "" {
		for name, p := range shots {
			if name == "sorted" || name == "hit" {
				continue
			}
			b, err := os.ReadFile(p)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
}
