package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/gcpolicy"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// fireFlashFacts is a FireFlash-sized run (docs/design.md §1.2: ~50 million facts
// over five days).
const fireFlashFacts = 50_000_000

// replayOptions sizes a simulated run to about facts facts: the shape of
// the replay package's large benchmark (~3.0 M facts at 64 steps).
func replayOptions(facts int) simulate.Options {
	if facts < 200_000 {
		steps := max(1, facts/5000)
		return simulate.Options{Seed: 42, Tasks: 24, Steps: steps, BatchGroups: 4, MaxTurns: 80}
	}
	return simulate.Options{Seed: 42, Tasks: 200, Steps: max(1, 64*facts/3_000_000), BatchGroups: 64, MaxTurns: 200}
}

func replayFigures(ctx context.Context, e *env) ([]*Figure, error) {
	o := replayOptions(e.o.ReplayFacts)
	e.log.Info("replay: generating and appending the run", "steps", o.Steps, "tasks", o.Tasks)
	kc := e.kafka("replay", 1)
	run := "bench-replay"
	facts, err := seedReplay(ctx, kc, o, run)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rolloutledger-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	arch := filepath.Join(dir, run+".rla")
	ks, err := replay.OpenKafka(ctx, kc, run)
	if err != nil {
		return nil, err
	}
	if _, err := replay.Export(ctx, ks, arch, replay.ExportOptions{}); err != nil {
		return nil, err
	}
	st, _ := os.Stat(arch)
	cmd := e.cmd(GroupReplay, fmt.Sprintf("--replay-facts %d", e.o.ReplayFacts)) + " ; rolloutledger replay verify"
	fromArchive := &Figure{Name: "replay verify from an archive", Unit: "facts/s", Command: cmd,
		Note: fmt.Sprintf("replay.Verify of a %d-fact simulated run (no inline tokens) from a %.0f MB archive: decode, re-fold, compare every decision and tree head", facts, float64(st.Size())/1e6)}
	fromKafka := &Figure{Name: "replay verify from Kafka", Unit: "facts/s", Command: cmd,
		Note: "the same run read back from its 1-partition facts topic and the decisions topic"}
	export := exportFigure(cmd)
	for i := range e.o.Runs {
		e.log.Info("replay verify", "run", i+1, "facts", facts)
		runtime.GC()
		a, err := replay.OpenArchive(arch)
		if err != nil {
			return nil, err
		}
		v, err := timeVerify(ctx, a)
		if err != nil {
			return nil, err
		}
		fromArchive.Runs = append(fromArchive.Runs, v)
		ks, err := replay.OpenKafka(ctx, kc, run)
		if err != nil {
			return nil, err
		}
		v, err = timeVerify(ctx, ks)
		if err != nil {
			return nil, err
		}
		fromKafka.Runs = append(fromKafka.Runs, v)
		if err := timeExport(ctx, arch, dir, i, export); err != nil {
			return nil, err
		}
	}
	export.link = func(map[string]*Figure) { export.against(fromArchive, 0.5, ">= 50% of replay verify from an archive") }
	fromArchive.link = func(map[string]*Figure) { fromArchive.goalAtLeast(500_000, ">= 500,000 facts/s") }
	ff := &Figure{Name: "FireFlash-scale run (50 M facts), verify from an archive", Unit: "minutes", Command: cmd,
		Note: "extrapolated: 50,000,000 facts / each run's archive rate above"}
	ffk := &Figure{Name: "FireFlash-scale run (50 M facts), verify from Kafka", Unit: "minutes", Command: cmd,
		Note: "extrapolated: 50,000,000 facts / each run's Kafka rate above"}
	for i := range fromArchive.Runs {
		ff.Runs = append(ff.Runs, fireFlashFacts/fromArchive.Runs[i]/60)
		ffk.Runs = append(ffk.Runs, fireFlashFacts/fromKafka.Runs[i]/60)
	}
	figs := []*Figure{fromArchive, fromKafka, export, ff, ffk}
	tok, err := replayTokenFigures(ctx, e, dir)
	if err != nil {
		return nil, err
	}
	return append(figs, tok...), nil
}

// tokenReplayOptions sizes a run whose turns carry their tokens inline
// (version 2: base64 token ids and logprobs).
func tokenReplayOptions(short bool) simulate.Options {
	if short {
		return simulate.Options{Seed: 43, Tasks: 8, Steps: 1, BatchGroups: 4, Tokens: true}
	}
	return simulate.Options{Seed: 43, Tasks: 48, Steps: 4, BatchGroups: 16, Tokens: true}
}

