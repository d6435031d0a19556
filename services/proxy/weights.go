package proxy

import (
	"sync"

	"github.com/rolloutledger/rolloutledger/events"
)

// weights follows the policy version the engine serves, as the trainer
// announces it (POST /admin/weight-version) or as the engine's own update
// routes, passed through, report it. Versions only move forward.
type weights struct {
	mu        sync.Mutex
	version   int64
	announced bool
}

func (w *weights) current() (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.version, w.announced
}

// set records that version v now serves; an older version than the
// current one is refused (false).
func (w *weights) set(v int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.announced && v < w.version {
		return false
	}
	w.version, w.announced = v, true
	return true
}

// segments tracks the versions of one turn's tokens as they arrive.
type segments struct {
	w         *weights
	first     int64
	announced bool
	segs      []events.VersionSegment
}

func (w *weights) startTurn() *segments {
	v, ok := w.current()
	return &segments{w: w, first: v, announced: ok, segs: []events.VersionSegment{{Start: 0, PolicyVersion: v}}}
}

// observe notes, in a stream, that the turn's tokens from index n on were
// generated after the version seen now.
func (s *segments) observe(n int64) {
	v, ok := s.w.current()
	last := &s.segs[len(s.segs)-1]
	if !ok || v <= last.PolicyVersion {
		return
	}
	if n <= last.Start {
		last.PolicyVersion = v // no token of the old version yet
		return
	}
	s.segs = append(s.segs, events.VersionSegment{Start: n, PolicyVersion: v})
}

// finish gives the turn's segments for n completion tokens. Streaming, the
// segments were observed; whole answers know only the version before and
// after: one segment at the version before, tagged bracketed when it
// changed meanwhile (the conservative choice: the older version can only
// make a token more stale, never less).
func (s *segments) finish(n int64, streamed bool) []events.VersionSegment {
	after, ok := s.w.current()
	if !ok && !s.announced {
		return []events.VersionSegment{{Start: 0, PolicyVersion: s.first}}
	}
	out := make([]events.VersionSegment, 0, len(s.segs))
	for _, sg := range s.segs {
		if sg.Start > 0 && sg.Start >= n {
			break
		}
		sg.Known = events.KnownObserved
		out = append(out, sg)
	}
	if !streamed && after != s.first {
		out = []events.VersionSegment{{Start: 0, PolicyVersion: s.first, Known: events.KnownBracketed}}
	}
	return out
}
