package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	json "github.com/segmentio/encoding/json"

	"github.com/rolloutledger/rolloutledger/events"
)

// A held turn is a whole (not streamed) chat answer of llama.cpp, which
// carries no prompt ids, given to the client before the proxy has asked
// the engine's template and tokenizer for them (docs/design.md §19.6).
//
// Asking them while the engine generates, as the proxy does for every
// other answer without prompt ids, puts /apply-template on the engine's
// host cores beside the generation: 2.7 ms of template rendering per turn
// for a one-message conversation, 0.14 ms more per message, and on a CPU
// engine that time is taken from the answer the harness waits for. So the
// request and the engine's answer are spooled first, synced, as one held
// record; the answer goes out; then the ids are asked and the turn's facts
// built and spooled in one batch with the held record's removal. A crash
// between the two leaves the held record, and the next start builds the
// turn from it, before any later turn of its attempt: the attempt's lock
// is taken when the turn is held and released once its facts are spooled,
// so turns keep the order their answers were given in.
//
// --strict holds nothing: a turn it cannot verify is refused to the
// client, which needs the prompt's ids before the answer goes out.
type heldTurn struct {
	Run      string                  `json:"run"`
	Attempt  string                  `json:"attempt"`
	Kind     routeKind               `json:"kind"`
	Request  []byte                  `json:"request"` // the client's body, as it came
	Answer   []byte                  `json:"answer"`  // the engine's, as it came
	Arrived  int64                   `json:"arrived"` // Unix ns
	Answered int64                   `json:"answered"`
	Latency  int64                   `json:"latency_ns"`
	Segments []events.VersionSegment `json:"segments"`
}

// holds says whether the prompt ids of ex are asked after its answer is
// given (see heldTurn).
func (s *Server) holds(ex *exchange) bool {
	return s.o.Engine == EngineLlamaCPP && ex.kind == routeChat && !ex.stream && !s.o.Strict && ex.clientIDs == nil
}

// hold spools ex as a held turn and builds its facts in the background.
// When it returns nil the turn is durable and the answer may go out.
func (s *Server) hold(ex *exchange, vs []events.VersionSegment, arrived, answered time.Time) error {
	if !s.holding.enter() {
		return errors.New("proxy: closing")
	}
	a := s.as.acquire(ex.id, s.now())
	h := heldTurn{Run: ex.id.Run, Attempt: ex.id.Attempt, Kind: ex.kind, Request: ex.body, Answer: ex.answer,
		Arrived: arrived.UnixNano(), Answered: answered.UnixNano(), Latency: int64(ex.cap.latency), Segments: vs}
	t0 := time.Now()
	key, err := s.sp.hold(&h)
	s.m.phase.WithLabelValues(phaseHold).Observe(time.Since(t0).Seconds())
	if err != nil {
		s.as.release(a)
		s.holding.exit()
		return err
	}
	go func() {
		defer s.holding.exit()
		defer s.as.release(a)
		s.settle(a, ex, vs, arrived, answered, key)
	}()
	return nil
}

