package explore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/services/explore"
	"github.com/rolloutledger/rolloutledger/services/explore/recorded"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// chromiumPath finds Debian's Chromium, or skips (fails in CI).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "no Chromium (apt-get install -y chromium, or set $CHROMIUM)")
	return ""
}

// browser is one headless Chromium tab that records every console error,
// uncaught exception, log error and request it makes.
type browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	errors   []string
	requests []string
	shots    string
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000), chromedp.Flag("headless", true), chromedp.Flag("allow-file-access-from-files", false))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, shots: os.Getenv("RL_EXPLORER_SCREENSHOTS")}
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	chromedp.ListenTarget(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeWarning {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.errors = append(b.errors, "console."+string(e.Type)+": "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+e.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.LevelError {
				b.errors = append(b.errors, "log: "+e.Entry.Text+" "+e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, e.Request.URL)
		}
	})
	if err := chromedp.Run(ctx, network.Enable(), runtime.Enable(), cdplog.Enable()); err != nil {
		cancel()
		cancelA()
		testenv.Unavailable(t, "Chromium at %s does not start: %v", path, err)
	}
	t.Cleanup(func() { cancel(); cancelA() })
	return b
}

func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v (errors so far: %v)", err, b.errs())
	}
}

// reset forgets the errors and requests recorded so far.
func (b *browser) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors, b.requests = nil, nil
}

func (b *browser) errs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// checkClean fails on any console error so far, and on any request that
// left origin (a URL prefix, e.g. http://127.0.0.1:port/ or file:///dir/).
func (b *browser) checkClean(origin string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Errorf("console errors: %q", b.errors)
	}
	for _, u := range b.requests {
		if !strings.HasPrefix(u, origin) && !strings.HasPrefix(u, "data:") && u != "about:blank" {
			b.t.Errorf("a request left the origin %s: %s", origin, u)
		}
	}
	b.errors, b.requests = nil, nil
}

// open loads url afresh (a deep link) and waits for view to have rendered.
func (b *browser) open(url, view string) {
	b.t.Helper()
	b.run(chromedp.Navigate("about:blank"), chromedp.Navigate(url))
	b.waitView(view, 0)
}

