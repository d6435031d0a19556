package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// writeArchive folds a simulated run and writes it, with the decisions
// the fold concluded (tamper, when set, changes them first), as an
// archive.
func writeArchive(t *testing.T, dir string, tamper func([]projections.Decision)) string {
	t.Helper()
	plan, err := simulate.Generate(simulate.Options{Seed: 5, Tasks: 24, Steps: 3, BatchGroups: 4, MaxTurns: 60, MaxStaleness: 1}, "cli-run")
	if err != nil {
		t.Fatal(err)
	}
	var recs []projections.Record
	for i, ev := range plan.All() {
		v, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, projections.Record{Value: v, Partition: 1, Offset: int64(i)})
	}
	ds, err := projections.FoldAll(plan.Run, recs)
	if err != nil {
		t.Fatal(err)
	}
	if tamper != nil {
		tamper(ds)
	}
	path := filepath.Join(dir, "run.rla")
	w, err := replay.CreateArchive(path, plan.Run, "test")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if err := w.AddFact(replay.Fact{Seq: uint64(i + 1), Partition: r.Partition, Offset: r.Offset, Value: r.Value}); err != nil {
			t.Fatal(err)
		}
	}
	for i, d := range ds {
		if err := w.AddDecision(replay.Recorded{Partition: 1, Offset: int64(i), Value: d.Value}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReplayCommands(t *testing.T) {
	dir := t.TempDir()
	arch := writeArchive(t, dir, nil)

	code, out, errs := run(t, "replay", "--archive", arch, "--verify")
	if code != 0 || !strings.Contains(out, "verdict: OK") {
		t.Fatalf("replay --verify: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = run(t, "replay", "--archive", arch, "--verify", "--json")
	var rep replay.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK() {
		t.Errorf("replay --verify --json: exit %d, %s", code, out)
	}
	code, out, _ = run(t, "replay", "--archive", arch, "--as-of-step", "2")
	if code != 0 || !strings.Contains(out, "as of step 2") || !strings.Contains(out, "in flight") {
		t.Errorf("replay --as-of-step: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "replay", "--archive", arch, "--what-if", "max_staleness=0")
	if code != 0 || !strings.Contains(out, "what-if max_staleness=0") || !strings.Contains(out, "recorded") {
		t.Errorf("replay --what-if: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "replay", "--archive", arch, "--what-if", "max_staleness=1", "--json")
	var wi replay.WhatIfResult
	if code != 0 || json.Unmarshal([]byte(out), &wi) != nil || len(wi.Steps) == 0 || !wi.Steps[0].Same {
		t.Errorf("replay --what-if with the recorded setting --json: exit %d, %.300s", code, out)
	}
	code, out, errs = run(t, "replay", "--archive", arch, "--reorder", "3", "--seed", "7")
	if code != 0 || !strings.Contains(out, "seeds 7..9") || !strings.Contains(out, "verdict: OK: 3 reorderings") {
		t.Errorf("replay --reorder: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = run(t, "replay", "--archive", arch, "--reorder", "1", "--json")
	var ro replay.ReorderReport
	if code != 0 || json.Unmarshal([]byte(out), &ro) != nil || !ro.OK() || ro.Decisions == 0 {
		t.Errorf("replay --reorder --json: exit %d, %.300s", code, out)
	}
	for _, bad := range [][]string{
		{"replay", "--archive", arch},
		{"replay", "--archive", arch, "--reorder", "0"},
		{"replay", "--archive", arch, "--verify", "--seed", "3"},
		{"replay", "--archive", arch, "--verify", "--reorder", "2"},
		{"replay", "--archive", arch, "--verify", "--as-of-step", "1"},
		{"replay", "--archive", arch, "--what-if", "bogus=1"},
		{"replay", "--archive", arch, "--run", "another-run", "--verify"},
		{"replay", "--archive", filepath.Join(dir, "missing.rla"), "--verify"},
	} {
		if code, _, _ := run(t, bad...); code == 0 {
			t.Errorf("%v: exit 0", bad)
		}
	}

	html := filepath.Join(dir, "audit.html")
	code, out, errs = run(t, "audit", "--archive", arch, "--html", html)
	if code != 0 || !strings.Contains(out, "against the recipe") {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errs)
	}
	page, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(page, []byte("<svg")) || bytes.Contains(page, []byte("http")) {
		t.Errorf("audit --html: %v, %d bytes", err, len(page))
	}

	proof := filepath.Join(dir, "p.json")
	code, _, errs = run(t, "prove", "--archive", arch, "--fact", "seq:100", "--batch", "2", "--out", proof)
	if code != 0 {
		t.Fatalf("prove: exit %d\n%s", code, errs)
	}
	var p replay.Proof
	b, _ := os.ReadFile(proof)
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	head := strings.Join([]string{itoa(p.Head.Size), p.Head.Root}, ":")
	if code, out, errs = run(t, "prove", "--check", proof, "--head", head); code != 0 || !strings.HasPrefix(out, "OK: fact 100") {
		t.Errorf("prove --check: exit %d\n%s%s", code, out, errs)
	}
	if code, _, _ = run(t, "prove", "--check", proof, "--head", itoa(p.Head.Size)+":"+strings.Repeat("0", 64)); code != 1 {
		t.Errorf("prove --check against the wrong head: exit %d, want 1", code)
	}
	if code, _, errs = run(t, "prove", "--archive", arch, "--consistency", "1..3"); code != 0 {
		t.Errorf("prove --consistency: exit %d\n%s", code, errs)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// A changed decision fails the verification with exit 1 and is named.
func TestReplayNamesDivergence(t *testing.T) {
	arch := writeArchive(t, t.TempDir(), func(ds []projections.Decision) {
		for i, d := range ds {
			if d.Kind == projections.KindBatchSealed && d.Seq == 2 {
				ds[i].Value = bytes.Replace(d.Value, []byte(`"trained":true`), []byte(`"trained":false`), 1)
			}
		}
	})
	code, out, errs := run(t, "replay", "--archive", arch, "--verify")
	if code != 1 || !strings.Contains(out, "batch.sealed 2") || !strings.Contains(out, ".trained") || !strings.Contains(errs, "DIVERGED") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if code, _, _ = run(t, "audit", "--archive", arch); code != 1 {
		t.Errorf("audit of a divergent run: exit %d, want 1", code)
	}
}

// export reads a run from Kafka into an archive that then replays alone.
func TestExportCommand(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	res, err := simulate.Run(ctx, simulate.Options{URL: s.URL(), Seed: 9, Run: "export-run", Tasks: 16, Steps: 2, BatchGroups: 4, MaxTurns: 40, Trainer: true})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kafkalog.EndOffsets(ctx, kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, time.Minute, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})
	kafka := []string{"--brokers", kc.Brokers[0], "--topic-prefix", kc.TopicPrefix}
	out := filepath.Join(t.TempDir(), "export.rla")
	code, stdout, errs := run(t, append([]string{"export", "--run", res.Run, "--out", out}, kafka...)...)
	if code != 0 || !strings.Contains(stdout, "verified on open") {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, errs)
	}
	if code, stdout, errs = run(t, append([]string{"replay", "--run", res.Run, "--verify"}, kafka...)...); code != 0 {
		t.Fatalf("replay from Kafka: exit %d\n%s%s", code, stdout, errs)
	}
	if code, stdout, errs = run(t, "replay", "--archive", out, "--verify"); code != 0 || !strings.Contains(stdout, "verdict: OK") {
		t.Fatalf("replay of the export: exit %d\n%s%s", code, stdout, errs)
	}
}
