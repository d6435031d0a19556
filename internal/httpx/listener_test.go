package httpx

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The server's listener holds at most MaxConns connections open, takes a
// new one once one closes, and leaves each connection its ReadFrom, which
// net/http needs to send a file body with sendfile.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, ln := NewServer(inner, http.NotFoundHandler(), ServerOptions{MaxConns: 1}, nil)
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := dial()
	defer c1.Close()
	first := <-accepted
	if _, ok := first.(io.ReaderFrom); !ok {
		t.Errorf("an accepted TCP connection (%T) has no ReadFrom: bodies from files are copied, not sent with sendfile", first)
	}
	c2 := dial() // the kernel completes it; Accept must wait
	defer c2.Close()
	select {
	case c := <-accepted:
		t.Fatalf("a second connection %v was accepted while the first was open", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second Close gives back no second slot
	// Accepted once the first closed (go test's timeout catches a hang).
	second, ok := <-accepted
	if !ok {
		t.Fatal("the listener failed before accepting the second connection")
	}
	defer second.Close()
	ln.Close()
	if _, ok := <-accepted; ok {
		t.Error("Accept returned a connection after the listener closed")
	}
}

// A file body goes out whole through a connection of the listener.
func TestLimitListenerSendsFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "body")
	want := make([]byte, 3<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, ln := NewServer(inner, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "", time.Time{}, f)
	}), ServerOptions{MaxConns: 4}, nil)
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/body")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || resp.ContentLength != int64(len(want)) {
		t.Errorf("got %d bytes (Content-Length %d), want the file's %d", len(got), resp.ContentLength, len(want))
	}
}