// waitView waits until view has rendered more than after times.
func (b *browser) waitView(view string, after int) int {
	b.t.Helper()
	var n int
	js := fmt.Sprintf(`(document.body.dataset.ready === "error") ? -1 : (document.body.dataset.view === %q ? Number(document.body.dataset.ready || 0) : 0)`, view)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.run(chromedp.Evaluate(js, &n))
		if n == -1 {
			var msg string
			b.run(chromedp.Evaluate(`document.querySelector(".err") ? document.querySelector(".err").textContent : ""`, &msg))
			b.t.Fatalf("view %s failed to render: %s", view, msg)
		}
		if n > after {
			return n
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("view %s did not render within 30s (errors: %v)", view, b.errs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitError waits for the view to fail with status.
func (b *browser) waitError(t testing.TB, status string) {
	t.Helper()
	var got string
	testenv.CheckFor(t, 10*time.Second, "the view's error", func() bool {
		b.run(chromedp.Evaluate(`(document.querySelector("[data-error]") || {dataset: {}}).dataset.error || ""`, &got))
		return got != ""
	})
	if got != status {
		t.Errorf("the view failed with status %q, want %q", got, status)
	}
}

// values reads every [data-k] of the page: its data-v when it has one,
// else its text.
func (b *browser) values() map[string]string {
	b.t.Helper()
	var m map[string]string
	b.run(chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("[data-k]")].map(e => [e.dataset.k, e.hasAttribute("data-v") ? e.dataset.v : e.textContent]))`, &m))
	return m
}

func (b *browser) screenshot(name string) string {
	b.t.Helper()
	var buf []byte
	b.run(chromedp.FullScreenshot(&buf, 100))
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// sameNumber compares what the page shows to the API's value.
func sameNumber(t testing.TB, page map[string]string, key string, want any) {
	t.Helper()
	got, ok := page[key]
	if !ok {
		t.Errorf("%s: not on the page", key)
		return
	}
	switch w := want.(type) {
	case nil:
		if got != "" {
			t.Errorf("%s: page shows %q, API has null", key, got)
		}
	case string:
		if got != w {
			t.Errorf("%s: page shows %q, API has %q", key, got, w)
		}
	case float64:
		g, err := strconv.ParseFloat(got, 64)
		if err != nil || g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
			t.Errorf("%s: page shows %q, API has %v", key, got, w)
		}
	default:
		t.Fatalf("%s: unexpected API value %T", key, want)
	}
}

func getJSON(t testing.TB, url, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func field(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m = m.(map[string]any)[k]
		case int:
			m = m.([]any)[k]
		}
	}
	return m
}

var (
	tokAdmin   = "adm-" + strings.Repeat("a", 40)
	tokReader  = "rea-" + strings.Repeat("r", 40)
	tokReaderA = "rda-" + strings.Repeat("s", 40)
)

// startExplorerStack runs the ledger with authentication: an admin that
// feeds it, a reader of every run and a reader limited to run-a*.
func startExplorerStack(t *testing.T) (*stack.Stack, kafkalog.Config) {
	t.Helper()
	a, err := auth.New([]auth.Token{
		{Name: "admin", Token: tokAdmin, Role: auth.Admin},
		{Name: "reader", Token: tokReader, Role: auth.Reader},
		{Name: "reader-a", Token: tokReaderA, Role: auth.Reader, Runs: []string{"run-a*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	kc := testenv.RealKafka(t)
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir(),
		Auth: a, Only: []string{stack.ServiceIngest, stack.ServiceProjector, stack.ServiceAPI},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("stack log:\n%s", logs.String())
		}
	})
	return s, kc
}

func simulateRun(t *testing.T, s *stack.Stack, run string, o simulate.Options) simulate.Result {
	t.Helper()
	o.URL, o.Run, o.Token = s.URL(), run, tokAdmin
	res, err := simulate.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("simulate %s: %v", run, err)
	}
	return res
}

// smallRun is a short run with token ids inlined: a few steps, masking, drops.
var smallRun = simulate.Options{Seed: 7, Trainer: true, Steps: 3, BatchGroups: 3, GroupSize: 4, Tasks: 10, MinTurns: 2, MaxTurns: 12,
	MaxStaleness: 1, Tokens: true, Workers: 4}

// TestExplorerInChromium drives the explorer in headless Chromium against a
// simulated run: every view renders the API's numbers, deep links and
// clicks land, filters filter, a scoped reader sees only its runs, a v2
// run's text and version segments show, and nothing is fetched from
// elsewhere.
func TestExplorerInChromium(t *testing.T) {
	chromiumPath(t)
	s, kc := startExplorerStack(t)
	const run = "run-a-explorer"
	// The live trainer trains the batches that seal, which need not be
	// every one asked for (the researcher's test counts them the same
	// way): waiting for a third that never seals failed after 3 minutes
	// once, under CI's load. The views below need two.
	trained := len(simulateRun(t, s, run, smallRun).Steps)
	if trained < 2 {
		t.Fatalf("the trainer trained %d steps of %d; the views below need two", trained, smallRun.Steps)
	}
	simulateRun(t, s, "run-b-other", simulate.Options{Seed: 8, Steps: 1, BatchGroups: 2, GroupSize: 2, Tasks: 4, MaxTurns: 6, Workers: 2})
	postV2Run(t, s, "run-a-v2", "v2-g", true)
	api := s.URL() + "/v1/runs/" + run + "/explore"
	waitTrained(t, s, kc, run, trained)

	b := newBrowser(t)
	ui := s.URL() + "/ui/"
	// The token lives in the tab's session storage, as the token form
	// leaves it; set it on a page of no view, which asks for nothing.
	b.run(chromedp.Navigate(s.URL()+"/ui/index.html#/runs/-/none"), chromedp.Evaluate(`sessionStorage.setItem("rl-token", `+strconv.Quote(tokReader)+`)`, nil))
	hash := func(parts ...string) string {
		for i, p := range parts {
			parts[i] = url.PathEscape(p)
		}
		return ui + "#/runs/" + strings.Join(parts, "/")
	}
	shots := map[string]string{}

	t.Run("runs", func(t *testing.T) {
		b.t = t
		b.open(ui+"#/", "runs")
		api := getJSON(t, s.URL()+"/v1/explore/runs", tokReader)
		var rows []string
		b.run(chromedp.Evaluate(`[...document.querySelectorAll("tr[data-row]")].map(r => r.dataset.row)`, &rows))
		if len(rows) != 3 {
			t.Errorf("runs list shows %q, want the 3 runs", rows)
		}
		for _, r := range field(api, "runs").([]any) {
			if field(r, "run") == run {
				var got map[string]string
				b.run(chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('tr[data-row="`+run+`"] [data-k]')].map(e => [e.dataset.k, e.dataset.v]))`, &got))
				for _, k := range []string{"facts", "batches", "tasks_admitted", "tasks_rejected", "findings"} {
					sameNumber(t, got, k, field(r, k))
				}
			}
		}
		shots["runs"] = b.screenshot("runs")
		b.checkClean(s.URL() + "/")
	})

	stepAPI := getJSON(t, api+"/steps/1", tokReader)
	t.Run("run", func(t *testing.T) {
		b.t = t
		b.open(hash(run), "run")
		v := getJSON(t, api, tokReader)
		page := b.values()
		for _, k := range []string{"facts", "batches", "tasks_admitted", "tasks_rejected", "findings", "groups_in_flight"} {
			sameNumber(t, page, k, field(v, k))
		}
		for i, st := range field(v, "steps").([]any) {
			n := strconv.Itoa(i + 1)
			for _, k := range []string{"groups", "attempts", "pass_rate", "masked_token_fraction", "tokens_per_solve", "infra_lost_rate", "loss"} {
				sameNumber(t, page, k+"-"+n, field(st, k))
			}
		}
		var charts int
		b.run(chromedp.Evaluate(`document.querySelectorAll(".chart svg").length`, &charts))
		if charts != 16 {
			t.Errorf("run view draws %d charts, want 16", charts)
		}
		shots["run"] = b.screenshot("run")
		// With ?steps=all the table is a page of the steps list.
		list := getJSON(t, api+"/steps", tokReader)
		if got, want := len(field(list, "steps").([]any)), field(v, "steps_total"); float64(got) != want {
			t.Errorf("the steps list holds %d steps, the run view counts %v", got, want)
		}
		b.open(hash(run)+"?steps=all", "run")
		all := b.values()
		for _, st := range field(list, "steps").([]any) {
			n := strconv.FormatFloat(field(st, "step").(float64), 'f', -1, 64)
			for _, k := range []string{"groups", "attempts", "pass_rate", "loss"} {
				sameNumber(t, all, k+"-"+n, field(st, k))
			}
		}
		b.open(hash(run), "run")
		// Clicking a step's point in the pass-rate chart opens the step.
		b.run(chromedp.Click(`[data-chart="pass_rate"] circle[data-step="2"]`, chromedp.ByQuery))
		b.waitView("step", 0)
		var h string
		b.run(chromedp.Evaluate(`location.hash`, &h))
		if want := "#/runs/" + run + "/steps/2"; h != want {
			t.Errorf("clicking step 2 went to %q, want %q", h, want)
		}
		b.checkClean(s.URL() + "/")
	})

	t.Run("step", func(t *testing.T) {
		b.t = t
		b.open(hash(run, "steps", "1"), "step")
		page := b.values()
		sameNumber(t, page, "seq", 1.0)
		sameNumber(t, page, "digest", field(stepAPI, "digest"))
		sameNumber(t, page, "tree_root", field(stepAPI, "tree", "root"))
		sameNumber(t, page, "tree_size", field(stepAPI, "tree", "size"))
		sameNumber(t, page, "watermark_offset", field(stepAPI, "watermark", "offset"))
		for _, k := range []string{"groups", "attempts", "turns", "trained_turns", "trained_tokens", "masked_tokens"} {
			sameNumber(t, page, k, field(stepAPI, "stats", k))
		}
		sameNumber(t, page, "gradient_step", field(stepAPI, "gradient", "step"))
		sameNumber(t, page, "loss", field(stepAPI, "gradient", "loss"))
		sameNumber(t, page, "dropped", float64(len(field(stepAPI, "dropped").([]any))))
		shots["step"] = b.screenshot("step")
		// The last sealed step links to no step after it.
		last := len(field(getJSON(t, api, tokReader), "steps").([]any))
		b.open(hash(run, "steps", strconv.Itoa(last)), "step")
		var next int
		b.run(chromedp.Evaluate(`document.querySelectorAll('a[href$="/steps/`+strconv.Itoa(last+1)+`"]').length`, &next))
		if _, ok := b.values()["last_step"]; !ok || next != 0 {
			t.Errorf("the last step %d links to step %d (%d links)", last, last+1, next)
		}
		b.checkClean(s.URL() + "/")
	})

	// The group with a retry when the run has one, else the step's first.
	group := field(stepAPI, "groups", 0, "group").(string)
	for _, a := range field(getJSON(t, api+"/attempts", tokReader), "attempts").([]any) {
		if field(a, "retry_of") != nil && field(a, "purpose") == "train" {
			group = field(a, "group").(string)
			break
		}
	}
	// An attempt of that group with more than one turn.
	var attempt string
	for _, a := range field(getJSON(t, api+"/groups/"+group, tokReader), "attempts").([]any) {
		if field(a, "turns").(float64) > 1 {
			attempt = field(a, "attempt").(string)
			break
		}
	}
	t.Run("group", func(t *testing.T) {
		b.t = t
		b.open(hash(run, "groups", group), "group")
		v := getJSON(t, api+"/groups/"+group, tokReader)
		page := b.values()
		sameNumber(t, page, "slots", field(v, "slots"))
		sameNumber(t, page, "attempt_count", float64(len(field(v, "attempts").([]any))))
		for _, a := range field(v, "attempts").([]any) {
			id := field(a, "attempt").(string)
			for _, k := range []string{"slot", "reward", "advantage", "turns"} {
				sameNumber(t, page, k+"-"+id, field(a, k))
			}
			sameNumber(t, page, "tokens-"+id, field(a, "completion_tokens"))
			// The verdict is the reward's, or "no reward yet" (never 0/0).
			switch p := field(a, "passed").(type) {
			case nil:
				sameNumber(t, page, "verdict-"+id, "")
			case bool:
				sameNumber(t, page, "verdict-"+id, strconv.FormatBool(p))
				if total := field(a, "tests_total").(float64); total > 0 {
					sameNumber(t, page, "tests-"+id, fmt.Sprintf("%v/%v", field(a, "tests_passed"), total))
				}
			}
			// The turn bar paints the turns in turn order as judged: the
			// masked (oldest) first.
			var bar []string
			b.run(chromedp.Evaluate(`[...document.querySelector('[data-turnbar="`+id+`"]').children].map(e => e.className)`, &bar))
			if judged, ok := field(a, "turn_trained").([]any); ok {
				var want []string
				for _, tr := range judged {
					if tr == true {
						want = append(want, "trained")
					} else {
						want = append(want, "masked")
					}
				}
				if len(bar) < len(want) || strings.Join(bar[:len(want)], ",") != strings.Join(want, ",") {
					t.Errorf("attempt %s: the turn bar paints %v, the batch judged %v", id, bar, want)
				}
			}
		}
		shots["group"] = b.screenshot("group")
		b.checkClean(s.URL() + "/")
	})

	t.Run("attempt", func(t *testing.T) {
		b.t = t
		b.open(hash(run, "attempts", attempt), "attempt")
		v := getJSON(t, api+"/attempts/"+attempt, tokReader)
		page := b.values()
		for _, k := range []string{"turns", "completion_tokens", "reward", "advantage", "score", "bonus", "slot"} {
			sameNumber(t, page, k, field(v, k))
		}
		for _, tv := range field(v, "turn_list").([]any) {
			n := strconv.Itoa(int(field(tv, "turn").(float64)))
			sameNumber(t, page, "lineage-"+n, field(tv, "lineage", "state"))
			sameNumber(t, page, "completion-"+n, field(tv, "completion_tokens"))
		}
		// The first turn's tokens are drawn, one span per token id, with
		// the loss-mask overlay.
		var spans int
		b.run(chromedp.Evaluate(`document.querySelectorAll('[data-toks="0"] span').length`, &spans))
		if want := len(field(v, "turn_list", 0, "token_ids").([]any)); spans != want {
			t.Errorf("turn 0 draws %d token spans, want %d", spans, want)
		}
		shots["attempt"] = b.screenshot("attempt")
		// Another overlay is a deep link too.
		b.open(hash(run, "attempts", attempt)+"?overlay=logprob", "attempt")
		b.screenshot("attempt-logprob")
		b.checkClean(s.URL() + "/")
	})

	t.Run("task", func(t *testing.T) {
		b.t = t
		var task string
		for _, tr := range field(getJSON(t, api+"/tasks", tokReader), "tasks").([]any) {
			if field(tr, "decision") != "pending" {
				task = field(tr, "task").(string)
				break
			}
		}
		b.open(hash(run, "tasks", task), "task")
		v := getJSON(t, api+"/tasks/"+task, tokReader)
		page := b.values()
		for _, k := range []string{"probes", "passes", "pass_rate", "decision", "attempts", "solved"} {
			sameNumber(t, page, k, field(v, k))
		}
		sameNumber(t, page, "decided_at", field(v, "decided_at", "seq"))
		shots["task"] = b.screenshot("task")
		b.checkClean(s.URL() + "/")
	})

	t.Run("encoded-paths", func(t *testing.T) {
		b.t = t
		// An id holding ".." segments stays one encoded segment of the
		// request: it never resolves into another route fetched with the
		// viewer's token.
		b.reset()
		b.run(chromedp.Navigate("about:blank"), chromedp.Navigate(hash(run, "attempts", "x/../../../explore")))
		b.waitError(t, "404")
		want := s.URL() + "/v1/runs/" + run + "/explore/attempts/x%2F..%2F..%2F..%2Fexplore"
		b.mu.Lock()
		reqs := append([]string(nil), b.requests...)
		b.mu.Unlock()
		if !slices.Contains(reqs, want) {
			t.Errorf("the page did not ask for %s; it asked for %q", want, reqs)
		}
		// A "." or ".." id cannot be a path segment: the page refuses it
		// and asks for nothing.
		for _, id := range []string{"..", "."} {
			b.reset()
			b.run(chromedp.Navigate("about:blank"), chromedp.Navigate(hash(run, "groups", id)))
			b.waitError(t, "400")
			b.mu.Lock()
			for _, u := range b.requests {
				if strings.Contains(u, "/v1/") {
					t.Errorf("group %q: the page asked for %s", id, u)
				}
			}
			b.mu.Unlock()
		}
		b.reset()
	})

	t.Run("filters", func(t *testing.T) {
		b.t = t
		rows := field(getJSON(t, api+"/attempts", tokReader), "attempts").([]any)
		want := 0
		for _, r := range rows {
			if field(r, "outcome") == "submitted" && field(r, "reward") != nil && field(r, "reward").(float64) >= 0.5 {
				want++
			}
		}
		b.open(hash(run, "attempts")+"?outcome=submitted&rmin=0.5", "attempts")
		sameNumber(t, b.values(), "shown", float64(want))
		var rendered int
		b.run(chromedp.Evaluate(`document.querySelectorAll("tr[data-row]").length`, &rendered))
		if rendered != want {
			t.Errorf("filtered attempts table has %d rows, want %d", rendered, want)
		}
		// Changing a filter in the form narrows the list and the link.
		b.run(chromedp.SetValue(`select[name="finish"]`, "stop", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelector('select[name="finish"]').dispatchEvent(new Event("change", {bubbles: true}))`, nil))
		testenv.CheckFor(t, 10*time.Second, "the finish filter in the link", func() bool {
			var h string
			b.run(chromedp.Evaluate(`location.hash`, &h))
			return strings.Contains(h, "finish=stop")
		})
		b.screenshot("attempts-filtered")
		b.checkClean(s.URL() + "/")
	})

	t.Run("v2", func(t *testing.T) {
		b.t = t
		v2 := s.URL() + "/v1/runs/run-a-v2/explore"
		testenv.CheckFor(t, 30*time.Second, "the v2 run's batch", func() bool {
			return field(getJSON(t, v2, tokReader), "batches").(float64) == 1
		})
		b.open(hash("run-a-v2", "attempts", "v2-g/a"), "attempt")
		var text string
		b.run(chromedp.Evaluate(`document.querySelector("[data-turn] .text").textContent`, &text))
		if !strings.Contains(text, "ls -la") {
			t.Errorf("the v2 turn's text is not shown: %q", text)
		}
		if state := b.values()["lineage-0"]; state != "trained" && state != "partly_trained" && state != "masked" {
			t.Errorf("the v2 turn's lineage is %q, want it judged by its batch", state)
		}
		var versions string
		b.run(chromedp.Evaluate(`document.querySelector(".turn .hd").textContent`, &versions))
		if !strings.Contains(versions, "policy version 0 (0 updates behind") || !strings.Contains(versions, "from token 2: policy version 1 (") {
			t.Errorf("the turn's two version segments are not shown: %q", versions)
		}
		sameNumber(t, b.values(), "output_cut-0-0", "300")
		sameNumber(t, b.values(), "task_prompt_cut", "1200")
		var prompt string
		b.run(chromedp.Evaluate(`document.querySelector("[data-prompt] .text").textContent`, &prompt))
		if !strings.Contains(prompt, "fix the bug") {
			t.Errorf("the attempt page does not show the task prompt: %q", prompt)
		}
		b.screenshot("attempt-v2")
		b.open(hash("run-a-v2", "tasks", "t-1"), "task")
		sameNumber(t, b.values(), "prompt_cut", "1200")
		sameNumber(t, map[string]string{"prompt_cut": fmt.Sprint(field(getJSON(t, v2+"/tasks/t-1", tokReader), "prompt_cut"))}, "prompt_cut", "1200")
		b.checkClean(s.URL() + "/")
	})

	t.Run("no-token-ids", func(t *testing.T) {
		b.t = t
		// run-b-other was simulated without inlined tokens: each turn is
		// drawn as its version segments, coloured as the loss mask.
		other := s.URL() + "/v1/runs/run-b-other/explore"
		var id string
		var turns float64
		for _, a := range field(getJSON(t, other+"/attempts", tokReader), "attempts").([]any) {
			if n := field(a, "turns").(float64); n > 0 {
				id, turns = field(a, "attempt").(string), n
				break
			}
		}
		b.open(hash("run-b-other", "attempts", id), "attempt")
		var bars int
		b.run(chromedp.Evaluate(`document.querySelectorAll("[data-segbar]").length`, &bars))
		if float64(bars) != turns {
			t.Errorf("attempt %s: %d segment bars for %v turns", id, bars, turns)
		}
		b.checkClean(s.URL() + "/")
	})

	t.Run("scope", func(t *testing.T) {
		b.t = t
		b.run(chromedp.Evaluate(`sessionStorage.setItem("rl-token", `+strconv.Quote(tokReaderA)+`)`, nil))
		b.open(ui+"#/", "runs")
		var rows []string
		b.run(chromedp.Evaluate(`[...document.querySelectorAll("tr[data-row]")].map(r => r.dataset.row)`, &rows))
		if strings.Join(rows, ",") != "run-a-v2,"+run && strings.Join(rows, ",") != run+",run-a-v2" {
			t.Errorf("reader-a sees runs %q, want only run-a-explorer and run-a-v2", rows)
		}
		b.run(chromedp.Navigate("about:blank"), chromedp.Navigate(hash("run-b-other")))
		var status string
		testenv.CheckFor(t, 10*time.Second, "the refusal", func() bool {
			b.run(chromedp.Evaluate(`(document.querySelector("[data-error]") || {dataset: {}}).dataset.error || ""`, &status))
			return status != ""
		})
		if status != "403" {
			t.Errorf("reader-a opening run-b-other: got status %q, want 403", status)
		}
		b.screenshot("scope-forbidden")
		b.reset() // the 403 itself is logged by the browser as a failed load
		b.run(chromedp.Evaluate(`sessionStorage.setItem("rl-token", `+strconv.Quote(tokReader)+`)`, nil))
	})

	if dir := os.Getenv("RL_EXPLORER_DOCS"); dir != "" {
		for _, name := range []string{"run", "step", "attempt"} { // group.png: TestExplorerResearcher's group of 8
			if p := shots[name]; p != "" {
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
	t.Logf("screenshots in %s", b.shots)
}

// TestExplorerLive: a run view open in the browser follows facts as they
// arrive, without reloading the page.
func TestExplorerLive(t *testing.T) {
	chromiumPath(t)
	s, _ := startExplorerStack(t)
	const run = "run-a-live"
	postV2Run(t, s, run, "live-1", true)
	testenv.CheckFor(t, 30*time.Second, "the run's first facts", func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.URL()+"/v1/runs/"+run+"/explore", nil)
		req.Header.Set("Authorization", "Bearer "+tokReader)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	b := newBrowser(t)
	// The token lives in the tab's session storage, as the token form
	// leaves it; set it on a page of no view, which asks for nothing.
	b.run(chromedp.Navigate(s.URL()+"/ui/index.html#/runs/-/none"), chromedp.Evaluate(`sessionStorage.setItem("rl-token", `+strconv.Quote(tokReader)+`)`, nil))
	b.open(s.URL()+"/ui/index.html?poll=300#/runs/"+run, "run")
	var first string
	b.run(chromedp.Evaluate(`window.__sameDocument = true; document.body.dataset.facts`, &first))
	// More facts arrive while the view is open: another group, which
	// seals a second batch.
	postV2Run(t, s, run, "live-2", false)
	testenv.CheckFor(t, 60*time.Second, "the open view to show the new facts and batch", func() bool {
		var now string
		var same bool
		var batches map[string]string
		b.run(chromedp.Evaluate(`document.body.dataset.facts`, &now), chromedp.Evaluate(`window.__sameDocument === true`, &same))
		if !same {
			t.Fatal("the page reloaded")
		}
		b.run(chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("[data-k=batches]")].map(e => [e.dataset.k, e.dataset.v]))`, &batches))
		a, _ := strconv.Atoi(first)
		n, _ := strconv.Atoi(now)
		return n > a && batches["batches"] == "2"
	})
	b.screenshot("run-live")
	b.checkClean(s.URL() + "/")

	// The refresh keeps what the user is typing, and the focus.
	b.open(s.URL()+"/ui/index.html?poll=300#/", "runs")
	facts := func() string {
		var v string
		b.run(chromedp.Evaluate(`(document.querySelector('tr[data-row="`+run+`"] [data-k=facts]') || {dataset: {}}).dataset.v || ""`, &v))
		return v
	}
	before := facts()
	b.run(chromedp.Focus(`input[name="q"]`, chromedp.ByQuery), chromedp.SendKeys(`input[name="q"]`, "run-a", chromedp.ByQuery))
	postV2Run(t, s, run, "live-3", false)
	testenv.CheckFor(t, 60*time.Second, "the runs list to show the new facts", func() bool { return facts() != before })
	var focus, typed string
	b.run(chromedp.Evaluate(`document.activeElement.name || document.activeElement.tagName`, &focus),
		chromedp.Evaluate(`document.querySelector('input[name="q"]').value`, &typed))
	if focus != "q" || typed != "run-a" {
		t.Errorf("after a refresh: focus on %q holding %q, want the search field holding %q", focus, typed, "run-a")
	}
	b.checkClean(s.URL() + "/")
}

