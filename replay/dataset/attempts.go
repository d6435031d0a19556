package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	json "github.com/segmentio/encoding/json"
)

// An export keeps the run's attempt summaries (counts, outcome, reward,
// the batch that trained each) in the row store, not in memory: a run has
// one for every attempt it ever made, some 700 K at 50 M facts, while the
// fold touches only those in flight. The fold's lookups go through a
// table in memory of at most attemptsInMemory summaries; past that, every
// one is written to the store and the table starts empty, and an attempt
// mentioned again is read back (docs/design.md §14.7).
//
// Keys, beside those of rows.go:
//
//	'A' attempt                     an attempt's summary
//	'o' seq                         the id of the attempt whose attempt.started is at seq
const (
	keyAttempt      = 'A'
	keyAttemptOrder = 'o'
)

// attemptsInMemory bounds the attempt summaries held in memory while the
// fold runs: ~600 bytes each.
var attemptsInMemory = 16 << 10

// attemptOf is the attempt of id, made when first mentioned. The attempt
// is the caller's to change until the next call: a later call may write
// it to the store.
func (r *Run) attemptOf(id string) (*Attempt, error) {
	if a := r.attempts[id]; a != nil {
		return a, nil
	}
	if len(r.attempts) >= attemptsInMemory {
		if err := r.storeAttempts(); err != nil {
			return nil, err
		}
	}
	a := &Attempt{Attempt: id}
	if r.attemptsStored > 0 {
		ok, err := r.getAttempt(id, a)
		if err != nil {
			return nil, fmt.Errorf("dataset: attempt %s: %w", id, err)
		}
		if ok {
			r.attempts[id] = a
			return a, nil
		}
	}
	r.attemptsMet++
	a.ord = r.attemptsMet
	r.attempts[id] = a
	return a, nil
}

// storedAttempt is an attempt's summary as the row store keeps it.
type storedAttempt struct {
	A   *Attempt `json:"a"`
	Ord uint64   `json:"o"`
}

// getAttempt reads the summary of attempt id into a; false when none was
// stored.
func (r *Run) getAttempt(id string, a *Attempt) (bool, error) {
	s := storedAttempt{A: a}
	ok, err := r.rows.get(attemptPrefix(keyAttempt, id), &s)
	if ok {
		a.Attempt, a.ord = id, s.Ord
	}
	return ok, err
}

// started records that a began at seq: the order the writers read
// attempts in.
func (r *Run) started(a *Attempt) error {
	r.attemptCount++
	return r.rows.set(binary.BigEndian.AppendUint64([]byte{keyAttemptOrder}, a.Seq), a.Attempt)
}

// storeAttempts writes every attempt in memory to the store and empties
// the table; the store then answers for them.
func (r *Run) storeAttempts() error {
	for id, a := range r.attempts {
		if err := r.rows.set(attemptPrefix(keyAttempt, id), storedAttempt{A: a, Ord: a.ord}); err != nil {
			return err
		}
	}
	r.attemptsStored += len(r.attempts)
	clear(r.attempts)
	return r.rows.flush()
}

// EachAttempt yields the run's attempts in the order they started (the
// order of their attempt.started), each read from the store, with the
// group's purpose and the reason its train group was dropped.
func (r *Run) EachAttempt() iter.Seq2[*Attempt, error] {
	return func(yield func(*Attempt, error) bool) {
		if r.rows == nil {
			yield(nil, fmt.Errorf("dataset: run %s was closed", r.Run))
			return
		}
		err := r.rows.scan([]byte{keyAttemptOrder}, func(v []byte) error {
			var id string
			if err := json.Unmarshal(v, &id); err != nil {
				return err
			}
			a := &Attempt{}
			ok, err := r.getAttempt(id, a)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("dataset: attempt %s started but has no summary", id)
			}
			a.Purpose, a.DropReason = r.purposes[a.Group], r.dropped[a.Group]
			if !yield(a, nil) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(nil, err)
		}
	}
}

// AttemptCount is the number of attempts that started.
func (r *Run) AttemptCount() int { return r.attemptCount }

// attemptsOf yields the attempts of runs, run by run, as rows.
func attemptsOf(runs []*Run) iter.Seq2[*row[*Attempt], error] {
	return func(yield func(*row[*Attempt], error) bool) {
		for _, run := range runs {
			for a, err := range run.EachAttempt() {
				if !yield(&row[*Attempt]{run: run, r: a}, err) || err != nil {
					return
				}
			}
		}
	}
}
