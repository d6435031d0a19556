package report

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

var update = flag.Bool("update", false, "rewrite testdata/structure.golden")

// history is a run held in memory, as a replay source.
type history struct {
	run       string
	facts     []replay.Fact
	decisions []replay.Recorded
}

func (h *history) Run() string      { return h.run }
func (h *history) Describe() string { return "memory " + h.run }
func (h *history) Facts(_ context.Context, fn func(replay.Fact) error) error {
	for _, f := range h.facts {
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}
func (h *history) Decisions(_ context.Context, fn func(replay.Recorded) error) error {
	for _, d := range h.decisions {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// simulatedHistory is a seeded simulated run with a trainer that answers
// every sealed batch with gradient.applied — reporting the wrong digest for
// batch 2, which is a finding — so every part of the report has data.
func simulatedHistory(t *testing.T) *history {
	t.Helper()
	o := simulate.Options{Seed: 11, Tasks: 24, Steps: 5, BatchGroups: 4, MaxTurns: 80, MaxStaleness: 2}
	plan, err := simulate.Generate(o, "report-run")
	if err != nil {
		t.Fatal(err)
	}
	h := &history{run: plan.Run}
	fold, store := projections.NewFold(h.run), projections.NewMemStore()
	var sealed []projections.Manifest
	add := func(ev events.Event) {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		f := replay.Fact{Seq: uint64(len(h.facts) + 1), Partition: 2, Offset: int64(len(h.facts)), Value: v}
		h.facts = append(h.facts, f)
		ds, err := fold.Apply(store, f.Record())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			h.decisions = append(h.decisions, replay.Recorded{Partition: 2, Offset: int64(len(h.decisions)), Value: d.Value})
			if d.Kind == projections.KindBatchSealed {
				m, err := projections.ManifestOf(d.Value)
				if err != nil {
					t.Fatal(err)
				}
				sealed = append(sealed, m)
			}
		}
	}
	for _, ev := range plan.All() {
		add(ev)
		for ; len(sealed) > 0; sealed = sealed[1:] {
			m := sealed[0]
			digest := m.Digest
			if m.Seq == 2 {
				digest = "sha256:00"
			}
			k := int64(m.Seq)
			add(events.New(h.run, "trainer", ev.At.Add(time.Second), &events.GradientApplied{Step: k, Batch: k, BatchDigest: digest,
				FromVersion: k - 1, ToVersion: k, Loss: 0.4, TrainedTokens: 100000, TruncatedFraction: 0.01 + 0.002*float64(k),
				LogprobGap: map[string]float64{"0": 0.05, "1": 0.066, "2": 0.071}, GradNorm: 1.1}))
		}
	}
	return h
}

var external = regexp.MustCompile(`(?i)(https?:|ftp:|//[a-z0-9]|\bsrc\s*=|\bhref\s*=|url\(|@import|<script|<link|<iframe|<img)`)

func TestHTMLReport(t *testing.T) {
	h := simulatedHistory(t)
	a, v, err := replay.Audit(context.Background(), h, replay.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || len(a.Findings) == 0 || len(a.Steps) < 3 || a.GradientSteps != len(a.Steps) {
		t.Fatalf("the run does not exercise the report: verified %v, %d findings, %d steps, %d trained", v.OK(), len(a.Findings), len(a.Steps), a.GradientSteps)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Data{Audit: a, Verify: v}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if m := external.FindString(page); m != "" {
		t.Errorf("the page refers outside itself: %q", m)
	}
	for _, tag := range []string{"svg", "table", "figure", "tr"} {
		if open, closed := strings.Count(page, "<"+tag+" ")+strings.Count(page, "<"+tag+">"), strings.Count(page, "</"+tag+">"); open != closed {
			t.Errorf("%d <%s> opened, %d closed", open, tag, closed)
		}
	}
	// Every finding is listed with its position.
	for _, f := range a.Findings {
		if !strings.Contains(page, f.Finding.Detail) {
			t.Errorf("finding %d (%s) is not on the page", f.Seq, f.Finding.Kind)
		}
	}
	got := structure(page)
	path := filepath.Join("testdata", "structure.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("the page's structure changed (go test -update after checking):\ngot:\n%s", got)
	}

	var text bytes.Buffer
	if err := WriteText(&text, Data{Audit: a, Verify: v}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verification  OK", "against the recipe", "zero-signal groups", "per step", "tools", "findings", "batch_digest_mismatch"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text summary lacks %q", want)
		}
	}
}

// structure is the page's skeleton: its headings, element ids, table
// header rows and the kinds of SVG marks per chart — what must not move
// by accident — without the numbers of one run.
func structure(page string) string {
	var b strings.Builder
	heading := regexp.MustCompile(`<h([12])[^>]*>(.*?)</h[12]>`)
	id := regexp.MustCompile(`<(\w+)[^>]* id="([^"]+)"`)
	th := regexp.MustCompile(`<tr>(<th>[^<]*</th>)+</tr>`)
	figure := regexp.MustCompile(`(?s)<figure id="([^"]+)">(.*?)</figure>`)
	tags := regexp.MustCompile(`<(rect|polyline|circle|line|text)\b`)
	digits := regexp.MustCompile(`\d+`)
	for _, m := range heading.FindAllStringSubmatch(page, -1) {
		b.WriteString("h" + m[1] + " " + digits.ReplaceAllString(m[2], "N") + "\n")
	}
	for _, m := range id.FindAllStringSubmatch(page, -1) {
		b.WriteString("#" + m[2] + " <" + m[1] + ">\n")
	}
	for _, m := range th.FindAllString(page, -1) {
		b.WriteString("header " + strings.NewReplacer("<tr>", "", "</tr>", "", "<th>", "[", "</th>", "]").Replace(m) + "\n")
	}
	for _, m := range figure.FindAllStringSubmatch(page, -1) {
		kinds := map[string]bool{}
		for _, t := range tags.FindAllStringSubmatch(m[2], -1) {
			kinds[t[1]] = true
		}
		b.WriteString("chart " + m[1] + ":")
		for _, k := range []string{"rect", "polyline", "circle", "line", "text"} {
			if kinds[k] {
				b.WriteString(" " + k)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
