package projections

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/rolloutledger/rolloutledger/events"
)

// The rules are specified by transcripts: testdata/rules/*.txt, one file per
// rule, each case a run written as fact lines and the decisions the fold
// concludes from them. testdata/rules/README.md describes the language;
// `go test ./projections/ -run TestRules -rewrite` rewrites the expected
// decisions after a rule change, to be read as a diff.

func TestRules(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "rules", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no transcripts under testdata/rules")
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd != "run" {
					d.Fatalf(t, "unknown directive %q: a case is `run [full] [samples]` followed by its fact lines", d.Cmd)
				}
				return runTranscript(t, d)
			})
		})
	}
}

// transcript folds one case's facts line by line and writes the decisions
// each line caused.
type transcript struct {
	t       *testing.T
	full    bool // print decisions as their canonical bytes
	samples bool // print the samples of sealed batches

	b     *runBuilder
	fold  *Fold
	store *MemStore
	// shadows fold every record again with write-back caches, one that
	// writes back after every record and one that never needs to: each
	// must conclude the same decisions, and hold the same state once
	// flushed (FoldOptions.WriteBack).
	shadows []shadowFold
	values  [][]byte // the value of every record applied, in order
	// labels maps an id= label to the event number that carries it.
	labels map[string]int
	// firstSeq is the fact sequence number of the first record of each event id.
	firstSeq map[string]uint64
	// sealed is the digest of every sealed batch, by batch.
	sealed  []string
	counts  DecisionCounts
	lastSeq map[events.Type]uint64

	out strings.Builder
}

// pendingRecord is a record a fact line stands for, not yet applied: an
// event, or (raw) a record value that is not one.
type pendingRecord struct {
	ev  events.Event
	raw []byte
}

func runTranscript(t *testing.T, d *datadriven.TestData) string {
	tr := &transcript{
		t: t, b: newRun(t), fold: NewFold(testRun), store: NewMemStore(),
		labels: map[string]int{}, firstSeq: map[string]uint64{}, lastSeq: map[events.Type]uint64{},
		shadows: []shadowFold{
			{name: "write-back of 1 byte", fold: NewFoldWith(testRun, FoldOptions{WriteBack: 1}), store: NewMemStore()},
			{name: "write-back of 1 GiB", fold: NewFoldWith(testRun, FoldOptions{WriteBack: 1 << 30}), store: NewMemStore()},
		},
	}
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "full":
			tr.full = true
		case "samples":
			tr.samples = true
		default:
			d.Fatalf(t, "run: unknown option %q (want full or samples)", a.Key)
		}
	}
	for n, line := range strings.Split(d.Input, "\n") {
		text := strings.TrimSpace(line)
		if !strings.HasPrefix(text, "raw ") {
			text, _, _ = strings.Cut(text, "#")
			text = strings.TrimSpace(text)
		}
		if text == "" {
			continue
		}
		recs, err := tr.parse(text)
		if err != nil {
			d.Fatalf(t, "fact line %d %q: %v", n+1, text, err)
		}
		for i, p := range recs {
			header := text
			if len(recs) > 1 {
				header += " (" + describeFact(p) + ")"
			}
			if err := tr.apply(p, header); err != nil {
				d.Fatalf(t, "fact line %d %q, record %d of %d: %v", n+1, text, i+1, len(recs), err)
			}
		}
	}
	for _, sh := range tr.shadows {
		if err := sh.fold.Flush(sh.store); err != nil {
			t.Fatal(err)
		}
		sameStore(t, sh.name, sh.store, tr.store)
	}
	if tr.out.Len() == 0 {
		return "no decisions"
	}
	return tr.out.String()
}

// shadowFold is a write-back fold beside a transcript's fold.
type shadowFold struct {
	name  string
	fold  *Fold
	store *MemStore
}

