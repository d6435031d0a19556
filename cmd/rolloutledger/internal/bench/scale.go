package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/replay/dataset"
)

// GroupScale runs the paths that must stay bounded as a run grows (issue
// 26: a five-day run of ~50 M facts) at two sizes, and prints each figure
// at both with the growth ratio beside them: the generator's peak memory
// and rate, the analysts' documented queries, and the exports' peak
// memory. With Short the sizes are small; otherwise it runs only when
// named.
const GroupScale = "scale"

// scaleSizes are the two run lengths, in facts, of the scale figures:
// those asked for, or the defaults.
func scaleSizes(o Options) [2]int {
	if len(o.ScaleFacts) == 2 {
		return [2]int{o.ScaleFacts[0], o.ScaleFacts[1]}
	}
	if o.Short {
		return [2]int{50_000, 200_000}
	}
	return [2]int{1_000_000, 10_000_000}
}

// scaleOptions sizes a simulated run to about facts facts in one shape
// (that of the replay benchmark's large run: 200 tasks, batches of 64
// groups), so that the two sizes differ in length only, not in how many
// attempts run at once.
func scaleOptions(facts int) simulate.Options {
	return simulate.Options{Seed: 42, Tasks: 200, Steps: max(1, 64*facts/3_000_000), BatchGroups: 64, MaxTurns: 200}
}

// generatorChild is the ChildEnv value of the generator's child: it
// generates and encodes a run of childEnd facts and prints its own peak
// resident memory and CPU time.
const generatorChild = "generator-rss"

// generatorSample is what the generator's child prints.
type generatorSample struct {
	Facts   int64   `json:"facts"`
	PeakMiB float64 `json:"peak_rss_mib"`
	CPUSecs float64 `json:"cpu_s"`
	Bytes   int64   `json:"bytes"`
}