// TestExplorerBundle: explore --out's bundle of an archived run opens from
// file:// with no server and shows the same numbers as the model's views.
func TestExplorerBundle(t *testing.T) {
	chromiumPath(t)
	s, kc := startExplorerStack(t)
	const run = "run-a-bundle"
	simulateRun(t, s, run, simulate.Options{Seed: 5, Trainer: true, Steps: 2, BatchGroups: 2, GroupSize: 3, Tasks: 6, MaxTurns: 8, Tokens: true, Workers: 2})
	var m *explore.Model
	testenv.CheckFor(t, 30*time.Second, "both batches recorded", func() bool {
		src, err := replay.OpenKafka(context.Background(), kc, run)
		if err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(t.TempDir(), "run.rla")
		if _, err := replay.Export(context.Background(), src, archive, replay.ExportOptions{}); err != nil {
			t.Fatal(err)
		}
		a, err := replay.OpenArchive(archive)
		if err != nil {
			t.Fatal(err)
		}
		if m, err = recorded.Load(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		_, ok := m.StepView(2)
		return ok
	})
	dir := filepath.Join(t.TempDir(), "bundle")
	if _, err := explore.WriteBundle(dir, m, explore.BundleOptions{}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	origin := "file://" + dir + "/"
	b.open(origin+"index.html", "run") // opens on the bundle's run
	rv := m.RunView(time.Now())
	page := b.values()
	sameNumber(t, page, "facts", float64(rv.Facts))
	sameNumber(t, page, "batches", float64(rv.Batches))
	for _, st := range rv.Steps {
		sameNumber(t, page, fmt.Sprintf("pass_rate-%d", st.Step), st.PassRate)
	}
	b.screenshot("bundle-run")
	sv, _ := m.StepView(1)
	b.open(origin+"index.html#/runs/"+run+"/steps/1", "step")
	sameNumber(t, b.values(), "digest", sv.Digest)
	a := sv.Groups[0].Attempts[0]
	b.open(origin+"index.html#/runs/"+run+"/attempts/"+url.PathEscape(a.Attempt), "attempt")
	sameNumber(t, b.values(), "turns", float64(a.Turns))
	b.screenshot("bundle-attempt")
	b.checkClean(origin)
}

// postV2Run appends one group of a run in catalogue version 2, after the
// run's start and its task when start is set: turn text,
// token ids, two version segments in one turn, a tool call with its
// input and output.
func postV2Run(t *testing.T, s *stack.Stack, run, group string, start bool) {
	t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	one, two, f := 1, 2, false
	var evs []events.Event
	add := func(d events.Fact) {
		at = at.Add(time.Second)
		evs = append(evs, events.New(run, "test", at, d))
	}
	if start {
		add(&events.RunStarted{Config: events.RunConfig{BatchGroups: &one, GroupSize: &two, EnforceAdmission: &f, MaxStaleness: new(int)}, Model: "m", Harness: "h"})
		add(&events.TaskRegistered{Task: "t-1", Source: "src", Kind: "swe", Tier: 1, Gates: []events.Gate{}, Prompt: "fix the bug", PromptCut: 1200})
	}
	add(&events.GroupStarted{Group: group, Task: "t-1", Size: 2, Purpose: events.PurposeTrain})
	for i, id := range []string{group + "/a", group + "/b"} {
		add(&events.AttemptStarted{Attempt: id, Group: group, Task: "t-1", Engine: "e", VM: "vm", ForkMS: 10})
		add(&events.TurnGenerated{Attempt: id, Turn: 0, PromptTokens: 10, CompletionTokens: 4,
			VersionSegments: []events.VersionSegment{{Start: 0, PolicyVersion: 0}, {Start: 2, PolicyVersion: 1}},
			TokenIDs:        []int32{11, 12, 13, 14}, Logprobs: []float32{-0.1, -0.2, -0.3, -0.4}, Text: "ls -la", Finish: events.FinishToolCall, LatencyMS: 5})
		add(&events.ToolCalled{Attempt: id, Turn: 0, Call: 0, Tool: "bash", DurationMS: 3, OutputBytes: 305, Input: "ls -la", Output: "a.go\n", OutputCut: 300})
		add(&events.AttemptFinished{Attempt: id, Outcome: events.OutcomeSubmitted})
		add(&events.RewardComputed{Attempt: id, Passed: i == 0, TestsPassed: 1 - i, TestsTotal: 1, Verifier: "v"})
	}
	var body bytes.Buffer
	body.WriteByte('[')
	for i, ev := range evs {
		b, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(b)
	}
	body.WriteByte(']')
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/events", &body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("posting the v2 run: %d %s", resp.StatusCode, b)
	}
}
