package projector

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// Decision returns the record value of a run's seq-th decision of a kind.
func (p *Projector) Decision(run string, kind events.Type, seq uint64) ([]byte, bool, error) {
	return get(p.db, decisionKey(run, kind, seq))
}

// Manifest returns the manifest of a run's seq-th sealed batch as the API
// serves it: the data of its batch.sealed decision.
func (p *Projector) Manifest(run string, seq uint64) ([]byte, bool, error) {
	m, ok, err := get(p.db, manifestKey(run, seq))
	if err != nil || ok {
		return m, ok, err
	}
	// State committed before manifests were stored on their own holds
	// only the decision.
	v, ok, err := p.Decision(run, projections.KindBatchSealed, seq)
	if err != nil || !ok {
		return nil, ok, err
	}
	m, err = manifestData(v)
	return m, err == nil, err
}

// WaitManifest returns the manifest of a run's seq-th sealed batch as soon
// as it is committed, or ok=false when wait passes first.
func (p *Projector) WaitManifest(ctx context.Context, run string, seq uint64, wait time.Duration) ([]byte, bool, error) {
	if _, ok, err := p.WaitDecision(ctx, run, projections.KindBatchSealed, seq, wait); err != nil || !ok {
		return nil, ok, err
	}
	return p.Manifest(run, seq)
}

// manifestData is the data of a batch.sealed record: the manifest itself,
// its bytes as they are in the record.
func manifestData(value []byte) (json.RawMessage, error) {
	var d struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(value, &d); err != nil {
		return nil, fmt.Errorf("projector: stored decision does not decode: %w", err)
	}
	return d.Data, nil
}

// SampleChunks calls fn with each stored chunk of a sealed batch's
// samples, in order: whole samples of the canonical binary form
// (projections/samples.go), whose concatenation the digest of rule version
// 2 and later covers. A chunk is valid only during its call. found is
// false when the batch has no such samples: not sealed, or sealed under
// rule version 1 (LegacySamples). A batch is sealed once its decision is
// committed: its chunks are stored ahead of that (docs/design.md §12.3),
// and while its part is folded they may be there, and be partial, for a
// batch not sealed yet.
func (p *Projector) SampleChunks(run string, seq uint64, fn func(chunk []byte) error) (found bool, err error) {
	switch _, c, err := p.db.Get(decisionKey(run, projections.KindBatchSealed, seq)); {
	case errors.Is(err, pebble.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	default:
		c.Close()
	}
	read, err := p.eachChunk(run, seq, math.MaxUint32, fn)
	return read > 0, err
}

// LegacySamples returns the NDJSON samples a projector of rule version 1
// stored for a batch, which that version's digest covered.
func (p *Projector) LegacySamples(run string, seq uint64) ([]byte, bool, error) {
	return get(p.db, legacySamplesKey(run, seq))
}

// WaitDecision returns the seq-th decision of a kind as soon as it is
// committed, or ok=false when wait passes first.
func (p *Projector) WaitDecision(ctx context.Context, run string, kind events.Type, seq uint64, wait time.Duration) ([]byte, bool, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := p.notify.wait() // before the read, so no commit is missed
		v, ok, err := p.Decision(run, kind, seq)
		if err != nil || ok {
			return v, ok, err
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-timer.C:
			return nil, false, nil
		case <-changed:
		}
	}
}

// Decisions lists a run's decisions of one kind in sequence order.
func (p *Projector) Decisions(run string, kind events.Type) ([][]byte, error) {
	lo := decisionKey(run, kind, 0)
	hi := decisionKey(run, kind, ^uint64(0))
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out [][]byte
	for it.First(); it.Valid(); it.Next() {
		out = append(out, append([]byte(nil), it.Value()...))
	}
	return out, it.Error()
}

// RunInfo is a run the projector has seen.
type RunInfo struct {
	Run       string    `json:"run"`
	FirstSeen time.Time `json:"first_fact_at"`
}

// Runs lists the runs the projector has seen, newest first (by the producer
// clock of each run's first fact), ties by id.
func (p *Projector) Runs() ([]RunInfo, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsRun}, UpperBound: []byte{nsRun + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []RunInfo
	for it.First(); it.Valid(); it.Next() {
		at := time.Unix(0, int64(binary.BigEndian.Uint64(it.Value()))).UTC()
		out = append(out, RunInfo{Run: string(it.Key()[1:]), FirstSeen: at})
	}
	slices.SortStableFunc(out, func(a, b RunInfo) int { return b.FirstSeen.Compare(a.FirstSeen) })
	return out, it.Error()
}