// apply folds one record, checks what every decision must satisfy, and
// writes the decisions under a header naming the fact.
func (tr *transcript) apply(p pendingRecord, header string) error {
	seq := uint64(len(tr.values) + 1)
	rec := Record{Partition: 3, Offset: offsetOf(seq)}
	if p.raw != nil {
		rec.Value = p.raw
	} else {
		v, err := events.Encode(p.ev)
		if err != nil {
			return err
		}
		ev, err := events.Decode(v)
		if err != nil {
			return fmt.Errorf("the catalogue refuses this fact: %w", err)
		}
		rec.Value, rec.Event = v, ev
		if _, ok := tr.firstSeq[ev.ID]; !ok {
			tr.firstSeq[ev.ID] = seq
		}
	}
	tr.values = append(tr.values, rec.Value)
	ds, err := tr.fold.Apply(tr.store, rec)
	if err != nil {
		return err
	}
	for _, sh := range tr.shadows {
		got, err := sh.fold.Apply(sh.store, rec)
		if err != nil {
			return fmt.Errorf("%s: %w", sh.name, err)
		}
		sameDecisions(tr.t, fmt.Sprintf("%s, record %d", sh.name, seq), got, ds)
	}
	if len(ds) == 0 {
		return nil
	}
	fmt.Fprintf(&tr.out, "#%d %s\n", seq, header)
	for i, d := range ds {
		if err := tr.check(d, rec, seq, i == len(ds)-1); err != nil {
			return fmt.Errorf("%s %d: %w", d.Kind, d.Seq, err)
		}
		if err := tr.print(d); err != nil {
			return err
		}
	}
	return nil
}

// offsetOf places fact n at partition 3, offset 1000 + 3(n−1): offsets never
// equal sequence numbers, and posOf reads them back.
func offsetOf(seq uint64) int64 { return 1000 + 3*int64(seq-1) }

func posOf(p LogPosition) string {
	if p.Partition == 3 && p.Offset >= 1000 && (p.Offset-1000)%3 == 0 {
		return fmt.Sprintf("#%d", (p.Offset-1000)/3+1)
	}
	return fmt.Sprintf("%d/%d", p.Partition, p.Offset)
}

