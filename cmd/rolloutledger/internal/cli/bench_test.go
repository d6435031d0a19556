package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/internal/testenv"
)

// A mistyped figure group is refused before anything runs, naming it.
func TestBenchRefusesUnknownGroup(t *testing.T) {
	code, out, errb := runMain("bench", "--only", "ingest,speed", "--brokers", "127.0.0.1:1")
	if code != 2 {
		t.Fatalf("exit %d, want 2 (stdout %q, stderr %q)", code, out, errb)
	}
	if !strings.Contains(errb, `unknown figure group "speed"`) {
		t.Errorf("stderr %q does not name the unknown group", errb)
	}
}

// bench --json prints a report whose figures carry the command that
// reproduces them.
func TestBenchJSON(t *testing.T) {
	kc := testenv.RealKafka(t)
	code, out, errb := runMain("bench", "--short", "--json", "--only", "projection", "--brokers", strings.Join(kc.Brokers, ","))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	var rep struct {
		Short   bool `json:"short"`
		Figures []struct {
			Name    string    `json:"name"`
			Runs    []float64 `json:"runs"`
			Command string    `json:"command"`
		} `json:"figures"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !rep.Short || len(rep.Figures) != 3 {
		t.Fatalf("got %+v, want the short report of the 3 projection figures", rep)
	}
	for _, f := range rep.Figures {
		if len(f.Runs) != 1 || !strings.Contains(f.Command, "rolloutledger bench --only projection --short") {
			t.Errorf("figure %+v", f)
		}
	}
}
