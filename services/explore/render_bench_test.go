package explore_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// Render benchmarks: the explorer's heaviest views in headless Chromium,
// fed from a server that answers prepared JSON, so that what is measured
// is the page: fetching, parsing and drawing.
//
//	go test ./services/explore/ -run '^$' -bench BenchmarkRender -benchtime 5x
//
// Metrics, from the route's start: fetch-ms (the JSON fetched and
// parsed), first-ms (the view's HTML in the page), full-ms (charts drawn,
// visible token spans filled, the next frame), and for the attempt the
// longest frame (max-frame-ms) and the 95th percentile frame while the page
// is scrolled from top to bottom one screen per frame.

// bigRunView is the run view of a long run: 1,000 steps (a 1M-fact run of
// the demo's shape has about 150; 1,000 bounds it) with five staleness
// values in each histogram.
func bigRunView(steps int) explore.RunView {
	v := explore.RunView{RunSummary: explore.RunSummary{Run: "big", Status: "idle", Facts: 1_000_000, Batches: steps, Catalogue: []int{1, 2}},
		Config: events.DefaultConfig(), Configured: true, Drops: map[string]int{}, Policies: []explore.PolicyVersion{}, Findings: []explore.Finding{},
		Reference: explore.Reference{ZeroSignalRate: projections.RefZeroSignalRate, InfraLostRate: projections.RefInfraLostRate, TruncatedLow: 0.01, TruncatedHigh: 0.03}}
	for k := 1; k <= steps; k++ {
		hist := func(shift int) []projections.Count {
			var c []projections.Count
			for s := range 5 {
				c = append(c, projections.Count{Value: int64(s), N: 10 + (k+s+shift)%7})
			}
			return c
		}
		st := projections.StepAudit{Step: uint64(k), Fact: uint64(k * 1000), Groups: 8, Attempts: 64, Solves: 20 + k%20,
			PassRate: float64(20+k%20) / 64, TokensPerSolve: 10000 + float64(k%500)*10, MaskedTokenFraction: float64(k%10) / 100,
			ZeroSignalRate: float64(k%3) / 10, InfraLostRate: float64(k%2) / 100, Dropped: projections.NamedCounts{{Name: "zero_signal", N: k % 3}},
			Staleness: hist(0), InFlight: hist(1), InQueue: hist(2), Trained: true, Loss: 1 / float64(k), TruncatedFraction: 0.02}
		mean, gn := float64(k%50)/50, 1+float64(k%7)/10
		v.Steps = append(v.Steps, explore.Step{StepAudit: st, Funnel: explore.Funnel{Registered: 1000, Probed: 900, Admitted: 400 + k/10, Rejected: 300},
			MeanReward: &mean, Reward: &explore.Spread{Min: -0.2, Q1: mean / 2, Median: mean, Q3: mean + 0.2, Max: 1.05}, GradNorm: &gn, TrainedStaleness: hist(3)})
	}
	return v
}

// bigAttempt is an attempt of 200 turns and 100K completion tokens, every
// token inlined, a turn of two version segments every tenth.
func bigAttempt(turns, tokensPerTurn int) explore.AttemptView {
	tv := uint64(10)
	v := explore.AttemptView{AttemptRow: explore.AttemptRow{Attempt: "g/a", Group: "g", Task: "t", Purpose: "train", Outcome: "submitted",
		Batch: 11, Turns: turns, CompletionTokens: int64(turns * tokensPerTurn)}, TrainerVersion: &tv, MaxStaleness: 6}
	for i := range turns {
		t := explore.TurnView{Turn: i, Fact: projections.FactPosition{Seq: uint64(1000 + i)}, PromptTokens: int64(1000 + i*tokensPerTurn),
			CompletionTokens: int64(tokensPerTurn), Finish: "tool_call", ObservationIDs: []int32{}, Tools: []events.ToolCalled{
				{Attempt: "g/a", Turn: i, Tool: "bash", DurationMS: 120, OutputBytes: 300}},
			Text:     strings.Repeat("some generated text ", 40),
			Segments: []projections.TurnSegment{{Start: 0, PolicyVersion: int64(4 + i/50), Staleness: int64(6 - i/50), Trained: true}},
			Judged:   true, Lineage: explore.Lineage{State: "trained", Batch: 11, Reason: "trained in batch"}}
		if i%10 == 9 {
			t.Segments = append(t.Segments, projections.TurnSegment{Start: int64(tokensPerTurn / 2), PolicyVersion: int64(5 + i/50), Staleness: int64(5 - i/50), Trained: true})
		}
		for j := range tokensPerTurn {
			t.TokenIDs = append(t.TokenIDs, int32(1000+(i*tokensPerTurn+j)%50000))
			t.Logprobs = append(t.Logprobs, -float32(j%17)/10)
		}
		v.TurnList = append(v.TurnList, t)
	}
	return v
}