// runGeneratorChild generates the run of about childEnd facts, encoding
// every fact as `simulate --write` does, and reports.
func runGeneratorChild(enc *json.Encoder) error {
	facts, err := strconv.Atoi(os.Getenv(childEnd))
	if err != nil {
		return fmt.Errorf("%s: %w", childEnd, err)
	}
	src, err := simulate.NewSource(scaleOptions(facts), "bench-scale-generator")
	if err != nil {
		return err
	}
	var n, size int64
	for ev := range src.Events() {
		b, err := events.Encode(ev)
		if err != nil {
			return err
		}
		n, size = n+1, size+int64(len(b))+1
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// VmHWM, not ru_maxrss: a child's ru_maxrss takes in its parent's
	// peak, which it shared until exec.
	return enc.Encode(generatorSample{Facts: n, PeakMiB: peakRSS(), CPUSecs: cpu.Seconds(), Bytes: size})
}

func scaleFigures(ctx context.Context, e *env) ([]*Figure, error) {
	sizes := scaleSizes(e.o)
	var figs []*Figure
	gen, err := generatorFigures(ctx, e, sizes)
	if err != nil {
		return nil, err
	}
	figs = append(figs, gen...)
	// Short mode (CI, under the race detector) exports tiny runs: four
	// formats at two sizes of 50 K and 200 K facts took minutes there.
	exSizes := sizes
	if e.o.Short && len(e.o.ScaleFacts) == 0 {
		exSizes = [2]int{5_000, 20_000}
	}
	ex, err := exportFigures(ctx, e, exSizes)
	if err != nil {
		return nil, err
	}
	figs = append(figs, ex...)
	an, err := analystsScale(ctx, e, sizes)
	if err != nil {
		return nil, err
	}
	return append(figs, an...), nil
}

// generatorFigures run `simulate`'s generator as a child process at each
// size, once per run: peak RSS and rate at each, and their growth.
func generatorFigures(ctx context.Context, e *env, sizes [2]int) ([]*Figure, error) {
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	var rss, rate [2]*Figure
	for i, n := range sizes {
		o := scaleOptions(n)
		shape := fmt.Sprintf("seed %d, %d tasks, %d steps of %d groups, no text or tokens", o.Seed, o.Tasks, o.Steps, o.BatchGroups)
		rss[i] = &Figure{Name: fmt.Sprintf("generator peak RSS, %s facts", facts(n)), Unit: "MiB", Command: e.cmd(GroupScale),
			Note: "simulate's streamed generator in a child process, every fact generated and encoded (as simulate --write): " + shape}
		rate[i] = &Figure{Name: fmt.Sprintf("generator rate, %s facts", facts(n)), Unit: "facts/cpu-s", Command: e.cmd(GroupScale),
			Note: "facts generated and encoded per second of the child's CPU time (user and system)"}
		for range e.o.Runs {
			s, err := generatorChildRun(ctx, exe, n)
			if err != nil {
				return nil, err
			}
			e.log.Info("scale: generator", "facts", s.Facts, "peak_rss_mib", s.PeakMiB, "cpu_s", s.CPUSecs, "bytes", s.Bytes)
			rss[i].Runs = append(rss[i].Runs, s.PeakMiB)
			rate[i].Runs = append(rate[i].Runs, float64(s.Facts)/max(s.CPUSecs, 1e-3))
			rss[i].Note = fmt.Sprintf("%s; %d facts, %.0f MB encoded", rss[i].Note, s.Facts, float64(s.Bytes)/1e6)
		}
	}
	growth := &Figure{Name: "generator peak RSS, large over small", Unit: "x", Command: e.cmd(GroupScale),
		Note: fmt.Sprintf("peak RSS at %s facts over %s: flat memory is 1", facts(sizes[1]), facts(sizes[0]))}
	growth.Runs = ratios(rss[1].Runs, rss[0].Runs)
	growth.link = func(map[string]*Figure) { growth.goalAtMost(1.2, "<= 1.2") }
	slowdown := &Figure{Name: "generator rate, small over large", Unit: "x", Command: e.cmd(GroupScale),
		Note: "rate at the small size over the rate at the large: 1 is a rate that does not fall as the run grows"}
	slowdown.Runs = ratios(rate[0].Runs, rate[1].Runs)
	slowdown.link = func(map[string]*Figure) { slowdown.goalAtMost(1.2, "<= 1.2") }
	return []*Figure{rss[0], rss[1], growth, rate[0], rate[1], slowdown}, nil
}

func generatorChildRun(ctx context.Context, exe string, n int) (generatorSample, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	what := fmt.Sprintf("generator child, %d facts", n)
	var s generatorSample
	if err := runChild(cctx, exe, what, &s, ChildEnv+"="+generatorChild, childEnd+"="+strconv.Itoa(n)); err != nil {
		return generatorSample{}, err
	}
	if s.Facts == 0 {
		return s, fmt.Errorf("%s generated no facts", what)
	}
	return s, nil
}

// exportFigures export a simulated run's archive at each size in every
// dataset format, each in a child process (`rolloutledger export
// --archive`, as a user runs it): peak RSS and rate at each size, and
// their growth.
func exportFigures(ctx context.Context, e *env, sizes [2]int) ([]*Figure, error) {
	exe, err := e.executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rolloutledger-bench-export-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var archives [2]string
	for i, n := range sizes {
		run := fmt.Sprintf("bench-export-%d", n)
		d := filepath.Join(dir, run)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		e.log.Info("scale: writing the export's archive", "facts", n)
		if archives[i], err = writeSimArchive(d, run, scaleOptions(n)); err != nil {
			return nil, err
		}
	}
	formats := dataset.Formats
	if len(e.o.ScaleFormats) > 0 {
		formats = e.o.ScaleFormats
	}
	var figs []*Figure
	for _, format := range formats {
		var rss, rate [2]*Figure
		for i, n := range sizes {
			rss[i] = &Figure{Name: fmt.Sprintf("export %s peak RSS, %s facts", format, facts(n)), Unit: "MiB", Command: e.cmd(GroupScale),
				Note: "the export of rolloutledger export --archive A --format " + format + ", in a child process (peak RSS: its VmHWM), from the archive of a simulated run of the scale shape"}
			rate[i] = &Figure{Name: fmt.Sprintf("export %s rate, %s facts", format, facts(n)), Unit: "facts/s", Command: e.cmd(GroupScale),
				Note: "facts of the run over the export's wall time in the child"}
			for range e.o.Runs {
				s, err := exportChildRun(ctx, exe, archives[i], fmt.Sprintf("bench-export-%d", n), format, filepath.Join(dir, "out"))
				if err != nil {
					return nil, err
				}
				e.log.Info("scale: export", "format", format, "facts", s.Facts, "peak_rss_mib", s.PeakMiB, "seconds", s.Seconds)
				rss[i].Runs = append(rss[i].Runs, s.PeakMiB)
				rate[i].Runs = append(rate[i].Runs, float64(s.Facts)/max(s.Seconds, 1e-3))
			}
		}
		growth := &Figure{Name: fmt.Sprintf("export %s peak RSS, large over small", format), Unit: "x", Command: e.cmd(GroupScale),
			Note: fmt.Sprintf("peak RSS at %s facts over %s: flat memory is 1", facts(sizes[1]), facts(sizes[0]))}
		growth.Runs = ratios(rss[1].Runs, rss[0].Runs)
		growth.link = func(map[string]*Figure) { growth.goalAtMost(1.2, "<= 1.2") }
		slowdown := &Figure{Name: fmt.Sprintf("export %s rate, small over large", format), Unit: "x", Command: e.cmd(GroupScale),
			Note: "rate at the small size over the rate at the large: 1 is a rate that does not fall as the run grows"}
		slowdown.Runs = ratios(rate[0].Runs, rate[1].Runs)
		slowdown.link = func(map[string]*Figure) { slowdown.goalAtMost(1.2, "<= 1.2") }
		figs = append(figs, rss[0], rss[1], growth, rate[0], rate[1], slowdown)
	}
	return figs, nil
}

// exportChild is the ChildEnv value of the exports' child: it exports the
// archive named by childArchive in childFormat to childOut, its scratch
// in childDir, and prints its peak resident memory and time.
const (
	exportChild = "export-rss"
	childFormat = "ROLLOUTLEDGER_BENCH_EXPORT_FORMAT"
	childOut    = "ROLLOUTLEDGER_BENCH_EXPORT_OUT"
)

// runExportChild exports as `rolloutledger export --archive` does.
func runExportChild(ctx context.Context, enc *json.Encoder) error {
	a, err := replay.OpenArchive(os.Getenv(childArchive))
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := dataset.Export(ctx, []replay.Source{a}, os.Getenv(childFormat), os.Getenv(childOut), dataset.Options{ScratchDir: os.Getenv(childDir)})
	if err != nil {
		return err
	}
	return enc.Encode(childSample{Facts: res.Facts, PeakMiB: peakRSS(), Seconds: time.Since(start).Seconds()})
}

// exportChildRun exports run from archive in format into a fresh out, in
// a child process, and returns what it printed: the facts, its peak RSS
// (VmHWM: a child's ru_maxrss would take in this process's own peak,
// shared until exec) and the export's time.
func exportChildRun(ctx context.Context, exe, archive, run, format, out string) (childSample, error) {
	if err := os.RemoveAll(out); err != nil {
		return childSample{}, err
	}
	defer os.RemoveAll(out)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return childSample{}, err
	}
	target := filepath.Join(out, run)
	if format == "atif" || format == "messages" {
		target += ".jsonl"
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	what := fmt.Sprintf("export %s of %s", format, archive)
	var s childSample
	if err := runChild(cctx, exe, what, &s, ChildEnv+"="+exportChild, childArchive+"="+archive, childFormat+"="+format,
		childOut+"="+target, childDir+"="+out); err != nil {
		return childSample{}, err
	}
	if s.Facts == 0 {
		return s, fmt.Errorf("%s exported no facts", what)
	}
	return s, nil
}

// analystsScale times the analysts' documented queries at both sizes:
// each query at each, and its growth.
func analystsScale(ctx context.Context, e *env, sizes [2]int) ([]*Figure, error) {
	if e.o.DatabaseURL == "" {
		return []*Figure{{Name: "analysts' queries at two sizes", Skipped: true, Command: e.cmd(GroupScale),
			Note: "no database: pass --database-url or set $DATABASE_URL"}}, nil
	}
	var at [2][]*Figure
	for i, n := range sizes {
		figs, err := analystsAt(ctx, e, n, e.cmd(GroupScale))
		if err != nil {
			return nil, err
		}
		for _, f := range figs {
			f.Name = fmt.Sprintf("%s, %s facts", f.Name, facts(n))
		}
		at[i] = figs
	}
	var out []*Figure
	for j := range min(len(at[0]), len(at[1])) {
		small, large := at[0][j], at[1][j]
		g := &Figure{Name: strings.TrimSuffix(large.Name, ", "+facts(sizes[1])+" facts") + ", large over small", Unit: "x", Command: e.cmd(GroupScale),
			Note: fmt.Sprintf("time at %s facts over time at %s", facts(sizes[1]), facts(sizes[0]))}
		g.Runs = ratios(large.Runs, small.Runs)
		out = append(out, small, large, g)
	}
	return out, nil
}

// ratios are a[i]/b[i], run by run.
func ratios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// facts names a run length: 200 K, 10 M.
func facts(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + " M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + " K"
	}
	return strconv.Itoa(n)
}
