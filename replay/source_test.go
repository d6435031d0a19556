package replay

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// ledgerRun pushes a simulated run through the ledger's own ingest and
// projector into Kafka, with the trainer stand-in answering each batch,
// and waits until the projector has folded every fact.
func ledgerRun(t *testing.T, kc kafkalog.Config, o simulate.Options) string {
	t.Helper()
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	o.URL, o.Trainer = s.URL(), true
	res, err := simulate.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	waitProjector(t, kc, s)
	return res.Run
}

func waitProjector(t *testing.T, kc kafkalog.Config, s *stack.Stack) {
	t.Helper()
	ends, err := kafkalog.EndOffsets(context.Background(), kc, kc.FactsTopic())
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, time.Minute, "the projector folds every fact", func() bool {
		for p, end := range ends {
			if off, err := s.Projector().Offset(p); err != nil || off < end {
				return false
			}
		}
		return true
	})
}

// refold folds a source's facts and returns every decision.
func refold(t testing.TB, src Source) ([]projections.Decision, []Fact) {
	t.Helper()
	f, s := projections.NewFold(src.Run()), projections.NewMemStore()
	var out []projections.Decision
	var facts []Fact
	err := src.Facts(context.Background(), func(fa Fact) error {
		facts = append(facts, fa)
		ds, err := f.Apply(s, fa.Record())
		out = append(out, ds...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, facts
}

func sameDecisions(t *testing.T, what string, got, want []projections.Decision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d decisions, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || !bytes.Equal(got[i].Value, want[i].Value) || !bytes.Equal(got[i].Samples, want[i].Samples) {
			t.Fatalf("%s: decision %d (%s %d) differs", what, i, got[i].Kind, got[i].Seq)
		}
	}
}

// TestSources replays one simulated run, pushed through the ledger into
// each Kafka backend, from Kafka and from its archive: every source must
// reproduce every recorded decision and head, twice, identically, and
// serve proofs, what-if and as-of replays.
func TestSources(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.KafkaBackends() {
		t.Run(b.Name, func(t *testing.T) {
			kc := b.Kafka(t)
			o := smallRun
			o.Run = "sources-" + b.Name
			run := ledgerRun(t, kc, o)
			ks, err := OpenKafka(ctx, kc, run)
			if err != nil {
				t.Fatal(err)
			}
			arch := export(t, ks)
			var first []projections.Decision
			for _, s := range []struct {
				name string
				src  Source
			}{{"kafka", ks}, {"archive", arch}} {
				t.Run(s.name, func(t *testing.T) {
					ds, facts := refold(t, s.src)
					again, _ := refold(t, s.src)
					sameDecisions(t, "second replay", again, ds)
					if first == nil {
						first = ds
					} else {
						sameDecisions(t, "archive against kafka", ds, first)
					}
					for i := range 2 {
						rep := verify(t, s.src)
						if !rep.OK() || rep.Matched != rep.Recorded || rep.Recomputed != len(ds) || rep.HeadsChecked < 5 {
							t.Fatalf("verify %d: %d of %d recorded matched, %d recomputed, %d heads; first divergence %v; history %v",
								i+1, rep.Matched, rep.Recorded, rep.Recomputed, rep.HeadsChecked, rep.First, rep.History)
						}
						if i == 0 {
							t.Logf("%s: %d facts, %d decisions (%d records), %d heads, head %d:%s", s.src.Describe(), rep.Facts,
								rep.Recorded, rep.RecordedRecords, rep.HeadsChecked, rep.Head.Size, rep.Head.Root)
						}
					}
					kinds := map[string]int{}
					for _, d := range ds {
						kinds[string(d.Kind)]++
					}
					if kinds[string(projections.KindAuditCheckpoint)] != 1 || kinds[string(projections.KindBatchSealed)] < 4 {
						t.Errorf("decisions by kind %v: want a checkpoint and 4 batches", kinds)
					}
					t.Run("proofs", func(t *testing.T) { proofSuite(t, s.src, facts) })
					t.Run("what-if", func(t *testing.T) { whatIfSuite(t, s.src) })
					t.Run("as-of", func(t *testing.T) {
						st, err := AsOfStep(ctx, s.src, 3)
						if err != nil {
							t.Fatal(err)
						}
						if st.State.Decisions.BatchSealed != 3 || len(st.Gradients) < 2 {
							t.Errorf("as of step 3: %d sealed, %d gradient steps", st.State.Decisions.BatchSealed, len(st.Gradients))
						}
					})
				})
			}
			t.Run("archive manifest", func(t *testing.T) {
				m := arch.Manifest()
				if m.Run != run || m.RuleVersion != projections.RuleVersion || m.FirstFact == nil || m.Source != ks.Describe() {
					t.Errorf("manifest %+v", m)
				}
				fmt.Fprintln(testWriter{t}, "archive:", arch.Describe())
			})
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(b)))
	return len(b), nil
}
