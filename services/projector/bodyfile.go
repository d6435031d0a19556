package projector

import (
	"bufio"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Each sealed batch's Arrow IPC body ([ArrowBody]) is written once, at
// seal, to a file beside the projector's state:
//
//	<Dir>/arrow/<run>/<seq>-<digest hex>.arrow
//
// so that the API sends a trainer's fetch from the page cache with a
// Content-Length instead of rendering it from the stored chunks each time.
// The file is a cache of what the chunks and the manifest determine, not
// state: it is written off the fold goroutine (a seal waits for none of
// it), completely and synced before it takes its name, and named by the
// batch's digest, so a file of a window that was never committed (a crash
// before the commit, then a fold of other facts) is never served for
// another batch: a batch without its file (sealed before this existed,
// dropped under backlog, lost in a crash) is rendered from its chunks
// instead, the same bytes. docs/design.md §15.3.

// bodyQueue is how many bodies may wait to be written; past it a seal's
// body is skipped (a backlog of seals, as on a rebuild of the state,
// would otherwise hold every batch's samples in memory).
const bodyQueue = 4

// DefaultArrowBodyBytes bounds the bytes of the Arrow bodies kept on disk
// unless configured ([Options.ArrowBodyBytes]).
const DefaultArrowBodyBytes = 4 << 30

// arrowBodies writes the bodies, one at a time, on a goroutine of its own
// started by the first seal.
type arrowBodies struct {
	mu     sync.Mutex
	jobs   chan bodyJob
	done   sync.WaitGroup
	closed bool

	// kept are the body files on disk, the oldest written first, and
	// keptBytes their size; only the writing goroutine touches them. Past
	// the budget the oldest are removed: a trainer fetches the batches
	// just sealed, and a batch whose file is gone is rendered from its
	// chunks, the same bytes.
	kept      []keptBody
	keptBytes int64
	scanned   bool
}

type keptBody struct {
	path string
	size int64
}

type bodyJob struct {
	run      string
	seq      uint64
	manifest []byte
	samples  []byte
}

// writeArrowBody queues the Arrow body of batch seq of run, sealed with
// manifest (as served) over its canonical samples, to be written to its
// file. The samples must not change afterwards.
func (p *Projector) writeArrowBody(run string, seq uint64, manifest, samples []byte) {
	if p.o.Dir == "" || p.o.ArrowBodyBytes < 0 {
		return // a projector without a state directory (a test's fold) keeps no files
	}
	b := &p.bodies
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.jobs == nil {
		b.jobs = make(chan bodyJob, bodyQueue)
		b.done.Add(1)
		go func() {
			defer b.done.Done()
			for j := range b.jobs {
				if err := p.storeArrowBody(j); err != nil {
					p.log.Warn("writing a batch's Arrow body failed; the API renders it from the samples", "run", j.run, "batch", j.seq, "err", err)
				}
			}
		}()
	}
	select {
	case b.jobs <- bodyJob{run: run, seq: seq, manifest: manifest, samples: samples}:
	default:
		p.log.Debug("Arrow bodies queued past the bound; this batch's is rendered from its samples when fetched", "run", run, "batch", seq)
	}
}

// closeArrowBodies waits for the bodies queued to be written.
func (p *Projector) closeArrowBodies() {
	b := &p.bodies
	b.mu.Lock()
	b.closed = true
	if b.jobs != nil {
		close(b.jobs)
	}
	b.mu.Unlock()
	b.done.Wait()
}

func (p *Projector) storeArrowBody(j bodyJob) error {
	meta, digest, err := ArrowMetadata(j.run, j.seq, j.manifest)
	if err != nil {
		return err
	}
	path, ok := p.arrowBodyPath(j.run, j.seq, digest)
	if !ok {
		return fmt.Errorf("projector: digest %q names no file", digest)
	}
	if _, err := os.Stat(path); err == nil {
		return nil // a window folded again after a crash: the same bytes
	}
	src := func(fn func([]byte) error) error { return fn(j.samples) }
	body, err := PlanArrowBody(meta, src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".body-*")
	if err != nil {
		return err
	}
	ok = false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if err := body.Render(bw, src); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	ok = true
	p.keepArrowBody(path)
	return nil
}

// keepArrowBody counts a body just written against the budget and removes
// the oldest bodies past it (never the one just written). A body being
// sent while it is removed is sent whole: the open file outlives its name.
func (p *Projector) keepArrowBody(path string) {
	b := &p.bodies
	if !b.scanned {
		b.scanned = true
		b.kept, b.keptBytes = p.scanArrowBodies()
	} else if st, err := os.Stat(path); err == nil {
		b.kept = append(b.kept, keptBody{path, st.Size()})
		b.keptBytes += st.Size()
	}
	budget := p.o.ArrowBodyBytes
	if budget == 0 {
		budget = DefaultArrowBodyBytes
	}
	for b.keptBytes > budget && len(b.kept) > 1 && b.kept[0].path != path {
		old := b.kept[0]
		b.kept = b.kept[1:]
		b.keptBytes -= old.size
		if err := os.Remove(old.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("removing an old batch's Arrow body failed", "path", old.path, "err", err)
		}
	}
}

// scanArrowBodies lists the body files on disk, the oldest first (by
// modification time, then name), with their total size.
func (p *Projector) scanArrowBodies() ([]keptBody, int64) {
	type found struct {
		keptBody
		mod int64
	}
	var all []found
	root := filepath.Join(p.o.Dir, "arrow")
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".arrow") {
			return nil
		}
		if info, err := d.Info(); err == nil {
			all = append(all, found{keptBody{path, info.Size()}, info.ModTime().UnixNano()})
		}
		return nil
	})
	slices.SortFunc(all, func(a, b found) int {
		return cmp.Or(cmp.Compare(a.mod, b.mod), cmp.Compare(a.path, b.path))
	})
	out := make([]keptBody, len(all))
	var total int64
	for i, f := range all {
		out[i] = f.keptBody
		total += f.size
	}
	return out, total
}

// arrowBodyPath is the file of the Arrow body of batch seq of run with
// the given digest ("sha256:<hex>"); false for a digest that is not one.
func (p *Projector) arrowBodyPath(run string, seq uint64, digest string) (string, bool) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 || run == "" || strings.ContainsAny(run, `/\`) || run == "." || run == ".." {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", false
	}
	return filepath.Join(p.o.Dir, "arrow", run, strconv.FormatUint(seq, 10)+"-"+h+".arrow"), true
}

// ArrowBody opens the stored Arrow IPC body of batch seq of run, whose
// manifest carries digest: found is false when there is none (a batch
// sealed before bodies were stored, or whose body was not written), and
// the caller renders the same bytes from [Projector.SampleChunks].
func (p *Projector) ArrowBody(run string, seq uint64, digest string) (f *os.File, found bool, err error) {
	path, ok := p.arrowBodyPath(run, seq, digest)
	if !ok {
		return nil, false, nil
	}
	f, err = os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return f, err == nil, err
}
