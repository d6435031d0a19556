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

	"github.com/apache/arrow-go/v18/arrow"
)

// Each sealed batch's Arrow IPC body ([ArrowBody]) is written once, at
// seal, to a file beside the projector's state:
//
//	<Dir>/arrow/<run>/<seq>-<digest hex>.arrow       uncompressed
//	<Dir>/arrow/<run>/<seq>-<digest hex>.lz4.arrow   compressed ([LZ4])
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

	// kept are the batches whose bodies are on disk, the oldest written
	// first, and keptBytes the bodies' size; only the writing goroutine
	// touches them. Past the budget the oldest batches' bodies are
	// removed, both of a batch together: a trainer fetches the batches
	// just sealed, and a batch whose file is gone is rendered from its
	// chunks, the same bytes.
	kept      []keptBody
	keptBytes int64
	scanned   bool
}

// keptBody is a batch's bodies on disk: the files bodyFile(stem, c) of
// each compression, and their size.
type keptBody struct {
	stem string
	size int64
}

// compressions are the bodies stored for each batch.
var compressions = []Compression{Uncompressed, LZ4}

// bodyFile is the file of the body compressed as c of the batch whose
// files have the given stem.
func bodyFile(stem string, c Compression) string { return stem + c.Suffix() + ".arrow" }

// bodyStem is the stem of a body file's path (false for another file).
func bodyStem(path string) (string, bool) {
	stem, ok := strings.CutSuffix(path, ".arrow")
	if !ok {
		return "", false
	}
	for _, c := range compressions {
		if c != Uncompressed {
			if s, ok := strings.CutSuffix(stem, c.Suffix()); ok {
				return s, true
			}
		}
	}
	return stem, true
}

type bodyJob struct {
	run      string
	seq      uint64
	manifest []byte
	chunks   uint32 // of the batch's samples, stored
}

