// Package procstatus reads a process's memory figures from Linux's /proc
// files, for the benchmarks and the soak test that report them.
package procstatus

import (
	"os"
	"strconv"
	"strings"
)

// Field is the value of the "Name:   123 kB" line of a /proc file (status,
// smaps_rollup), in bytes; name is given without its colon. It is 0 when
// the file cannot be read (not Linux, a process gone) or has no such line.
func Field(path, name string) uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, name+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// RSS is this process's resident set size (VmRSS), in bytes.
func RSS() uint64 { return Field("/proc/self/status", "VmRSS") }

// PeakRSS is this process's peak resident set size (VmHWM), in bytes: a
// child's own peak, where its rusage's ru_maxrss would take in the peak of
// the parent it was forked from.
func PeakRSS() uint64 { return Field("/proc/self/status", "VmHWM") }

// MiB is bytes in mebibytes.
func MiB(bytes uint64) float64 { return float64(bytes) / (1 << 20) }
