package projector

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/projections"
)

// A sealed batch's manifest is stored as the API serves it — the bytes of
// its decision's data — when the window that sealed it is committed; state
// committed before manifests were stored on their own still serves them,
// from the decision.
func TestManifestStoredAsServed(t *testing.T) {
	plan, err := simulate.Generate(simulate.Options{Seed: 3, Tasks: 16, Steps: 2, BatchGroups: 4}, "manifest-run")
	if err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(t.TempDir(), pebbleOptions(slog.New(slog.DiscardHandler), "test"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := &Projector{db: db, log: slog.New(slog.DiscardHandler), notify: newBroadcast(), progress: newBroadcast()}
	window := windowOf(t, plan.All())
	b := db.NewBatch()
	decided, _, err := p.foldInto(b, newRunFolds(), window)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	sealed := 0
	for _, d := range decided {
		if d.Kind != projections.KindBatchSealed {
			continue
		}
		sealed++
		var env projections.Envelope
		if err := json.Unmarshal(d.Value, &env); err != nil {
			t.Fatal(err)
		}
		raw, ok, err := get(db, manifestKey(d.Run, d.Seq))
		if err != nil || !ok || !bytes.Equal(raw, env.Data) {
			t.Fatalf("batch %d: stored manifest %.80q (found %v, %v), want the decision's data %.80q", d.Seq, raw, ok, err, env.Data)
		}
		got, ok, err := p.Manifest(d.Run, d.Seq)
		if err != nil || !ok || !bytes.Equal(got, env.Data) {
			t.Errorf("batch %d: Manifest %.80q (%v, %v), want %.80q", d.Seq, got, ok, err, env.Data)
		}
		// As state written before: the decision alone.
		if err := db.Delete(manifestKey(d.Run, d.Seq), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		got, ok, err = p.Manifest(d.Run, d.Seq)
		if err != nil || !ok || !bytes.Equal(got, env.Data) {
			t.Errorf("batch %d without a stored manifest: Manifest %.80q (%v, %v), want %.80q", d.Seq, got, ok, err, env.Data)
		}
	}
	if sealed < 2 {
		t.Fatalf("the run sealed %d batches, want 2 or more", sealed)
	}
	if _, ok, err := p.Manifest("manifest-run", uint64(sealed+1)); ok || err != nil {
		t.Errorf("an unsealed batch: found %v, %v; want not found", ok, err)
	}
}