// writeArrowBody queues the Arrow body of batch seq of run, sealed with
// manifest (as served) over its canonical samples, stored as chunks
// chunks (chunkWriter), to be written to its file: the body is read from
// the stored chunks, so a queued batch holds none of its tokens.
func (p *Projector) writeArrowBody(run string, seq uint64, manifest []byte, chunks uint32) {
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
	case b.jobs <- bodyJob{run: run, seq: seq, manifest: manifest, chunks: chunks}:
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

// storeArrowBody writes both bodies of a batch, uncompressed and
// compressed: trainers on the SDK fetch the second, other Arrow readers
// the first.
func (p *Projector) storeArrowBody(j bodyJob) error {
	meta, digest, err := ArrowMetadata(j.run, j.seq, j.manifest)
	if err != nil {
		return err
	}
	stem, ok := p.arrowBodyStem(j.run, j.seq, digest)
	if !ok {
		return fmt.Errorf("projector: digest %q names no file", digest)
	}
	wrote := false
	for _, c := range compressions {
		var w bool
		if w, err = p.storeArrowBodyAs(j, meta, bodyFile(stem, c), c); err != nil {
			err = fmt.Errorf("%s body: %w", c, err)
			break
		}
		wrote = wrote || w
	}
	// What was written counts against the budget, also when the other
	// body failed; a batch whose bodies were both on disk already (its
	// window folded again after a crash) is counted once.
	if wrote {
		p.keepArrowBody(stem)
	}
	return err
}

// storeArrowBodyAs writes the body compressed as c to path, unless it is
// there already (a window folded again after a crash: the same bytes);
// wrote says whether it wrote it.
func (p *Projector) storeArrowBodyAs(j bodyJob, meta arrow.Metadata, path string, c Compression) (wrote bool, err error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	src := p.storedSamples(j.run, j.seq, j.chunks)
	body, err := PlanCompressedArrowBody(meta, src, c)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".body-*")
	if err != nil {
		return false, err
	}
	defer func() {
		if !wrote {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if err := body.Render(bw, src); err != nil {
		return false, err
	}
	if err := bw.Flush(); err != nil {
		return false, err
	}
	if err := f.Sync(); err != nil {
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return false, err
	}
	return true, nil
}

// keepArrowBody counts the bodies of a batch just written (their files'
// stem) against the budget and removes the oldest batches' bodies past it
// (never the ones just written). A body being sent while it is removed is
// sent whole: the open file outlives its name.
func (p *Projector) keepArrowBody(stem string) {
	b := &p.bodies
	if !b.scanned {
		b.scanned = true
		b.kept, b.keptBytes = p.scanArrowBodies()
	} else {
		var size int64
		for _, c := range compressions {
			if st, err := os.Stat(bodyFile(stem, c)); err == nil {
				size += st.Size()
			}
		}
		// A batch counted already (one body on disk before a crash, the
		// other written now) is counted again at its new size.
		if i := slices.IndexFunc(b.kept, func(k keptBody) bool { return k.stem == stem }); i >= 0 {
			b.keptBytes -= b.kept[i].size
			b.kept = slices.Delete(b.kept, i, i+1)
		}
		b.kept = append(b.kept, keptBody{stem, size})
		b.keptBytes += size
	}
	budget := p.o.ArrowBodyBytes
	if budget == 0 {
		budget = DefaultArrowBodyBytes
	}
	for b.keptBytes > budget && len(b.kept) > 1 && b.kept[0].stem != stem {
		old := b.kept[0]
		b.kept = b.kept[1:]
		b.keptBytes -= old.size
		for _, c := range compressions {
			if err := os.Remove(bodyFile(old.stem, c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				p.log.Warn("removing an old batch's Arrow body failed", "path", bodyFile(old.stem, c), "err", err)
			}
		}
	}
}

// scanArrowBodies lists the batches whose bodies are on disk, the oldest
// first (by their first file's modification time, then stem), with the
// bodies' total size.
func (p *Projector) scanArrowBodies() ([]keptBody, int64) {
	type found struct {
		keptBody
		mod int64
	}
	var all []found
	at := map[string]int{}
	root := filepath.Join(p.o.Dir, "arrow")
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		stem, ok := bodyStem(path)
		if err != nil || d.IsDir() || !ok {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		mod := info.ModTime().UnixNano()
		if i, ok := at[stem]; ok {
			all[i].size += info.Size()
			all[i].mod = min(all[i].mod, mod)
			return nil
		}
		at[stem] = len(all)
		all = append(all, found{keptBody{stem, info.Size()}, mod})
		return nil
	})
	slices.SortFunc(all, func(a, b found) int {
		return cmp.Or(cmp.Compare(a.mod, b.mod), cmp.Compare(a.stem, b.stem))
	})
	out := make([]keptBody, len(all))
	var total int64
	for i, f := range all {
		out[i] = f.keptBody
		total += f.size
	}
	return out, total
}

// arrowBodyPath is the file of the Arrow body, compressed as c says, of
// batch seq of run with the given digest ("sha256:<hex>"); false for a
// digest that is not one.
func (p *Projector) arrowBodyPath(run string, seq uint64, digest string, c Compression) (string, bool) {
	stem, ok := p.arrowBodyStem(run, seq, digest)
	if !ok {
		return "", false
	}
	return bodyFile(stem, c), true
}

// arrowBodyStem is the stem of the files of batch seq of run with the
// given digest, <Dir>/arrow/<run>/<seq>-<digest hex>; false for a digest
// that is not one.
func (p *Projector) arrowBodyStem(run string, seq uint64, digest string) (string, bool) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 || run == "" || strings.ContainsAny(run, `/\`) || run == "." || run == ".." {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", false
	}
	return filepath.Join(p.o.Dir, "arrow", run, strconv.FormatUint(seq, 10)+"-"+h), true
}

// ArrowBody opens the stored Arrow IPC body, compressed as c says, of
// batch seq of run, whose manifest carries digest: found is false when
// there is none (a batch sealed before bodies were stored, or whose body
// was not written), and the caller renders the same bytes from
// [Projector.SampleChunks].
func (p *Projector) ArrowBody(run string, seq uint64, digest string, c Compression) (f *os.File, found bool, err error) {
	path, ok := p.arrowBodyPath(run, seq, digest, c)
	if !ok {
		return nil, false, nil
	}
	f, err = os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return f, err == nil, err
}