// check holds every decision to what does not depend on the rules: its id,
// its sequence number, the fact it names, and for a batch its digest and
// tree head; for a checkpoint its head and counts, and its place after the
// other decisions of its fact.
func (tr *transcript) check(d Decision, rec Record, seq uint64, last bool) error {
	var errs []error
	env := envelopeOf(tr.t, d)
	tr.lastSeq[d.Kind]++
	if d.Seq != tr.lastSeq[d.Kind] {
		errs = append(errs, fmt.Errorf("seq %d follows %d", d.Seq, tr.lastSeq[d.Kind]-1))
	}
	if want := events.DecisionID(testRun, d.Kind, d.Seq); d.ID != want || env.ID != want {
		errs = append(errs, fmt.Errorf("id %s (envelope %s), want %s", d.ID, env.ID, want))
	}
	if d.Run != testRun || env.Run != testRun || env.Type != d.Kind || env.V != DecisionSchemaVersion ||
		env.Source != DecisionSource || env.RuleVersion != RuleVersion {
		errs = append(errs, fmt.Errorf("envelope %+v does not match the decision", env))
	}
	if want := (FactPosition{Seq: seq, Partition: rec.Partition, Offset: rec.Offset}); env.Fact != want {
		errs = append(errs, fmt.Errorf("caused by %+v, want %+v", env.Fact, want))
	}
	if (d.Kind == KindBatchSealed) != (d.Samples != nil) {
		errs = append(errs, fmt.Errorf("%d bytes of samples", len(d.Samples)))
	}
	head := TreeHead{Size: seq, Root: referenceRoot(tr.values)}
	switch d.Kind {
	case KindBatchSealed:
		m, err := ManifestOf(d.Value)
		if err != nil {
			return err
		}
		if m.Run != testRun || m.Seq != d.Seq || m.TrainerVersion != d.Seq-1 || m.RuleVersion != RuleVersion {
			errs = append(errs, fmt.Errorf("manifest run %s seq %d trainer_version %d rule_version %d", m.Run, m.Seq, m.TrainerVersion, m.RuleVersion))
		}
		if want := (LogPosition{Partition: rec.Partition, Offset: rec.Offset}); m.Watermark != want {
			errs = append(errs, fmt.Errorf("watermark %+v, want the sealing fact %+v", m.Watermark, want))
		}
		if m.Tree != head {
			errs = append(errs, fmt.Errorf("tree %+v, want %+v", m.Tree, head))
		}
		// The digest covers the manifest without it, then the samples;
		// the data is that manifest with the digest appended last.
		digest := m.Digest
		m.Digest = ""
		body, err := events.CanonicalJSON(m)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(append(body, d.Samples...))
		if want := "sha256:" + hex.EncodeToString(sum[:]); digest != want {
			errs = append(errs, fmt.Errorf("digest %s, want %s", digest, want))
		}
		if want := string(body[:len(body)-1]) + `,"digest":"` + digest + `"}`; string(env.Data) != want {
			errs = append(errs, fmt.Errorf("data is not the digested manifest followed by its digest: %s", env.Data))
		}
		tr.sealed = append(tr.sealed, digest)
		tr.counts.BatchSealed++
	case KindTaskAdmitted:
		tr.counts.TaskAdmitted++
	case KindTaskRejected:
		tr.counts.TaskRejected++
	case KindAuditFinding:
		var f Finding
		if err := json.Unmarshal(env.Data, &f); err != nil {
			return err
		}
		if f.Kind == "" || f.Detail == "" {
			errs = append(errs, fmt.Errorf("finding without kind or detail: %s", env.Data))
		}
		tr.counts.AuditFinding++
	case KindAuditCheckpoint:
		cp, err := CheckpointOf(d.Value)
		if err != nil {
			return err
		}
		if seq != d.Seq*CheckpointInterval || !last {
			errs = append(errs, fmt.Errorf("caused by fact %d, want fact %d and no decision after it", seq, d.Seq*CheckpointInterval))
		}
		if cp.Tree != head {
			errs = append(errs, fmt.Errorf("tree %+v, want %+v", cp.Tree, head))
		}
		if cp.Decisions != tr.counts {
			errs = append(errs, fmt.Errorf("counts %+v, want the decisions before it, %+v", cp.Decisions, tr.counts))
		}
	default:
		errs = append(errs, errors.New("unknown kind"))
	}
	return errors.Join(errs...)
}

