package projector

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/projections"
)

// SampleChunkBytes is the size a stored chunk of samples grows to before
// the next sample starts a new one (a sample larger than that is a chunk of
// its own). Chunks let the API stream a batch of millions of tokens a
// chunk at a time, each small enough for Pebble's block cache.
const SampleChunkBytes = 1 << 20

func samplesKey(run string, seq uint64, chunk uint32) []byte {
	return binary.BigEndian.AppendUint32(batchKey(nsSamples, run, seq), chunk)
}

// chunkWriter stores a batch's canonical samples as the fold writes them
// (projections.FoldOptions.SamplesTo), in chunks of whole samples numbered
// from 0, each committed to the database in a batch of its own, without
// sync, ahead of the part's batch (docs/design.md §12.3): a seal holds one
// chunk of its batch's samples, not the batch's hundreds of megabytes. The
// part's synced commit makes the chunks durable with it, Pebble's
// write-ahead log being one sequence; a part folded again after a crash
// writes the same chunks again, byte for byte.
//
// The fold's writes are parts of samples (a header, a column); the writer
// keeps the samples not yet in a chunk and finds where each ends from its
// header. A write that fails is kept and returned by finish: the fold does
// not check its writes.
type chunkWriter struct {
	db    *pebble.DB
	batch *pebble.Batch
	run   string
	seq   uint64
	buf   []byte
	whole int // bytes of buf that are whole samples
	chunk uint32
	err   error
	// check, when set, is called before each chunk is committed: the
	// projector's free-space check (Projector.checkSpace), as before the
	// part's commit, since Pebble aborts the process on a write it cannot
	// log.
	check func() error
}

func newChunkWriter(db *pebble.DB, run string, seq uint64, check func() error) *chunkWriter {
	return &chunkWriter{db: db, run: run, seq: seq, check: check}
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	for {
		r := projections.NewSampleReader(w.buf[w.whole:])
		if !r.Next() {
			return len(p), nil // the next sample is not whole yet
		}
		// A chunk closes once it holds SampleChunkBytes, before the next
		// sample.
		if w.whole >= SampleChunkBytes {
			if w.err = w.put(); w.err != nil {
				return 0, w.err
			}
			continue
		}
		w.whole += r.Offset()
	}
}

// put stores buf's whole samples as the next chunk and keeps the rest.
func (w *chunkWriter) put() error {
	if w.check != nil {
		if err := w.check(); err != nil {
			return err
		}
	}
	if w.batch == nil {
		// One batch for the seal's chunks, its buffer kept between them
		// (Pebble drops a buffer over 1 MiB at Reset by default: a
		// batch of 540 MB of samples allocated 1.3 GB).
		w.batch = w.db.NewBatch(pebble.WithInitialSizeBytes(SampleChunkBytes+64<<10), pebble.WithMaxRetainedSizeBytes(4*SampleChunkBytes))
	}
	w.batch.Reset()
	if err := w.batch.Set(samplesKey(w.run, w.seq, w.chunk), w.buf[:w.whole], nil); err != nil {
		return err
	}
	if err := w.batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("projector: samples of batch %d of %s, chunk %d: %w", w.seq, w.run, w.chunk, err)
	}
	w.chunk++
	w.buf = w.buf[:copy(w.buf, w.buf[w.whole:])]
	w.whole = 0
	return nil
}

// finish stores the last chunk (a batch without samples has one, empty)
// and returns the number of chunks.
func (w *chunkWriter) finish() (uint32, error) {
	defer w.close()
	if w.err != nil {
		return 0, w.err
	}
	if w.whole != len(w.buf) {
		return 0, fmt.Errorf("projector: samples of batch %d of %s end in %d bytes that are not a whole sample", w.seq, w.run, len(w.buf)-w.whole)
	}
	if w.whole > 0 || w.chunk == 0 {
		if err := w.put(); err != nil {
			return 0, err
		}
	}
	return w.chunk, nil
}

// close releases the writer's batch; finish calls it.
func (w *chunkWriter) close() {
	if w.batch != nil {
		w.batch.Close()
		w.batch = nil
	}
}

// samplesTo is the fold's projections.FoldOptions.SamplesTo for run: it
// stores each batch the fold seals in chunks (chunkWriter) and notes their
// number for takeSamples; check is the chunkWriter's.
func (rf *runFolds) samplesTo(db *pebble.DB, run string, check func() error) func(uint64, func(io.Writer) error) error {
	return func(seq uint64, write func(io.Writer) error) error {
		w := newChunkWriter(db, run, seq, check)
		if err := write(w); err != nil {
			w.close() // a fold that failed stores no last chunk
			return err
		}
		chunks, err := w.finish()
		if err != nil {
			return err
		}
		rf.stored[storedKey{run, seq}] = chunks
		return nil
	}
}

// takeSamples returns the number of chunks stored for batch seq of run,
// which its fact just sealed, and adds to the part's batch b the deletion
// of any chunk past them: one left by an earlier fold of the part, not
// committed, that sealed the batch with more (a part is folded again only
// after a failure, and then with the same rules, so this is for a
// projector upgraded in between).
func (rf *runFolds) takeSamples(db *pebble.DB, b *pebble.Batch, run string, seq uint64) (uint32, error) {
	k := storedKey{run, seq}
	chunks, ok := rf.stored[k]
	if !ok {
		return 0, errors.New("projector: the fold sealed the batch without writing its samples")
	}
	delete(rf.stored, k)
	past := samplesKey(run, seq, chunks)
	_, c, err := db.Get(past)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return chunks, nil
	case err != nil:
		return 0, err
	}
	c.Close()
	return chunks, b.DeleteRange(past, batchKey(nsSamples, run, seq+1), nil)
}

// storedSamples reads the chunks of a batch's samples the fold stored.
func (p *Projector) storedSamples(run string, seq uint64, chunks uint32) SampleSource {
	return func(fn func([]byte) error) error {
		read, err := p.eachChunk(run, seq, chunks, fn)
		if err == nil && read < chunks {
			err = fmt.Errorf("projector: samples of batch %d of %s: %d chunks stored, %d found", seq, run, chunks, read)
		}
		return err
	}
}

// eachChunk calls fn with the stored chunks of batch seq of run, in
// order, up to limit of them or the first missing, and returns how many
// it read. A chunk is valid only during its call.
func (p *Projector) eachChunk(run string, seq uint64, limit uint32, fn func([]byte) error) (uint32, error) {
	for i := uint32(0); i < limit; i++ {
		v, c, err := p.db.Get(samplesKey(run, seq, i))
		if errors.Is(err, pebble.ErrNotFound) {
			return i, nil
		}
		if err != nil {
			return i, fmt.Errorf("projector: samples of batch %d of %s, chunk %d: %w", seq, run, i, err)
		}
		err = fn(v)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return i + 1, err
		}
	}
	return limit, nil
}
