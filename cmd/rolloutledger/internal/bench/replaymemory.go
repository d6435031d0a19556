package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/foldstore"
	"github.com/rolloutledger/rolloutledger/internal/gcpolicy"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

// GroupReplayMemory is the resident memory of `replay --verify` from an
// archive at several run lengths (docs/design.md §14.2). It is not in
// Groups: it runs only when named with Only or given sizes with
// ReplayMemory, since a 10 M-fact run takes a while to make.
const GroupReplayMemory = "replay-memory"

// replayChild is ChildEnv's value for the replay memory child; the archive
// it verifies is named by childArchive and its scratch directory by
// childDir.
const (
	replayChild  = "replay-rss"
	childArchive = "ROLLOUTLEDGER_BENCH_ARCHIVE"
)

// childSample is the one line of output of a replay or export child: the
// facts it read, its peak resident memory and its time (and, for replay,
// the Go heap after it).
type childSample struct {
	Facts   uint64  `json:"facts"`
	PeakMiB float64 `json:"peak_rss_mib"` // VmHWM
	HeapMiB float64 `json:"heap_mib,omitempty"`
	Seconds float64 `json:"seconds"`
}

// runReplayChild verifies the archive its environment names, as
// `rolloutledger replay --archive F --verify` does, and prints its peak
// resident memory.
func runReplayChild(ctx context.Context, out *json.Encoder) error {
	a, err := replay.OpenArchive(os.Getenv(childArchive))
	if err != nil {
		return err
	}
	defer gcpolicy.Pass()()
	start := time.Now()
	rep, err := replay.Verify(ctx, a, replay.VerifyOptions{ScratchDir: os.Getenv(childDir)})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("the run does not verify: %v %v", rep.First, rep.History)
	}
	secs := time.Since(start).Seconds()
	_, heap := memNow()
	return out.Encode(childSample{Facts: rep.Facts, PeakMiB: peakRSS(), HeapMiB: heap, Seconds: secs})
}

// peakRSS is the process's peak resident set size (VmHWM), in MiB.
func peakRSS() float64 { return procstatus.MiB(procstatus.PeakRSS()) }

func replayMemorySizes(o Options) []int {
	if len(o.ReplayMemory) > 0 {
		return o.ReplayMemory
	}
	if o.Short {
		return []int{20_000, 40_000}
	}
	return []int{1_000_000, 10_000_000}
}

func replayMemoryFigures(ctx context.Context, e *env) ([]*Figure, error) {
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	sizes := replayMemorySizes(e.o)
	var list []string
	for _, n := range sizes {
		list = append(list, strconv.Itoa(n))
	}
	cmd := e.cmd(GroupReplayMemory, "--replay-memory "+strings.Join(list, ","))
	var figs []*Figure
	for _, n := range sizes {
		dir, err := os.MkdirTemp("", "rolloutledger-bench-")
		if err != nil {
			return nil, err
		}
		s, size, err := replayMemoryRun(ctx, e, exe, dir, n)
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		figs = append(figs, &Figure{Name: fmt.Sprintf("replay --verify peak RSS, %d facts", s.Facts), Unit: "MiB", Runs: []float64{s.PeakMiB}, Command: cmd,
			Note: fmt.Sprintf("peak resident memory (VmHWM) of a process running replay.Verify of a simulated run (no inline tokens) from a %.0f MB archive, its fold state on disk (the dedup index in sorted run files, the rest in a temporary Pebble database); %.0f s, %.0f facts/s, Go heap after GC at the end %.1f MiB; one run",
				float64(size)/1e6, s.Seconds, float64(s.Facts)/s.Seconds, s.HeapMiB)})
	}
	if len(figs) == 0 {
		return nil, nil
	}
	first, last := figs[0], figs[len(figs)-1]
	last.link = func(map[string]*Figure) { last.goalAtMost(512, "< 512 MiB") }
	if len(figs) > 1 {
		ratio := &Figure{Name: "replay --verify peak RSS, longest / shortest run", Unit: "x", Runs: []float64{last.Runs[0] / first.Runs[0]}, Command: cmd,
			Note: fmt.Sprintf("%s over %s", strings.TrimPrefix(last.Name, "replay --verify peak RSS, "), strings.TrimPrefix(first.Name, "replay --verify peak RSS, "))}
		ratio.link = func(map[string]*Figure) { ratio.goalAtMost(1.2, "<= 1.2 (flat in run length)") }
		figs = append(figs, ratio)
	}
	return figs, nil
}

