package stack_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// slowUpload is a client that declares a huge body and sends a byte of
// it now and then, over a real TCP connection.
type slowUpload struct {
	conn net.Conn
	br   *bufio.Reader
	stop chan struct{}
	done chan struct{}
}

// startSlowUpload sends the headers of a POST /v1/events declaring
// declared bytes with Expect: 100-continue, and reports whether the server
// started reading the body (answered 100 Continue) rather than refusing it.
func startSlowUpload(t *testing.T, addr string, declared int64, every time.Duration) (*slowUpload, bool, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", declared)
	u := &slowUpload{conn: conn, br: bufio.NewReader(conn), stop: make(chan struct{}), done: make(chan struct{})}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := u.br.ReadString('\n')
	if err != nil {
		t.Fatalf("slow upload: no answer to the headers: %v", err)
	}
	if !strings.HasPrefix(line, "HTTP/1.1 100") {
		close(u.done)
		return u, false, strings.TrimSpace(line)
	}
	if _, err := u.br.ReadString('\n'); err != nil { // the empty line after 100 Continue
		t.Fatal(err)
	}
	go func() {
		defer close(u.done)
		if _, err := conn.Write([]byte("[")); err != nil {
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-u.stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	return u, true, ""
}

// latencies posts n small valid requests one after another and returns
// each one's latency; every answer must be 200.
func latencies(t *testing.T, url string, n int, run string) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for i := range n {
		b := body(t, runEvents(fmt.Sprintf("%s-%d", run, i), 5))
		start := time.Now()
		code, resp := post(t, url, b, nil)
		out = append(out, time.Since(start))
		if code != http.StatusOK {
			t.Fatalf("request %d of %s: got %d %s, want 200", i, run, code, resp)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Slow uploads that declare huge bodies cannot starve ingest: while
// clients holding declared 64 MiB bodies dribble a byte now and then —
// more of them than the default body budget could hold at their declared
// sizes — ordinary producers keep getting 200 at about their usual
// latency, with the server's default budget. Then the floor rate cuts the
// slow uploads off with 408 and closes their connections.
func TestHostileSlowUploadsDoNotStarveIngest(t *testing.T) {
	kc := testenv.RealKafka(t)
	// The default limits but a shorter window, so that the cut comes soon
	// after the grace.
	limits := httpx.BodyLimits{Grace: 5 * time.Second, RateWindow: time.Second}
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, Only: []string{stack.ServiceIngest}, Bodies: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	// Warm up the connection pool and the Kafka writer, then measure.
	latencies(t, s.URL(), 5, "warm")
	base := latencies(t, s.URL(), 40, "base")

	const attackers = 8
	var held int
	var uploads []*slowUpload
	started := time.Now()
	for range attackers {
		u, reading, answer := startSlowUpload(t, s.Addr(), 64<<20, 200*time.Millisecond)
		if reading {
			held++
			uploads = append(uploads, u)
		} else {
			t.Logf("a slow upload was refused at once: %s", answer)
		}
		defer func() { close(u.stop); <-u.done }()
	}
	under := make([]time.Duration, 0, 40)
	for i := range 40 {
		b := body(t, runEvents(fmt.Sprintf("attacked-%d", i), 5))
		start := time.Now()
		code, resp := post(t, s.URL(), b, nil)
		under = append(under, time.Since(start))
		if code != http.StatusOK {
			t.Fatalf("request %d while %d slow uploads are held: got %d %s, want 200", i, held, code, resp)
		}
	}
	mb, mu := median(base), median(under)
	t.Logf("median latency: %v without slow uploads, %v with %d of them held", mb, mu, held)
	if mu > 5*mb+100*time.Millisecond {
		t.Errorf("median latency %v under attack, %v without: want about the same", mu, mb)
	}

	// Each slow upload is answered 408 and its connection closed once the
	// grace and a window pass: a byte every 200 ms is far below the floor.
	for i, u := range uploads {
		_ = u.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(u.br, nil)
		if err != nil {
			t.Fatalf("slow upload %d: no answer: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), b, http.StatusRequestTimeout, "timeout")
		// EOF, or a reset for the bytes it still sent: closed either way.
		if c, err := u.br.ReadByte(); err == nil || httpx.IsTimeout(err) {
			t.Errorf("slow upload %d: the connection stayed open after the 408 (read %q, %v)", i, c, err)
		}
		if i == 0 {
			t.Logf("slow upload cut after %v: %s", time.Since(started).Round(100*time.Millisecond), b)
		}
	}
	if took := time.Since(started); took > limits.Grace+limits.RateWindow+10*time.Second {
		t.Errorf("the slow uploads were cut after %v, want about %v", took, limits.Grace+limits.RateWindow)
	}
}
