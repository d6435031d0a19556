package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/internal/testenv/ledgertest"
	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func getAccept(t *testing.T, url, accept string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// canonicalOfArrow reads an Arrow IPC stream of samples back into their
// canonical binary form, and returns its schema's metadata.
func canonicalOfArrow(t *testing.T, body []byte) ([]byte, map[string]string) {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out []byte
	for r.Next() {
		rec := r.RecordBatch()
		ids, mask := rec.Column(4).(*array.List), rec.Column(5).(*array.List)
		lps, vers := rec.Column(6).(*array.List), rec.Column(7).(*array.List)
		for i := range int(rec.NumRows()) {
			from, to := ids.ValueOffsets(i)
			s := projections.Sample{Group: rec.Column(0).(*array.String).Value(i), Attempt: rec.Column(1).(*array.String).Value(i),
				Segment: int64(rec.Column(2).(*array.Int32).Value(i)), Advantage: rec.Column(3).(*array.Float64).Value(i),
				TokenIDs:        ids.ListValues().(*array.Int32).Int32Values()[from:to],
				LossMask:        mask.ListValues().(*array.Uint8).Uint8Values()[from:to],
				RolloutLogprobs: lps.ListValues().(*array.Float32).Float32Values()[from:to],
				PolicyVersions:  vers.ListValues().(*array.Int64).Int64Values()[from:to]}
			// Rule version 4 on: each token's sampling temperature, last.
			if int(rec.NumCols()) > 8 {
				temps := rec.Column(8).(*array.List)
				s.Temperatures = temps.ListValues().(*array.Float32).Float32Values()[from:to]
			}
			if out, err = projections.AppendSample(out, &s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{}
	md := r.Schema().Metadata()
	for i, k := range md.Keys() {
		meta[k] = md.Values()[i]
	}
	return out, meta
}

// The trainer's interface end to end: a simulated run with a trainer that
// consumes batches over HTTP while rollouts continue, then every endpoint
// checked against what the trainer saw.
func TestTrainerInterface(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	s, err := stack.Start(context.Background(), stack.Options{Addr: "127.0.0.1:0", Kafka: kc, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	const run = "api-run"

	// Before anything is sealed, the long poll answers 204 after its wait.
	start := time.Now()
	if code, body := get(t, s.URL()+"/v1/runs/"+run+"/batches/next?after=0&wait=200ms"); code != http.StatusNoContent {
		t.Fatalf("next before any batch: got %d %s, want 204", code, body)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("next returned after %v, before its wait", waited)
	}

	opts := simulate.Options{URL: s.URL(), Run: run, Seed: 5, Tasks: 24, Steps: 3, BatchGroups: 4, MaxTurns: 60, Trainer: true, Tokens: true}
	plan, err := simulate.Generate(opts, run)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 3 {
		t.Fatalf("trainer took %d steps, want 3", len(res.Steps))
	}

	decided, _ := ledgertest.Decisions(t, kc)
	for _, st := range res.Steps {
		code, body := get(t, fmt.Sprintf("%s/v1/runs/%s/batches/%d", s.URL(), run, st.Step))
		if code != 200 {
			t.Fatalf("batch %d: %d %s", st.Step, code, body)
		}
		// The manifest is served byte for byte as the batch.sealed
		// decision on the topic holds it, and the long poll serves the
		// same bytes.
		var env projections.Envelope
		if err := json.Unmarshal(decided[events.DecisionID(run, projections.KindBatchSealed, uint64(st.Step))], &env); err != nil {
			t.Fatalf("batch %d: the decision on the topic: %v", st.Step, err)
		}
		if want := append(env.Data, '\n'); !bytes.Equal(body, want) {
			t.Errorf("batch %d: served %.120q, want the decision's data %.120q", st.Step, body, want)
		}
		if _, next := get(t, fmt.Sprintf("%s/v1/runs/%s/batches/next?after=%d&wait=1s", s.URL(), run, st.Step-1)); !bytes.Equal(next, body) {
			t.Errorf("batch %d: next served %.120q, batches/%d %.120q", st.Step, next, st.Step, body)
		}
		var m projections.Manifest
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if m.Seq != uint64(st.Step) || m.Digest != st.Digest || m.TrainerVersion != uint64(st.Step-1) || len(m.Groups) != 4 {
			t.Errorf("batch %d: got seq %d trainer_version %d digest %s with %d groups; trainer saw digest %s",
				st.Step, m.Seq, m.TrainerVersion, m.Digest, len(m.Groups), st.Digest)
		}
		// Samples: one line per attempt segment, each with the advantage
		// of its attempt in the manifest.
		code, body = get(t, fmt.Sprintf("%s/v1/runs/%s/batches/%d/samples", s.URL(), run, st.Step))
		if code != 200 {
			t.Fatalf("samples %d: %d", st.Step, code)
		}
		adv := map[string]float64{}
		for _, g := range m.Groups {
			for _, a := range g.Attempts {
				adv[a.Attempt] = a.Advantage
			}
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 64<<20)
		lines := 0
		for sc.Scan() {
			var smp projections.Sample
			if err := json.Unmarshal(sc.Bytes(), &smp); err != nil {
				t.Fatalf("sample line: %v", err)
			}
			if a, ok := adv[smp.Attempt]; !ok || a != smp.Advantage {
				t.Errorf("sample of %s: advantage %v, manifest %v (present %v)", smp.Attempt, smp.Advantage, a, ok)
			}
			lines++
		}
		if lines != st.SampleLines || lines < len(adv) {
			t.Errorf("batch %d: %d sample lines, trainer saw %d, attempts %d", st.Step, lines, st.SampleLines, len(adv))
		}
		// The same samples as Arrow IPC: read back into the canonical
		// form, they render as the NDJSON served, and the manifest
		// without its digest followed by them hashes to the digest.
		ndjson := body
		code, body, hdr := getAccept(t, fmt.Sprintf("%s/v1/runs/%s/batches/%d/samples", s.URL(), run, st.Step), "application/vnd.apache.arrow.stream")
		if code != 200 || hdr.Get("Content-Type") != "application/vnd.apache.arrow.stream" || hdr.Get("Vary") != "Accept" {
			t.Fatalf("arrow samples %d: %d %s (Vary %q)", st.Step, code, hdr.Get("Content-Type"), hdr.Get("Vary"))
		}
		canonical, meta := canonicalOfArrow(t, body)
		if want := map[string]string{"run": run, "seq": fmt.Sprint(st.Step), "digest": m.Digest, "rule_version": fmt.Sprint(projections.RuleVersion)}; !maps.Equal(meta, want) {
			t.Errorf("arrow metadata %v, want %v", meta, want)
		}
		rendered, err := projections.SamplesNDJSON(canonical)
		if err != nil || !bytes.Equal(rendered, ndjson) {
			t.Errorf("batch %d: the Arrow samples render as %d bytes of NDJSON (%v), the NDJSON served is %d", st.Step, len(rendered), err, len(ndjson))
		}
		_, manifest := get(t, fmt.Sprintf("%s/v1/runs/%s/batches/%d", s.URL(), run, st.Step))
		cut := bytes.LastIndex(manifest, []byte(`,"digest":`))
		sum := sha256.Sum256(append(append(manifest[:cut:cut], '}'), canonical...))
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != m.Digest {
			t.Errorf("batch %d: digest of the manifest and the Arrow samples %s, manifest says %s", st.Step, got, m.Digest)
		}
	}

	var status struct {
		FactsFolded   uint64 `json:"facts_folded"`
		BatchesSealed uint64 `json:"batches_sealed"`
		TasksAdmitted uint64 `json:"tasks_admitted"`
		TasksRejected uint64 `json:"tasks_rejected"`
	}
	// facts_folded reaches every record of the run on the facts topic
	// once the projector has caught up.
	logged := uint64(len(ledgertest.Facts(t, kc)[run]))
	var body []byte
	testenv.CheckFor(t, 3*time.Minute, "the projector folds every fact of the run", func() bool {
		_, body = get(t, s.URL()+"/v1/runs/"+run+"/status")
		_ = json.Unmarshal(body, &status)
		return status.FactsFolded >= logged
	})
	if status.FactsFolded != logged || status.BatchesSealed < 3 || status.TasksAdmitted+status.TasksRejected != 24 {
		t.Errorf("status: %s, want all %d facts folded, >= 3 batches and 24 admission decisions", body, logged)
	}
	_, body = get(t, s.URL()+"/v1/runs")
	if !strings.Contains(string(body), `"run":"`+run+`"`) {
		t.Errorf("runs: %s does not list %s", body, run)
	}

	// A task's admission, and refusals that name what was wrong.
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/runs/" + run + "/tasks/no-such-task", 200, `"decision":"pending"`},
		{"/v1/runs/" + run + "/batches/99", 404, `"code":"not_found"`},
		{"/v1/runs/" + run + "/batches/0", 400, `"code":"invalid_value"`},
		{"/v1/runs/" + run + "/batches/next?after=x", 400, `"code":"invalid_value"`},
		{"/v1/runs/" + run + "/batches/next?after=0&wait=1h", 400, `"code":"invalid_value"`},
		{"/v1/runs/..%2Fetc/status", 400, `"code":"invalid_value"`},
		{"/v1/nothing", 404, `"code":"not_found"`},
	} {
		code, body := get(t, s.URL()+c.path)
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s: got %d %s, want %d with %s", c.path, code, body, c.code, c.want)
		}
	}
	// Every task's admission is the one the generator's probes imply.
	admitted := 0
	for _, task := range plan.Tasks {
		_, body := get(t, fmt.Sprintf("%s/v1/runs/%s/tasks/%s", s.URL(), run, task.Task))
		var d struct {
			Decision string
			Probes   int
			Passes   int
		}
		_ = json.Unmarshal(body, &d)
		want := "rejected"
		if task.Admitted {
			want = "admitted"
			admitted++
		}
		if d.Decision != want || d.Probes != task.Probes || d.Passes != task.ProbePasses {
			t.Errorf("task %s: got %s, want %s with %d/%d probes passed", task.Task, body, want, task.ProbePasses, task.Probes)
		}
	}
	// A client that escapes the slash reaches the same task.
	first := plan.Tasks[0].Task
	if code, body := get(t, s.URL()+"/v1/runs/"+run+"/tasks/"+strings.ReplaceAll(first, "/", "%2F")); code != 200 || !strings.Contains(string(body), `"task":"`+first+`"`) {
		t.Errorf("escaped task id: got %d %s", code, body)
	}
	if uint64(admitted) != status.TasksAdmitted {
		t.Errorf("%d tasks admitted by the plan, status says %d", admitted, status.TasksAdmitted)
	}
}
