package proxy

import (
	"sync"
	"time"
)

// attemptState is what the proxy keeps of an attempt between its requests,
// in the spool (key a<run>NUL<attempt>), so numbering and prefixes survive
// a restart.
type attemptState struct {
	// NextTurn is the number the attempt's next recorded turn takes: turns
	// are numbered in the order their answers are committed, so a request
	// the engine failed leaves no gap.
	NextTurn int `json:"next_turn"`
	// Marks relate new prompts to earlier turns (prefix.go).
	Marks []turnMark `json:"marks,omitempty"`
	// LastTurn is the turn whose whole sequence the spool holds under s.
	LastTurn int `json:"last_turn"`
	// Pending are the tool calls of the last turn, waiting for their
	// outputs in the attempt's next request.
	Pending []pendingCall `json:"pending,omitempty"`
	// AnsweredAt is when the last turn's answer was committed (Unix ms):
	// a tool call's duration is measured from it to the next request, and
	// the spool's expiry index orders attempts by it (spool.go).
	AnsweredAt int64 `json:"answered_at,omitempty"`
	// replaces is the AnsweredAt of the state this one replaces, whose
	// expiry index entry the commit removes; not stored.
	replaces int64
}

// pendingCall is a tool call the model made, whose output has not been
// seen yet.
type pendingCall struct {
	Turn  int    `json:"turn"`
	Call  int    `json:"call"`
	ID    string `json:"id"`
	Tool  string `json:"tool"`
	Input string `json:"input"`
}

// attempts holds the attempts the proxy has seen recently; each has a lock
// that orders its commits. Idle ones are forgotten (their state stays in
// the spool and is read back on their next request).
type attempts struct {
	mu   sync.Mutex
	m    map[string]*attempt
	idle time.Duration
}

type attempt struct {
	mu       sync.Mutex
	loaded   bool
	st       *attemptState
	seq      []int32 // the last turn's whole sequence
	lastUsed time.Time
	users    int
}

func newAttempts(idle time.Duration) *attempts {
	return &attempts{m: map[string]*attempt{}, idle: idle}
}

// acquire returns the attempt's entry, locked; release unlocks it.
func (as *attempts) acquire(id identity, now time.Time) *attempt {
	as.mu.Lock()
	a := as.m[id.key()]
	if a == nil {
		a = &attempt{}
		as.m[id.key()] = a
	}
	a.users++
	a.lastUsed = now
	as.mu.Unlock()
	a.mu.Lock()
	return a
}

func (as *attempts) release(a *attempt) {
	a.mu.Unlock()
	as.mu.Lock()
	a.users--
	as.mu.Unlock()
}

// sweep forgets attempts idle for longer than the bound, so memory stays
// bounded by the attempts in flight, not by the run's history.
func (as *attempts) sweep(now time.Time) int {
	as.mu.Lock()
	defer as.mu.Unlock()
	n := 0
	for k, a := range as.m {
		if a.users == 0 && now.Sub(a.lastUsed) > as.idle {
			delete(as.m, k)
			n++
		}
	}
	return n
}
