package api

import (
	"context"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/procstatus"
)

// BenchmarkStalledSamplesReaders measures what 150 clients that ask for a
// batch's samples and read nothing make the server hold: the Go heap in
// use and the process's resident memory once the server has stopped
// gaining on them, against the same process with no reader. Half ask
// for Arrow, half for NDJSON, all with one trainer's token. Run it once:
//
//	go test -run '^$' -bench StalledSamplesReaders -benchtime 1x ./services/api
//
// Its "per-client" case runs with the default limits; "budget-only" lifts
// the bound on streams per client, leaving the budget alone to bound them.
func BenchmarkStalledSamplesReaders(b *testing.B) {
	for _, bc := range []struct {
		name string
		so   httpx.ServerOptions
	}{
		{"per-client", httpx.ServerOptions{}},
		{"budget-only", httpx.ServerOptions{Streams: httpx.StreamLimits{StreamsPerClient: -1}}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchStalledReaders(b, bc.so) })
	}
}

func benchStalledReaders(b *testing.B, so httpx.ServerOptions) {
	const readers = 150
	l := startLedger(b, so, 1)
	ctx := context.Background()
	status, _, body, err := fetch(ctx, l.url+l.samplesPath(1), trainerToken, MediaArrow)
	if err != nil || status != 200 {
		b.Fatalf("samples: %d %v", status, err)
	}
	b.Logf("batch 1: %d bytes of Arrow IPC", len(body))
	heap0, rss0 := memNow()
	addr := strings.TrimPrefix(l.url, "http://")
	for b.Loop() {
		var conns []net.Conn
		for i := range readers {
			accept := MediaArrow
			if i%2 == 1 {
				accept = MediaNDJSON
			}
			conns = append(conns, stalledReader(b, addr, l.samplesPath(1), trainerToken, accept))
		}
		// The server has done what it will for them once the heap stops
		// growing.
		heap, rss := settle()
		b.ReportMetric((float64(heap)-float64(heap0))/(1<<20), "heap-MiB")
		b.ReportMetric((float64(rss)-float64(rss0))/(1<<20), "rss-MiB")
		b.ReportMetric(float64(l.svc.streams.Held())/(1<<20), "held-MiB")
		for _, c := range conns {
			c.Close()
		}
	}
}

// settle waits until the heap in use has not grown for two seconds (at
// most 30 s) and returns it and the resident set.
func settle() (heap, rss uint64) {
	last, _ := memNow()
	stable := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		h, _ := memNow()
		if h > last+(1<<20) {
			last, stable = h, time.Now()
		} else if time.Since(stable) > 2*time.Second {
			break
		}
	}
	return memNow()
}

// memNow is the Go heap in use after a collection, and the resident set
// once the collected memory is given back.
func memNow() (heap, rss uint64) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, procstatus.RSS()
}