// print writes a decision: its canonical bytes (full), or its kind, seq
// and salient fields.
func (tr *transcript) print(d Decision) error {
	w := &tr.out
	if tr.full {
		fmt.Fprintf(w, "  %s\n", d.Value)
		if tr.samples {
			lines, err := SamplesNDJSON(d.Samples)
			if err != nil {
				return err
			}
			for _, l := range strings.SplitAfter(string(lines), "\n") {
				if l != "" {
					fmt.Fprintf(w, "  %s", l)
				}
			}
		}
		return nil
	}
	env := envelopeOf(tr.t, d)
	switch d.Kind {
	case KindBatchSealed:
		m, err := ManifestOf(d.Value)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %s %d trainer_version=%d watermark=%s tree=%d\n", d.Kind, d.Seq, m.TrainerVersion, posOf(m.Watermark), m.Tree.Size)
		for _, g := range m.Groups {
			fmt.Fprintf(w, "    group %s task=%s completed=%s\n", g.Group, g.Task, posOf(g.Completed))
			for _, a := range g.Attempts {
				masked := ""
				if a.Masked != "" {
					masked = " masked=" + a.Masked
				}
				fmt.Fprintf(w, "      attempt %s score=%s bonus=%s reward=%s advantage=%s tokens=%d%s\n",
					a.Attempt, num(a.Score), num(a.Bonus), num(a.Reward), num(a.Advantage), a.CompletionTokens, masked)
				for _, tn := range a.Turns {
					state := "masked"
					if tn.Trained {
						state = "trained"
						for _, sg := range tn.Segments {
							if !sg.Trained {
								state = "partly-trained"
							}
						}
					}
					fmt.Fprintf(w, "        turn %d v=%d staleness=%d %s at=%s\n", tn.Turn, tn.PolicyVersion, tn.Staleness, state,
						posOf(LogPosition{Partition: tn.Partition, Offset: tn.Offset}))
					for _, sg := range tn.Segments {
						state := "masked"
						if sg.Trained {
							state = "trained"
						}
						fmt.Fprintf(w, "          segment start=%d v=%d staleness=%d %s\n", sg.Start, sg.PolicyVersion, sg.Staleness, state)
					}
				}
			}
		}
		for _, g := range m.Dropped {
			fmt.Fprintf(w, "    dropped %s task=%s reason=%s\n", g.Group, g.Task, g.Reason)
		}
		s := m.Stats
		fmt.Fprintf(w, "    stats groups=%d attempts=%d turns=%d trained_turns=%d trained_tokens=%d masked_tokens=%d staleness=%s in_flight=%s in_queue=%s\n",
			s.Groups, s.Attempts, s.Turns, s.TrainedTurns, s.TrainedTokens, s.MaskedTokens,
			histogram(s.StalenessHistogram), histogram(s.InFlight), histogram(s.InQueue))
		if tr.samples {
			lines, err := SamplesNDJSON(d.Samples)
			if err != nil {
				return err
			}
			for _, l := range strings.SplitAfter(string(lines), "\n") {
				if l != "" {
					fmt.Fprintf(w, "    sample %s", l)
				}
			}
		}
	case KindTaskAdmitted, KindTaskRejected:
		var a Admission
		if err := json.Unmarshal(env.Data, &a); err != nil {
			return err
		}
		fmt.Fprintf(w, "  %s %d task=%s probes=%d passes=%d pass_rate=%s\n", d.Kind, d.Seq, a.Task, a.Probes, a.Passes, num(a.PassRate))
	case KindAuditFinding:
		var f Finding
		if err := json.Unmarshal(env.Data, &f); err != nil {
			return err
		}
		fmt.Fprintf(w, "  %s %d %s", d.Kind, d.Seq, f.Kind)
		field := func(k, v string) {
			if v != "" {
				fmt.Fprintf(w, " %s=%s", k, v)
			}
		}
		if f.Event != "" {
			if n, ok := tr.firstSeq[f.Event]; ok {
				field("event", fmt.Sprintf("#%d", n))
			} else {
				field("event", f.Event)
			}
		}
		field("type", string(f.Type))
		field("task", f.Task)
		field("group", f.Group)
		field("attempt", f.Attempt)
		if len(f.Turns) > 0 {
			ts := make([]string, len(f.Turns))
			for i, n := range f.Turns {
				ts[i] = strconv.FormatInt(n, 10)
			}
			field("turns", "("+strings.Join(ts, ",")+")")
		}
		if f.Batch != 0 {
			field("batch", strconv.FormatUint(f.Batch, 10))
		}
		field("want", tr.digestName(f.Want))
		field("got", tr.digestName(f.Got))
		fmt.Fprintf(w, "\n    %s\n", f.Detail)
	case KindAuditCheckpoint:
		cp, err := CheckpointOf(d.Value)
		if err != nil {
			return err
		}
		c := cp.Decisions
		fmt.Fprintf(w, "  %s %d tree=%d batch.sealed=%d task.admitted=%d task.rejected=%d audit.finding=%d\n",
			d.Kind, d.Seq, cp.Tree.Size, c.BatchSealed, c.TaskAdmitted, c.TaskRejected, c.AuditFinding)
	}
	return nil
}

// num writes a float as the decision's JSON does.
func num(f float64) string {
	b, err := appendJSONFloat(nil, f, 64)
	if err != nil {
		return fmt.Sprint(f)
	}
	return string(b)
}

// histogram writes {"0":2,"10":1} as (0:2,10:1), keys in numeric order.
func histogram(h map[string]int) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, h[k])
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// digestName names the digest of a sealed batch "sealed:k".
func (tr *transcript) digestName(digest string) string {
	if i := slices.Index(tr.sealed, digest); i >= 0 && digest != "" {
		return fmt.Sprintf("sealed:%d", i+1)
	}
	return digest
}
