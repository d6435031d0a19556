package replay

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
)

// A turn's inline tokens are the largest values a fold stores, kilobytes
// to megabytes each, and the simplest: written once when the turn
// arrives, read when its batch is sealed (or by an export), deleted then
// (docs/design.md §14.2). In the scratch Pebble database they cost what a
// key-value store charges for data it expects to keep: a copy into the
// memtable, a flush, compactions that rewrote them level after level
// until their deletion reached them, and block reads through a cache far
// smaller than the tokens in flight; a replay with tokens spent more CPU
// in writing sstables than in its own work.
//
// So the scratch keeps them apart, in a log: segment files of about
// payloadSegment bytes, appended to in order and read with one pread a
// value; the database holds a 16-byte reference in the value's place. A
// segment is removed once every value in it is deleted, so the disk holds
// the tokens in flight and the segments they pin, not the run's.

// payloadSegment is the size past which the log starts a new segment (a
// variable for tests, which make segments small enough to end in a short
// run).
var payloadSegment int64 = 64 << 20

// payloadRefLen is the length of a reference: segment, offset, length.
const payloadRefLen = 4 + 8 + 4

type payloadRef = [payloadRefLen]byte

type payloadLog struct {
	dir  string
	segs map[uint32]*payloadSeg
	cur  uint32 // the segment appended to
	w    *bufio.Writer
	next uint32 // the name of the next segment
}

// payloadSeg is a segment file (createUnlinked) and the bytes of its
// values not deleted yet.
type payloadSeg struct {
	f       *os.File
	size    int64 // bytes appended, buffered or not
	flushed int64 // bytes in the file
	live    int64
}

func newPayloadLog(dir string) *payloadLog {
	return &payloadLog{dir: dir, segs: map[uint32]*payloadSeg{}}
}

// append writes v to the log and returns its reference.
func (l *payloadLog) append(v []byte) (payloadRef, error) {
	var ref payloadRef
	if len(v) > 1<<31 {
		return ref, fmt.Errorf("replay: payload log: a %d-byte value", len(v))
	}
	s := l.segs[l.cur]
	if s == nil || s.size >= payloadSegment {
		var err error
		if s, err = l.start(); err != nil {
			return ref, err
		}
	}
	if _, err := l.w.Write(v); err != nil {
		return ref, fmt.Errorf("replay: payload log: %w", err)
	}
	binary.LittleEndian.PutUint32(ref[0:], l.cur)
	binary.LittleEndian.PutUint64(ref[4:], uint64(s.size))
	binary.LittleEndian.PutUint32(ref[12:], uint32(len(v)))
	s.size += int64(len(v))
	s.live += int64(len(v))
	return ref, nil
}

// start ends the current segment and makes the next.
func (l *payloadLog) start() (*payloadSeg, error) {
	if s := l.segs[l.cur]; s != nil {
		if err := l.flush(s); err != nil {
			return nil, err
		}
		if s.live == 0 {
			l.remove(l.cur)
		}
	}
	f, err := createUnlinked(l.dir, fmt.Sprintf("payloads-%06d", l.next))
	if err != nil {
		return nil, fmt.Errorf("replay: payload log: %w", err)
	}
	s := &payloadSeg{f: f}
	l.cur = l.next
	l.next++
	l.segs[l.cur] = s
	if l.w == nil {
		l.w = bufio.NewWriterSize(f, 1<<20)
	} else {
		l.w.Reset(f)
	}
	return s, nil
}

func (l *payloadLog) flush(s *payloadSeg) error {
	if s.flushed == s.size {
		return nil
	}
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("replay: payload log: %w", err)
	}
	s.flushed = s.size
	return nil
}

// seg returns the segment and extent a reference names.
func (l *payloadLog) seg(ref []byte) (*payloadSeg, uint32, int64, int, error) {
	if len(ref) != payloadRefLen {
		return nil, 0, 0, 0, fmt.Errorf("replay: payload log: a %d-byte reference", len(ref))
	}
	id := binary.LittleEndian.Uint32(ref[0:])
	off := int64(binary.LittleEndian.Uint64(ref[4:]))
	n := int(binary.LittleEndian.Uint32(ref[12:]))
	s := l.segs[id]
	if s == nil || off+int64(n) > s.size {
		return nil, 0, 0, 0, fmt.Errorf("replay: payload log: no value at %d+%d of segment %d", off, n, id)
	}
	return s, id, off, n, nil
}

// read returns a copy of the value ref names.
func (l *payloadLog) read(ref []byte) ([]byte, error) {
	s, id, off, n, err := l.seg(ref)
	if err != nil {
		return nil, err
	}
	if id == l.cur && off+int64(n) > s.flushed {
		if err := l.flush(s); err != nil {
			return nil, err
		}
	}
	v := make([]byte, n)
	if _, err := s.f.ReadAt(v, off); err != nil {
		return nil, fmt.Errorf("replay: payload log: read %d+%d of segment %d: %w", off, n, id, err)
	}
	return v, nil
}

// release counts the value ref names as deleted, and removes its segment
// once none of its values is left, unless the log still appends to it.
func (l *payloadLog) release(ref []byte) error {
	s, id, _, n, err := l.seg(ref)
	if err != nil {
		return err
	}
	s.live -= int64(n)
	if s.live < 0 {
		return fmt.Errorf("replay: payload log: segment %d released more than it holds", id)
	}
	if s.live == 0 && id != l.cur {
		l.remove(id)
	}
	return nil
}

func (l *payloadLog) remove(id uint32) {
	l.segs[id].f.Close()
	delete(l.segs, id)
}

// segments is the number of segment files open.
func (l *payloadLog) segments() int { return len(l.segs) }

// close removes every segment.
func (l *payloadLog) close() {
	for id := range l.segs {
		l.remove(id)
	}
}
