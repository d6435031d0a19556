package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// checkRefusal checks an answer is the contract's error body with this
// status and code, a message holding want, and Retry-After: 1.
func checkRefusal(t *testing.T, status int, hdr http.Header, body []byte, wantStatus int, wantCode, want string) {
	t.Helper()
	var eb httpx.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || status != wantStatus || eb.Error.Code != wantCode ||
		!strings.Contains(eb.Error.Message, want) || hdr.Get("Retry-After") != "1" {
		t.Errorf("got %d %.200s (Retry-After %q), want %d with code %s, a message naming %q and Retry-After: 1",
			status, body, hdr.Get("Retry-After"), wantStatus, wantCode, want)
	}
}

// Clients that ask for samples and stop reading hold what their streams
// were charged and no more: one token may hold only so many streams (the
// next is answered 429, another token is served whole), all streams
// together only the budget (past it a request waits, then is answered
// 503), and a stream whose client takes nothing for WriteTimeout is cut
// off, giving its charge back.
func TestStalledSamplesReaders(t *testing.T) {
	l := startLedger(t, httpx.ServerOptions{}, 1)
	// Rendered from the stored chunks, as a batch without a stored body
	// is: what a stream holds then (TestStalledArrowBodyReader has the
	// stored body's case).
	l.dropArrowBodies(t, 1)
	ctx := context.Background()
	media := []string{MediaArrow, MediaNDJSON}
	whole := map[string][]byte{}
	for _, m := range media {
		status, _, body, err := fetch(ctx, l.url+l.samplesPath(1), trainerToken, m)
		if err != nil || status != http.StatusOK {
			t.Fatalf("samples as %s: %d %v", m, status, err)
		}
		whole[m] = body
	}
	// A stalled reader of a body that fits the socket buffers would not
	// stall: the batch must be larger.
	if len(whole[MediaArrow]) < 4<<20 {
		t.Fatalf("the batch's samples are %d bytes of Arrow: too few to stall a reader", len(whole[MediaArrow]))
	}
	stall := func(t *testing.T, url string, n int, token string) {
		addr := strings.TrimPrefix(url, "http://")
		for i := range n {
			c := stalledReader(t, addr, l.samplesPath(1), token, media[i%2])
			t.Cleanup(func() { c.Close() })
		}
	}
	// servedWhole checks a trainer reading at full speed gets the whole
	// body.
	servedWhole := func(t *testing.T, url, token string) {
		t.Helper()
		for _, m := range media {
			status, _, body, err := fetch(ctx, url+l.samplesPath(1), token, m)
			if err != nil || status != http.StatusOK || !bytes.Equal(body, whole[m]) {
				t.Errorf("%s samples for a reader at full speed: %d, %d bytes (%v), want 200 and the %d bytes served before",
					m, status, len(body), err, len(whole[m]))
			}
		}
	}

	t.Run("per token", func(t *testing.T) {
		s := l.serve(t, httpx.ServerOptions{Streams: httpx.StreamLimits{StreamsPerClient: 3}})
		url, svc := s.url, s.svc
		stall(t, url, 3, trainerToken)
		testenv.CheckFor(t, time.Minute, "three stalled streams charged", func() bool { return svc.streams.Held() >= 3*chunkReserve })
		status, hdr, body, err := fetch(ctx, url+l.samplesPath(1), trainerToken, MediaArrow)
		if err != nil {
			t.Fatal(err)
		}
		checkRefusal(t, status, hdr, body, http.StatusTooManyRequests, "too_many_streams", `token "trainer"`)
		servedWhole(t, url, trainer2Token)
		if held, budget := svc.streams.Held(), svc.streams.Limits().Budget; held > budget {
			t.Errorf("streams hold %d bytes, more than the budget %d", held, budget)
		}
	})

	t.Run("budget", func(t *testing.T) {
		const budget = 8 << 20 // two streams' worth, not three
		s := l.serve(t, httpx.ServerOptions{Streams: httpx.StreamLimits{Budget: budget, StreamsPerClient: -1, Wait: 200 * time.Millisecond}})
		addr := strings.TrimPrefix(s.url, "http://")
		// Stalled readers one after another, each once the one before
		// holds all it will: the budget fills, and past it a stream gets
		// no room (answered 503 into a socket no one reads).
		held := []int64{0}
		for len(held) < 5 {
			c := stalledReader(t, addr, l.samplesPath(1), trainerToken, MediaArrow)
			t.Cleanup(func() { c.Close() })
			held = append(held, steady(t, s.svc.streams))
			if h := held[len(held)-1]; h > budget {
				t.Fatalf("streams hold %d bytes, more than the budget %d", h, budget)
			}
		}
		if held[1] == 0 || held[len(held)-1] != held[len(held)-2] {
			t.Fatalf("bytes held by 0, 1, 2, ... stalled streams: %v; want them to grow, then stop short of the budget %d", held, budget)
		}
		status, hdr, body, err := fetch(ctx, s.url+l.samplesPath(1), trainer2Token, MediaArrow)
		if err != nil {
			t.Fatal(err)
		}
		checkRefusal(t, status, hdr, body, http.StatusServiceUnavailable, "overloaded", "retry shortly")
	})

	t.Run("cut off", func(t *testing.T) {
		s := l.serve(t, httpx.ServerOptions{Streams: httpx.StreamLimits{WriteTimeout: 500 * time.Millisecond}})
		c := stalledReader(t, strings.TrimPrefix(s.url, "http://"), l.samplesPath(1), trainerToken, MediaArrow)
		defer c.Close()
		testenv.CheckFor(t, time.Minute, "the stalled stream charged", func() bool { return s.svc.streams.Held() > 0 })
		testenv.CheckFor(t, time.Minute, "the stalled stream cut off and its connection closed", func() bool {
			return s.svc.streams.Held() == 0 && s.closed.Load() == 1
		})
		// A trainer at full speed is not cut, WriteTimeout being a bound
		// on each write, not on the body.
		servedWhole(t, s.url, trainerToken)
	})
}

// after names the batch before the one waited for, so the largest
// sequence number cannot be an after: it used to wrap around to batch 0.
func TestNextAfterLargest(t *testing.T) {
	h := offlineService(t)
	for _, tc := range []struct {
		after string
		code  int
		want  string
	}{
		{"18446744073709551615", http.StatusBadRequest, `after \"18446744073709551615\" is not an integer between 0 and 18446744073709551614`},
		{"18446744073709551616", http.StatusBadRequest, `after \"18446744073709551616\" is not an integer`},
		{"-1", http.StatusBadRequest, `after \"-1\" is not an integer`},
		{"18446744073709551614", http.StatusNoContent, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/runs/r/batches/next?wait=0s&after="+tc.after, nil))
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("after=%s: got %d %s, want %d %s", tc.after, w.Code, w.Body, tc.code, tc.want)
		}
		if tc.code == http.StatusBadRequest && !strings.Contains(w.Body.String(), `"code":"invalid_value"`) {
			t.Errorf("after=%s: %s, want code invalid_value", tc.after, w.Body)
		}
	}
}

// steady waits until the bytes the streams hold have not changed for half
// a second, and returns them.
func steady(t *testing.T, l *httpx.StreamLimiter) int64 {
	t.Helper()
	last, since := l.Held(), time.Now()
	testenv.CheckFor(t, time.Minute, "the bytes held by streams steady", func() bool {
		if h := l.Held(); h != last {
			last, since = h, time.Now()
		}
		return time.Since(since) > 500*time.Millisecond
	})
	return last
}
