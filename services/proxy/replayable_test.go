package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

type connCount struct{}

// An engine that closes a kept-alive connection as the next request
// arrives on it (as one closing its idle connections does, at the wrong
// moment) costs the client nothing: the request is sent again on a new
// connection. Without the mark the same requests fail, so the test can.
func TestReplayableRetriesClosedKeepAlive(t *testing.T) {
	var served, dropped atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := r.Context().Value(connCount{}).(*atomic.Int32)
		if n.Add(1) > 1 {
			// The second request on a connection: closed unanswered.
			dropped.Add(1)
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		served.Add(1)
		w.Write(body)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCount{}, new(atomic.Int32))
	}
	srv.Start()
	defer srv.Close()

	post := func(c *http.Client) error {
		for i := range 5 {
			want := []byte{'a' + byte(i)}
			resp, err := c.Post(srv.URL, "application/json", bytes.NewReader(want))
			if err != nil {
				return err
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("answer %q to request %q", got, want)
			}
		}
		return nil
	}
	if err := post(Options{}.withDefaults().Client); err != nil {
		t.Fatalf("through the proxy's client: %v", err)
	}
	if served.Load() != 5 || dropped.Load() != 4 {
		t.Errorf("engine served %d and dropped %d requests; want 5 served after 4 dropped", served.Load(), dropped.Load())
	}
	plain := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if err := post(plain); err == nil {
		t.Error("an unmarked client was never refused: the engine above does not close connections")
	}
}
