package api

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// sendArrow answers a batch's samples as Arrow IPC (docs/design.md §15.3),
// compressed as comp says: the body the projector stored at seal, sent
// from its file with a Content-Length, ranges and an ETag (the digest's
// and the compression's); or, for a batch without one, the same bytes
// rendered from the stored chunks, column after column, with the same
// Content-Length and ETag.
func (s *Service) sendArrow(w http.ResponseWriter, r *http.Request, st *httpx.Stream, run string, seq uint64, comp projector.Compression, reserve reserveFunc) (started bool, err error) {
	manifest, found, err := s.Projector.Manifest(run, seq)
	if err != nil || !found {
		return false, errors.Join(err, notFound(found))
	}
	meta, digest, err := projector.ArrowMetadata(run, seq, manifest)
	if err != nil {
		return false, err
	}
	tag := arrowETag(digest, comp)
	f, stored, err := s.Projector.ArrowBody(run, seq, digest, comp)
	if err != nil {
		return false, err
	}
	if stored {
		defer f.Close()
		if err := st.Reserve(r.Context(), httpx.StreamPiece); err != nil {
			return false, err
		}
		h := w.Header()
		h.Set("Content-Type", MediaArrow)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("ETag", tag)
		// ServeContent answers ranges, If-None-Match and HEAD; every
		// piece it sends must be taken within the stream's write timeout.
		http.ServeContent(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.streams.Limits().WriteTimeout}, r, "", time.Time{}, f)
		return true, nil
	}

	// No stored body: render it. Each pass over the stored chunks charges
	// the chunk it holds, with the per-sample columns of a record batch.
	var held int64
	src := func(fn func([]byte) error) error {
		found, err := s.Projector.SampleChunks(run, seq, func(chunk []byte) error {
			if err := reserve(len(chunk), held); err != nil {
				return err
			}
			return fn(chunk)
		})
		if err == nil && !found {
			err = errNoChunks
		}
		return err
	}
	if err := reserve(0, 0); err != nil {
		return false, err
	}
	body, err := projector.PlanCompressedArrowBody(meta, src, comp)
	if errors.Is(err, errNoChunks) {
		// A batch of rule version 1 kept only its NDJSON: the same
		// samples, read back, charged twice (the NDJSON and the form).
		legacy, ok, lerr := s.Projector.LegacySamples(run, seq)
		if lerr != nil || !ok {
			return false, errors.Join(lerr, notFound(ok))
		}
		var canonical []byte
		if err := reserve(2*len(legacy), 0); err != nil {
			return false, err
		}
		if canonical, err = canonicalOfNDJSON(legacy); err != nil {
			return false, err
		}
		src = func(fn func([]byte) error) error { return fn(canonical) }
		body, err = projector.PlanCompressedArrowBody(meta, src, comp)
	}
	if err != nil {
		return false, err
	}
	held = body.Held()
	if err := reserve(0, held); err != nil {
		return false, err
	}
	h := w.Header()
	h.Set("Content-Type", MediaArrow)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", tag)
	if noneMatch(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return true, nil
	}
	h.Set("Content-Length", strconv.FormatInt(body.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return true, nil
	}
	bw := bufio.NewWriterSize(st, samplesWriteBuffer)
	if err := body.Render(bw, src); err != nil {
		return true, err
	}
	return true, bw.Flush()
}

// errNoChunks is a batch without stored chunks: not sealed, or sealed
// under rule version 1 (its NDJSON kept instead).
var errNoChunks = errors.New("api: no stored chunks")

func notFound(found bool) error {
	if found {
		return nil
	}
	return errNotSealed
}

// arrowETag names the Arrow body of the batch with this digest,
// compressed as c says: the digest determines the manifest and the
// samples, and so, with the compression, every byte of the body. The
// suffix names the body's layout (one record batch a 2^26 tokens), which
// a change of it would change, and the compression (".lz4": the LZ4
// frames' options are fixed in projector.ArrowBody).
func arrowETag(digest string, c projector.Compression) string {
	return `"` + strings.TrimPrefix(digest, "sha256:") + ".arrow1" + c.Suffix() + `"`
}

// noneMatch says whether the request's If-None-Match names tag (or is *).
func noneMatch(r *http.Request, tag string) bool {
	for _, v := range r.Header.Values("If-None-Match") {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
			if t == tag || t == "*" {
				return true
			}
		}
	}
	return false
}

// deadlineWriter sends a response body in pieces of at most
// [httpx.StreamPiece] bytes, each of which the client must take within
// timeout, as [httpx.Stream] does: a reader that stops reading is cut off
// and holds nothing past it. A file's body goes through ReadFrom, which
// net/http turns into sendfile: the kernel copies it, no buffer of ours.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) deadline() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), httpx.StreamPiece)]
		d.deadline()
		k, err := d.ResponseWriter.Write(piece)
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// ReadFrom sends a limited reader's content (what http.ServeContent
// copies) a piece at a time through the ResponseWriter's own ReadFrom.
func (d *deadlineWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := d.ResponseWriter.(io.ReaderFrom)
	lr, limited := src.(*io.LimitedReader)
	if !ok || !limited {
		return io.CopyBuffer(writerOnly{d}, src, make([]byte, 32<<10))
	}
	var sent int64
	for lr.N > 0 {
		piece := &io.LimitedReader{R: lr.R, N: min(lr.N, httpx.StreamPiece)}
		d.deadline()
		n, err := rf.ReadFrom(piece)
		sent, lr.N = sent+n, lr.N-n
		if err != nil {
			return sent, err
		}
		if n == 0 {
			break
		}
	}
	return sent, nil
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }
