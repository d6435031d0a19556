package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// arrowBody waits for the projector to have written batch seq's Arrow
// bodies beside its state (the compressed one is written last) and
// returns the uncompressed one's path.
func (l *testLedger) arrowBody(t *testing.T, seq uint64) string {
	t.Helper()
	l.arrowBodyAs(t, seq, projector.LZ4)
	return l.arrowBodyAs(t, seq, projector.Uncompressed)
}

// arrowBodyAs waits for batch seq's Arrow body compressed as c and
// returns its path.
func (l *testLedger) arrowBodyAs(t *testing.T, seq uint64, c projector.Compression) string {
	t.Helper()
	m, found, err := l.p.Manifest(l.run, seq)
	if err != nil || !found {
		t.Fatalf("manifest of batch %d: found %v, %v", seq, found, err)
	}
	_, digest, err := projector.ArrowMetadata(l.run, seq, m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(l.dir, "arrow", l.run, fmt.Sprintf("%d-%s%s.arrow", seq, strings.TrimPrefix(digest, "sha256:"), c.Suffix()))
	testenv.CheckFor(t, time.Minute, "batch's Arrow body written", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	return path
}

// dropArrowBodies removes the stored bodies, once batch seq's is
// written: the route then renders them from the stored chunks.
func (l *testLedger) dropArrowBodies(t *testing.T, seq uint64) {
	t.Helper()
	l.arrowBody(t, seq)
	if err := os.RemoveAll(filepath.Join(l.dir, "arrow")); err != nil {
		t.Fatal(err)
	}
}

func fetchWith(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+trainerToken)
	req.Header.Set("Accept", MediaArrow)
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A sealed batch's Arrow body is written once beside the projector's state
// and served from there with a Content-Length, ranges and an ETag; a batch
// without it (sealed before bodies were stored) is rendered from its
// chunks into the same bytes, with the same length and tag; both are the
// samples as one record batch, what WriteArrowSamples writes.
func TestArrowBodyStoredEqualsStreamed(t *testing.T) {
	l := startLedger(t, httpx.ServerOptions{}, 1)
	url := l.url + l.samplesPath(1)
	file, err := os.ReadFile(l.arrowBody(t, 1))
	if err != nil {
		t.Fatal(err)
	}

	resp, stored := fetchWith(t, url)
	tag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(stored, file) || resp.ContentLength != int64(len(file)) ||
		resp.Header.Get("Content-Type") != MediaArrow || tag == "" {
		t.Fatalf("stored body: %d, %d bytes of %s, Content-Length %d, ETag %q; want 200, the file's %d bytes with their length and a tag",
			resp.StatusCode, len(stored), resp.Header.Get("Content-Type"), resp.ContentLength, tag, len(file))
	}
	if resp, part := fetchWith(t, url, "Range", "bytes=100-199"); resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, file[100:200]) {
		t.Errorf("range 100-199: %d, %d bytes; want 206 and those bytes", resp.StatusCode, len(part))
	}
	if resp, _ := fetchWith(t, url, "If-None-Match", tag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match of its tag: %d, want 304", resp.StatusCode)
	}

	l.dropArrowBodies(t, 1)
	resp, streamed := fetchWith(t, url)
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(streamed)) || resp.Header.Get("ETag") != tag {
		t.Errorf("rendered body: %d, Content-Length %d of %d bytes, ETag %q; want 200 with its length and the tag %q",
			resp.StatusCode, resp.ContentLength, len(streamed), resp.Header.Get("ETag"), tag)
	}
	if !bytes.Equal(streamed, stored) {
		t.Errorf("the body rendered from the chunks (%d bytes) differs from the one stored at seal (%d)", len(streamed), len(stored))
	}
	if resp, _ := fetchWith(t, url, "If-None-Match", tag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("rendered, If-None-Match of its tag: %d, want 304", resp.StatusCode)
	}

	var canonical []byte
	if _, err := l.p.SampleChunks(l.run, 1, func(c []byte) error { canonical = append(canonical, c...); return nil }); err != nil {
		t.Fatal(err)
	}
	m, _, _ := l.p.Manifest(l.run, 1)
	meta, _, err := projector.ArrowMetadata(l.run, 1, m)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := WriteArrowSamples(&want, canonical, meta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, want.Bytes()) {
		t.Errorf("the stored body differs from WriteArrowSamples of the batch's samples")
	}
	if _, _, rows := readArrow(t, stored); len(rows) != 1 {
		t.Errorf("record batches of %v rows, want one", rows)
	}
}