// bigGroup is a group of 8 attempts of turns turns each, as the group view
// and the side-by-side view answer it: texts of some hundred words that
// differ from attempt to attempt, a tool call a turn.
func bigGroup(turns int) (explore.GroupView, explore.SideView) {
	g := explore.GroupView{Group: "g", Task: "t", Purpose: "train", Size: 8, State: "in_batch", Batch: 3, Slots: 8}
	side := explore.SideView{Group: "g", Task: "t", State: "in_batch"}
	words := strings.Fields("the tests for parse cover the happy path only so the regression must be elsewhere and I will look at how load_config is called before changing anything")
	for a := range 8 {
		id := "g/a" + strconv.Itoa(a)
		row := explore.AttemptRow{Attempt: id, Group: "g", Task: "t", Purpose: "train", Slot: a, Outcome: "submitted", Turns: turns, Batch: 3}
		g.Attempts = append(g.Attempts, row)
		sa := explore.SideAttempt{AttemptRow: row}
		for n := range turns {
			var text []string
			for w := range 120 {
				text = append(text, words[(w*(a%3+1)+n)%len(words)])
			}
			sa.TurnList = append(sa.TurnList, explore.SideTurn{Turn: n, Text: strings.Join(text, " "), Finish: "tool_call", CompletionTokens: 300,
				Tools: []events.ToolCalled{{Attempt: id, Turn: n, Tool: "bash", Input: "pytest -q tests/test_" + words[(n+a)%len(words)] + ".py", Output: "ok"}}})
		}
		side.Attempts = append(side.Attempts, sa)
	}
	return g, side
}

// bigSearch is a page of hits of a search.
func bigSearch(hits int) explore.SearchView {
	v := explore.SearchView{Query: "apply_patch", Attempts: 16893, Searched: 4000, Next: "4000.3.1", Stopped: "hits"}
	for i := range hits {
		v.Hits = append(v.Hits, explore.SearchHit{Attempt: "g" + strconv.Itoa(i) + "/a", Group: "g" + strconv.Itoa(i), Task: "t", Turn: i % 30, Field: "tool_input",
			Tool: "apply_patch", Offset: 40, Matches: 2, Before: strings.Repeat("context ", 7), Match: "apply_patch", After: strings.Repeat(" more", 12)})
	}
	return v
}