// TaskDecision is a task's admission as the API reports it.
type TaskDecision struct {
	Task     string  `json:"task"`
	Decision string  `json:"decision"`
	Probes   int     `json:"probes"`
	Passes   int     `json:"passes"`
	PassRate float64 `json:"pass_rate"`
}

// Task reports a task's admission: the decision when one was made, else
// "pending".
func (p *Projector) Task(run, task string) (TaskDecision, error) {
	out := TaskDecision{Task: task, Decision: "pending"}
	for _, kind := range []events.Type{projections.KindTaskAdmitted, projections.KindTaskRejected} {
		vals, err := p.Decisions(run, kind)
		if err != nil {
			return out, err
		}
		for _, v := range vals {
			var d struct {
				Data TaskDecision `json:"data"`
			}
			if json.Unmarshal(v, &d) == nil && d.Data.Task == task {
				d.Data.Decision = "admitted"
				if kind == projections.KindTaskRejected {
					d.Data.Decision = "rejected"
				}
				return d.Data, nil
			}
		}
	}
	return out, nil
}

// LastSeq is the highest sequence of a run's decisions of a kind, 0 if none.
func (p *Projector) LastSeq(run string, kind events.Type) (uint64, error) {
	lo := decisionKey(run, kind, 0)
	hi := decisionKey(run, kind, ^uint64(0))
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	k := it.Key()
	if !bytes.HasPrefix(k, lo[:len(lo)-8]) {
		return 0, nil
	}
	return binary.BigEndian.Uint64(k[len(k)-8:]), nil
}

// Misrouted is how many misrouted findings of a run the projector has
// concluded and committed: records naming the run read from a partition it
// does not map to (docs/design.md §11.2), which no fold numbers.
func (p *Projector) Misrouted(run string) (uint64, error) {
	v, ok, err := get(p.db, append([]byte{nsMisrouted}, run...))
	if err != nil || !ok || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// Folded is how many of a run's facts the projector has folded and
// committed (duplicates included: the fold's fact sequence number), 0 for
// a run it has not seen.
func (p *Projector) Folded(run string) (uint64, error) {
	v, err := projections.ViewSummary(stateStore(newWindow(p.db), run))
	return v.Facts, err
}

// RunIDs lists the ids of the runs the projector has seen, in the order of
// [Projector.Runs].
func (p *Projector) RunIDs() ([]string, error) {
	infos, err := p.Runs()
	out := make([]string, len(infos))
	for i, ri := range infos {
		out[i] = ri.Run
	}
	return out, err
}

// ExplorerRecords opens a consistent read of a run's explorer records, as
// committed with the state (docs/design.md §12.4); release ends it.
func (p *Projector) ExplorerRecords(run string) (explore.Reader, func(), error) {
	snap := p.db.NewSnapshot()
	return &prefixReader{r: snap, prefix: explorePrefix(run)}, func() { _ = snap.Close() }, nil
}

// prefixReader reads the keys of a Pebble reader under a prefix.
type prefixReader struct {
	r      pebble.Reader
	prefix []byte
}

func (pr *prefixReader) Get(k []byte) ([]byte, bool, error) {
	return get(pr.r, append(slices.Clip(pr.prefix), k...))
}

func (pr *prefixReader) Scan(prefix, after []byte, fn func(k, v []byte) (bool, error)) error {
	lower := append(slices.Clip(pr.prefix), prefix...)
	if after != nil && bytes.Compare(after, prefix) > 0 {
		lower = append(append(slices.Clip(pr.prefix), after...), 0)
	}
	upper := successor(append(slices.Clip(pr.prefix), prefix...))
	it, err := pr.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		more, err := fn(it.Key()[len(pr.prefix):], it.Value())
		if err != nil || !more {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// GetSorted reads keys, in increasing order, through one iterator: each
// seek moves forward from the last, where a point read would consult
// every level's filter and index again.
func (pr *prefixReader) GetSorted(keys [][]byte, fn func(i int, v []byte) error) error {
	if len(keys) == 0 {
		return nil
	}
	full := func(buf, k []byte) []byte { return append(append(buf[:0], pr.prefix...), k...) }
	lower := full(nil, keys[0])
	upper := successor(full(nil, keys[len(keys)-1]))
	it, err := pr.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	var k []byte
	for i := range keys {
		k = full(k, keys[i])
		var v []byte
		if it.SeekGE(k) && bytes.Equal(it.Key(), k) {
			v = it.Value()
		}
		if err := fn(i, v); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// successor is the least key greater than every key with prefix p (nil
// when there is none).
func successor(p []byte) []byte {
	s := slices.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}