// replayTokenFigures verifies a run with inline tokens from an archive, in
// MB/s of the archive file, beside sha256sum reading and hashing the same
// file: the floor any verification that reads every byte pays.
func replayTokenFigures(ctx context.Context, e *env, dir string) ([]*Figure, error) {
	o := tokenReplayOptions(e.o.Short)
	run := "bench-replay-tokens"
	kc := e.kafka("replay-tokens", 1)
	facts, err := seedReplay(ctx, kc, o, run)
	if err != nil {
		return nil, err
	}
	arch := filepath.Join(dir, run+".rla")
	ks, err := replay.OpenKafka(ctx, kc, run)
	if err != nil {
		return nil, err
	}
	if _, err := replay.Export(ctx, ks, arch, replay.ExportOptions{}); err != nil {
		return nil, err
	}
	st, err := os.Stat(arch)
	if err != nil {
		return nil, err
	}
	mb := float64(st.Size()) / 1e6
	cmd := e.cmd(GroupReplay) + " ; rolloutledger replay verify"
	verify := &Figure{Name: "replay verify from an archive, inline v2 tokens", Unit: "MB/s", Command: cmd,
		Note: fmt.Sprintf("replay.Verify of a %d-fact simulated run with inline token ids and logprobs (turn.generated v2, up to 2,000 completion tokens a turn) from a %.0f MB archive, MB of the archive file per second", facts, mb)}
	sum := &Figure{Name: "sha256sum of the same archive file", Unit: "MB/s", Command: "sha256sum <archive>",
		Note: "coreutils sha256sum of the archive file above, in the page cache (each run after a verify read it)"}
	for i := range e.o.Runs {
		e.log.Info("replay verify, inline tokens", "run", i+1, "facts", facts)
		runtime.GC()
		a, err := replay.OpenArchive(arch)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := timeVerify(ctx, a); err != nil {
			return nil, err
		}
		verify.Runs = append(verify.Runs, mb/time.Since(start).Seconds())
		start = time.Now()
		if out, err := exec.CommandContext(ctx, "sha256sum", arch).CombinedOutput(); err != nil {
			sum.Skipped, sum.Note = true, fmt.Sprintf("sha256sum: %v: %s", err, out)
			continue
		}
		sum.Runs = append(sum.Runs, mb/time.Since(start).Seconds())
	}
	// The goal rose from 0.3 to 0.6 once 0.3 was met.
	verify.link = func(map[string]*Figure) { verify.against(sum, 0.60, ">= 60% of sha256sum") }
	return []*Figure{verify, sum}, nil
}

// timeVerify times replay.Verify of src under the collector's pacing of
// `rolloutledger replay` (package gcpolicy).
func timeVerify(ctx context.Context, src replay.Source) (float64, error) {
	defer gcpolicy.Pass()()
	start := time.Now()
	rep, err := replay.Verify(ctx, src, replay.VerifyOptions{})
	if err != nil {
		return 0, err
	}
	if !rep.OK() {
		return 0, fmt.Errorf("the benchmark's run does not verify from %s: %v %v", src.Describe(), rep.First, rep.History)
	}
	return float64(rep.Facts) / time.Since(start).Seconds(), nil
}

// seedReplay generates a run, appends its facts to Kafka, folds them at
// the positions Kafka gave them and appends the decisions, streaming so a
// run of millions of facts holds only its encoded records.
func seedReplay(ctx context.Context, kc kafkalog.Config, o simulate.Options, run string) (int, error) {
	plan, err := simulate.Generate(o, run)
	if err != nil {
		return 0, err
	}
	evs := plan.All()
	plan = nil
	if _, err := kafkalog.EnsureTopics(ctx, kc); err != nil {
		return 0, err
	}
	w := kafkalog.NewWriter(kc, kc.FactsTopic(), kafkalog.WriterOptions{})
	defer w.Close()
	fold, store := projections.NewFold(run), projections.NewMemStore()
	var decided [][]byte
	const chunk = 4096
	for lo := 0; lo < len(evs); lo += chunk {
		part := evs[lo:min(lo+chunk, len(evs))]
		values, err := events.EncodeBatch(part)
		if err != nil {
			return 0, err
		}
		pos, err := appendValues(ctx, w, run, values)
		if err != nil {
			return 0, err
		}
		for i, v := range values {
			ev, err := events.Decode(v)
			if err != nil {
				return 0, err
			}
			ds, err := fold.Apply(store, projections.Record{Value: v, Event: ev, Partition: pos[i].Partition, Offset: pos[i].Offset})
			if err != nil {
				return 0, err
			}
			for _, d := range ds {
				decided = append(decided, d.Value)
			}
		}
		clear(part) // let the events go as they are written
	}
	dw := kafkalog.NewWriter(kc, kc.DecisionsTopic(), kafkalog.WriterOptions{})
	defer dw.Close()
	if _, err := appendValues(ctx, dw, run, decided); err != nil {
		return 0, err
	}
	return len(evs), nil
}