func fixtureServer(tb testing.TB, data map[string]any) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui/", http.FileServerFS(explore.Assets())))
	bodies := map[string][]byte{}
	for p, v := range data {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		bodies[p] = b
	}
	// The page encodes every segment (an attempt g/a is asked for as
	// g%2Fa); the views are found by the decoded path, as the server's
	// {attempt...} wildcards find them.
	mux.HandleFunc("GET /v1/", func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

type timings struct {
	Fetch float64 `json:"fetch_ms"`
	First float64 `json:"first_ms"`
	Full  float64 `json:"full_ms"`
}

func BenchmarkRender(b *testing.B) {
	chromiumPath(b)
	group, side := bigGroup(50)
	next := bigAttempt(50, 500)
	next.Attempt, next.PrevAttempt = "g/b", "g/a"
	first := bigAttempt(200, 500)
	first.NextAttempt = "g/b"
	data := map[string]any{
		"/v1/runs/big/explore":                bigRunView(1000),
		"/v1/runs/big/explore/attempts/g/a":   first,
		"/v1/runs/big/explore/attempts/g/b":   next,
		"/v1/runs/big/explore/groups/g":       group,
		"/v1/runs/big/explore/side-by-side/g": side,
		"/v1/runs/big/explore/search":         bigSearch(200),
		"/v1/explore/runs":                    map[string]any{"runs": []explore.RunSummary{}},
	}
	for _, r := range []string{"big2", "big3", "big4"} {
		v := bigRunView(1000)
		v.Run = r
		data["/v1/runs/"+r+"/explore"] = v
	}
	srv := fixtureServer(b, data)
	br := newBrowser(b)
	for _, c := range []struct{ name, hash, view string }{
		{"run-view-1000-steps", "#/runs/big", "run"},
		{"attempt-200-turns-100k-tokens", "#/runs/big/attempts/g%2Fa", "attempt"},
		{"group-8-side-by-side-50-turns", "#/runs/big/groups/g?turns=all", "group"},
		{"search-200-hits", "#/runs/big/search?q=apply_patch", "search"},
		{"compare-4-runs-1000-steps", "#/compare?runs=big,big2,big3,big4", "compare"},
	} {
		b.Run(c.name, func(b *testing.B) {
			br.t = b
			var fetch, first, full, wall float64
			for range b.N {
				start := time.Now()
				// poll=600000: no live refresh during the measurement.
				br.open(srv.URL+"/ui/index.html?poll=600000"+c.hash, c.view)
				wall += float64(time.Since(start).Microseconds()) / 1000
				var t timings
				br.run(chromedp.Evaluate(`RL.timings`, &t))
				fetch += t.Fetch
				first += t.First
				full += t.Full
			}
			n := float64(b.N)
			b.ReportMetric(fetch/n, "fetch-ms")
			b.ReportMetric(first/n, "first-ms")
			b.ReportMetric(full/n, "full-ms")
			b.ReportMetric(wall/n, "load-to-ready-ms")
			if c.view == "attempt" {
				var frames struct {
					Max, P95 float64
					Frames   int
					Spans    int
				}
				br.run(chromedp.Evaluate(scrollJS, &frames, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
				b.ReportMetric(frames.Max, "max-frame-ms")
				b.ReportMetric(frames.P95, "p95-frame-ms")
				b.ReportMetric(float64(frames.Spans), "spans-after-scroll")
			}
			br.checkClean(srv.URL + "/")
		})
	}
	// Navigation in the open page: n from an attempt of 200 turns to the
	// next of 50, measured from the key to the next attempt drawn.
	b.Run("nav-next-attempt", func(b *testing.B) {
		br.t = b
		var fetch, first, full, wall float64
		for range b.N {
			br.open(srv.URL+"/ui/index.html?poll=600000#/runs/big/attempts/g%2Fa", "attempt")
			n := br.waitView("attempt", 0)
			start := time.Now()
			br.run(chromedp.KeyEvent("n"))
			br.waitView("attempt", n)
			wall += float64(time.Since(start).Microseconds()) / 1000
			var t timings
			br.run(chromedp.Evaluate(`RL.timings`, &t))
			fetch += t.Fetch
			first += t.First
			full += t.Full
		}
		n := float64(b.N)
		b.ReportMetric(fetch/n, "fetch-ms")
		b.ReportMetric(first/n, "first-ms")
		b.ReportMetric(full/n, "full-ms")
		b.ReportMetric(wall/n, "key-to-ready-ms")
		br.checkClean(srv.URL + "/")
	})
}

// scrollJS scrolls the page from top to bottom one screen per frame and
// reports the frames' durations, and how many token spans the page holds
// afterwards (the ones scrolled past).
const scrollJS = `new Promise((resolve) => {
  const gaps = []; let last = performance.now();
  scrollTo(0, 0);
  function step(now) {
    gaps.push(now - last); last = now;
    if (scrollY + innerHeight >= document.body.scrollHeight - 2) {
      gaps.sort((a, b) => a - b);
      resolve({Max: gaps[gaps.length - 1], P95: gaps[Math.floor(gaps.length * 0.95)], Frames: gaps.length,
        Spans: document.querySelectorAll(".toks span").length});
      return;
    }
    scrollBy(0, innerHeight);
    requestAnimationFrame(step);
  }
  requestAnimationFrame(step);
})`
