package procstatus

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	status := "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t   1024 kB\nPss:  7 kB\nBad:\tmany kB\n"
	if err := os.WriteFile(path, []byte(status), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want uint64
	}{{"VmRSS", 1 << 20}, {"VmHWM", 2 << 20}, {"Pss", 7 << 10}, {"Bad", 0}, {"VmSwap", 0}, {"Vm", 0}} {
		if got := Field(path, c.name); got != c.want {
			t.Errorf("Field(%q) = %d, want %d", c.name, got, c.want)
		}
	}
	if got := Field(filepath.Join(t.TempDir(), "missing"), "VmRSS"); got != 0 {
		t.Errorf("a missing file gives %d, want 0", got)
	}
}

// This process's figures are those the kernel reports: resident memory is
// never more than its peak, and holding 64 MiB more shows in both.
func TestSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before := RSS()
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = 1
	}
	rss, peak := RSS(), PeakRSS()
	if rss < before+48<<20 || peak < rss {
		t.Errorf("RSS %d before, %d holding 64 MiB, peak %d", before, rss, peak)
	}
	runtime.KeepAlive(held)
}