// ?compression=lz4 answers the body with its repeated columns compressed:
// stored at seal beside the uncompressed one, served with its own ETag and
// ranges, rendered into the same bytes without its file, and read by
// arrow-go as the same samples. Another compression, or one asked of
// NDJSON, is a 400 naming it.
func TestCompressedArrowBodyServed(t *testing.T) {
	l := startLedger(t, httpx.ServerOptions{}, 1)
	url := l.url + l.samplesPath(1)
	file, err := os.ReadFile(l.arrowBodyAs(t, 1, projector.LZ4))
	if err != nil {
		t.Fatal(err)
	}
	resp, plain := fetchWith(t, url)
	plainTag := resp.Header.Get("ETag")
	resp, stored := fetchWith(t, url+"?compression=lz4")
	tag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(stored, file) || resp.ContentLength != int64(len(file)) ||
		!strings.HasSuffix(tag, `.arrow1.lz4"`) || strings.TrimSuffix(tag, `.lz4"`)+`"` != plainTag {
		t.Fatalf("compressed body: %d, %d bytes, Content-Length %d, ETag %q (uncompressed %q); want 200, the file's %d bytes and the tag with .lz4",
			resp.StatusCode, len(stored), resp.ContentLength, tag, plainTag, len(file))
	}
	_, want, _ := readArrow(t, plain)
	if _, got, _ := readArrow(t, stored); !reflect.DeepEqual(got, want) {
		t.Errorf("the compressed body reads as other samples than the uncompressed one")
	}
	if resp, part := fetchWith(t, url+"?compression=lz4", "Range", "bytes=10-49"); resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, file[10:50]) {
		t.Errorf("range 10-49: %d, %d bytes; want 206 and those bytes", resp.StatusCode, len(part))
	}
	if resp, _ := fetchWith(t, url+"?compression=lz4", "If-None-Match", plainTag); resp.StatusCode != http.StatusOK {
		t.Errorf("If-None-Match of the uncompressed body's tag: %d, want 200", resp.StatusCode)
	}

	l.dropArrowBodies(t, 1)
	resp, rendered := fetchWith(t, url+"?compression=lz4")
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(rendered)) || resp.Header.Get("ETag") != tag || !bytes.Equal(rendered, stored) {
		t.Errorf("rendered compressed body: %d, Content-Length %d of %d bytes, ETag %q; want 200, the stored %d bytes and tag %q",
			resp.StatusCode, resp.ContentLength, len(rendered), resp.Header.Get("ETag"), len(stored), tag)
	}

	for _, tc := range []struct{ query, accept, want string }{
		{"?compression=zstd", MediaArrow, `compression \"zstd\" is not one of none, lz4`},
		{"?compression=lz4", MediaNDJSON, "compression=lz4 is for Arrow samples; this request's Accept header chose application/x-ndjson"},
	} {
		resp, body := fetchWith(t, url+tc.query, "Accept", tc.accept)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s, Accept %s: %d %s; want 400 saying %s", tc.query, tc.accept, resp.StatusCode, body, tc.want)
		}
	}
}

// A client that stops reading a stored body holds one piece of the
// budget, and is cut off once a write makes no progress for WriteTimeout.
func TestStalledArrowBodyReader(t *testing.T) {
	l := startLedger(t, httpx.ServerOptions{}, 1)
	if fi, err := os.Stat(l.arrowBody(t, 1)); err != nil || fi.Size() < 4<<20 {
		t.Fatalf("the stored body: %v, %v; want more than the socket buffers hold", fi, err)
	}
	s := l.serve(t, httpx.ServerOptions{Streams: httpx.StreamLimits{WriteTimeout: 500 * time.Millisecond}})
	c := stalledReader(t, strings.TrimPrefix(s.url, "http://"), l.samplesPath(1), trainerToken, MediaArrow)
	defer c.Close()
	testenv.CheckFor(t, time.Minute, "the stalled stream charged", func() bool { return s.svc.streams.Held() > 0 })
	if held := s.svc.streams.Held(); held > httpx.StreamPiece {
		t.Errorf("a stalled reader of a stored body holds %d bytes, want at most a piece (%d)", held, httpx.StreamPiece)
	}
	testenv.CheckFor(t, time.Minute, "the stalled stream cut off and its connection closed", func() bool {
		return s.svc.streams.Held() == 0 && s.closed.Load() == 1
	})
	status, hdr, body, err := fetch(context.Background(), s.url+l.samplesPath(1), trainerToken, MediaArrow)
	if err != nil || status != http.StatusOK || hdr.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Errorf("a reader at full speed: %d, %d bytes, Content-Length %q, %v", status, len(body), hdr.Get("Content-Length"), err)
	}
}