// settle asks the engine for a held turn's prompt ids and spools its
// facts, removing the held record. The caller holds the attempt. When the
// proxy is closing, the turn stays held for the next start.
func (s *Server) settle(a *attempt, ex *exchange, vs []events.VersionSegment, arrived, answered time.Time, key []byte) {
	ctx, cancel := context.WithTimeout(s.holding.ctx, 30*time.Second)
	t0 := time.Now()
	ids, err := promptIDs(ctx, s.o.Client, s.o.Engine, s.pick(ex.id).String(), ex)
	cancel()
	s.m.phase.WithLabelValues(phasePromptIDs).Observe(time.Since(t0).Seconds())
	if s.holding.ctx.Err() != nil {
		return
	}
	if err != nil {
		s.o.Logger.Warn("proxy: the engine gave no prompt ids", "attempt", ex.id.Attempt, "err", err)
	} else {
		ex.cap.promptIDs, ex.cap.promptFrom = ids, "tokenize"
	}
	// A failed commit (the spool's disk) is tried again while the attempt
	// stays locked: its next turn must not be numbered before this one.
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		_, err := s.spoolTurn(a, ex, vs, arrived, answered, key)
		if err == nil {
			return
		}
		s.o.Logger.Error("proxy: spooling a held turn's facts failed; trying again", "attempt", ex.id.Attempt, "err", err)
		select {
		case <-s.holding.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// resumeHeld settles the turns a previous run of the proxy held and did
// not settle, each attempt's in the order they were held. Every attempt
// with a held turn is taken before it returns, so no new turn of it is
// spooled first.
func (s *Server) resumeHeld() error {
	held, err := s.sp.loadHeld()
	if err != nil || len(held) == 0 {
		return err
	}
	byAttempt := map[identity][]heldEntry{}
	var order []identity
	for _, e := range held {
		id := identity{Run: e.h.Run, Attempt: e.h.Attempt}
		if _, ok := byAttempt[id]; !ok {
			order = append(order, id)
		}
		byAttempt[id] = append(byAttempt[id], e)
	}
	s.o.Logger.Info("proxy: settling turns held before a restart", "turns", len(held), "attempts", len(order))
	for _, id := range order {
		if !s.holding.enter() {
			return nil
		}
		a := s.as.acquire(id, s.now())
		go func(entries []heldEntry) {
			defer s.holding.exit()
			defer s.as.release(a)
			// The engine's version goes into every turn: wait for the
			// probe a little, as requests do.
			select {
			case <-s.probed:
			case <-s.holding.ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			for _, e := range entries {
				ex, err := s.reread(&e.h)
				if err != nil {
					// Unreadable: what the proxy wrote itself, so a bug
					// or a damaged disk. Keep it for a person.
					s.o.Logger.Error("proxy: a held turn cannot be read back; it stays in the spool", "attempt", id.Attempt, "err", err)
					return
				}
				s.settle(a, ex, e.h.Segments, time.Unix(0, e.h.Arrived), time.Unix(0, e.h.Answered), e.key)
				if s.holding.ctx.Err() != nil {
					return
				}
			}
		}(byAttempt[id])
	}
	return nil
}

// reread rebuilds a held turn's exchange from the request and answer as
// they came, as record and relayWhole did.
func (s *Server) reread(h *heldTurn) (*exchange, error) {
	o, err := parseObj(h.Request)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	ex := newExchange(h.Kind, identity{Run: h.Run, Attempt: h.Attempt}, o)
	if err := prepare(s.o.Engine, ex); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if _, err := s.readAnswer(ex, h.Answer); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	ex.cap.latency = time.Duration(h.Latency)
	return ex, nil
}

// holders counts the goroutines that settle held turns, so Close waits for
// them; ctx ends when the proxy closes.
type holders struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newHolders() *holders {
	ctx, cancel := context.WithCancel(context.Background())
	return &holders{ctx: ctx, cancel: cancel}
}

func (h *holders) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

func (h *holders) exit() { h.wg.Done() }

// close stops the settling (what is not settled stays held) and waits.
func (h *holders) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

type heldEntry struct {
	key []byte
	h   heldTurn
}

// hold writes a held turn, synced, and returns its key.
func (s *spool) hold(h *heldTurn) ([]byte, error) {
	v, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	key := seqKey(prefixHeld, s.heldSeq.Add(1)-1)
	if err := s.db.Set(key, v, pebble.Sync); err != nil {
		return nil, fmt.Errorf("proxy: spool: holding a turn: %w", err)
	}
	s.held.Add(1)
	return key, nil
}

// loadHeld reads every held turn, in the order they were held.
func (s *spool) loadHeld() ([]heldEntry, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixHeld}, UpperBound: []byte{prefixHeld + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []heldEntry
	for it.First(); it.Valid(); it.Next() {
		e := heldEntry{key: append([]byte(nil), it.Key()...)}
		if err := json.Unmarshal(it.Value(), &e.h); err != nil {
			return nil, fmt.Errorf("proxy: spool: held turn %d: %w", binary.BigEndian.Uint64(e.key[1:]), err)
		}
		out = append(out, e)
	}
	return out, it.Error()
}