// replayMemoryRun writes a simulated run of about n facts to an archive in
// dir and verifies it in a child process.
func replayMemoryRun(ctx context.Context, e *env, exe, dir string, n int) (childSample, int64, error) {
	e.log.Info("replay memory: making the archive", "facts", n)
	arch, err := writeSimArchive(dir, "bench-replay-memory", replayOptions(n))
	if err != nil {
		return childSample{}, 0, err
	}
	st, err := os.Stat(arch)
	if err != nil {
		return childSample{}, 0, err
	}
	runtime.GC()
	e.log.Info("replay memory: verifying in a child", "facts", n, "archive_mb", st.Size()/1e6)
	var s childSample
	if err := runChild(ctx, exe, fmt.Sprintf("replay memory child, %d facts", n), &s,
		ChildEnv+"="+replayChild, childArchive+"="+arch, childDir+"="+dir); err != nil {
		return childSample{}, 0, err
	}
	return s, st.Size(), nil
}

// executable is the binary the figures' child processes run (Options.Executable).
func (e *env) executable() (string, error) {
	if e.o.Executable != "" {
		return e.o.Executable, nil
	}
	return os.Executable()
}

// runChild runs this binary as the bench child that env selects and
// decodes the one line of JSON it prints into out; what names the child
// in errors, with the end of its stderr.
func runChild(ctx context.Context, exe, what string, out any, env ...string) error {
	c := exec.CommandContext(ctx, exe, "bench")
	c.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	c.Stderr = &stderr
	b, err := c.Output()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", what, err, tail([]byte(stderr.String())))
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), out); err != nil {
		return fmt.Errorf("%s printed no result: %v: %q\n%s", what, err, tail(b), tail([]byte(stderr.String())))
	}
	return nil
}

// writeSimArchive generates a run, folds it into a scratch Pebble store to
// conclude its decisions, and writes both as an archive, as an export of
// the run would; the facts sit at partition 0, offsets from 0.
func writeSimArchive(dir, run string, o simulate.Options) (string, error) {
	// Streamed: a 10 M-fact run's plan held in memory took 7.7 GB.
	src, err := simulate.NewSource(o, run)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, run+".rla")
	w, err := replay.CreateArchive(path, run, "simulate")
	if err != nil {
		return "", err
	}
	written := false
	defer func() {
		if !written {
			w.Abort()
		}
	}()
	store, err := foldstore.OpenSpill(foldstore.SpillOptions{Dir: dir})
	if err != nil {
		return "", err
	}
	defer store.Close()
	fold := projections.NewFold(run)
	// The archive holds every fact before the first decision, so the
	// decisions wait in a file: held in memory, a 50 M-fact run's (its
	// batches' manifests) took this process to 5.5 GiB.
	decided, err := os.CreateTemp(dir, "decisions-")
	if err != nil {
		return "", err
	}
	defer os.Remove(decided.Name())
	defer decided.Close()
	dw := bufio.NewWriterSize(decided, 1<<20)
	decisions := 0
	i := -1
	for ev := range src.Events() {
		i++
		v, err := events.Encode(ev)
		if err != nil {
			return "", err
		}
		f := replay.Fact{Seq: uint64(i + 1), Partition: 0, Offset: int64(i), Value: v}
		ds, err := fold.Apply(store, projections.Record{Value: v, Event: ev, Offset: int64(i)})
		if err != nil {
			return "", err
		}
		for _, d := range ds {
			dw.Write(binary.AppendUvarint(nil, uint64(len(d.Value))))
			if _, err := dw.Write(d.Value); err != nil {
				return "", err
			}
			decisions++
		}
		if err := w.AddFact(f); err != nil {
			return "", err
		}
	}
	if err := dw.Flush(); err != nil {
		return "", err
	}
	if _, err := decided.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	dr := bufio.NewReaderSize(decided, 1<<20)
	for i := range decisions {
		n, err := binary.ReadUvarint(dr)
		if err != nil {
			return "", fmt.Errorf("decision %d of %d: %w", i+1, decisions, err)
		}
		d := make([]byte, n)
		if _, err := io.ReadFull(dr, d); err != nil {
			return "", fmt.Errorf("decision %d of %d: %w", i+1, decisions, err)
		}
		if err := w.AddDecision(replay.Recorded{Partition: 0, Offset: int64(i), Value: d}); err != nil {
			return "", err
		}
	}
	written = true
	if _, err := w.Close(); err != nil {
		return "", err
	}
	return path, nil
}
