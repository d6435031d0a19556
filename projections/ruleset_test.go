package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// ruleSet is what one rule version pins: the defaults every run that leaves
// a setting out takes, and the bytes the golden run's decisions have. A
// build that changes either without a new RuleVersion would fold an old
// run differently under the version the run recorded (docs/design.md §10).
type ruleSet struct {
	RuleVersion int           `json:"rule_version"`
	Defaults    events.Config `json:"defaults"`
	// GoldenDecisions is the SHA-256 of the golden run's decisions, one
	// value a line (testdata/golden/decisions.ndjson).
	GoldenDecisions string `json:"golden_decisions"`
}

// TestRuleSetPinned holds this build to testdata/golden/ruleset-vN.json of
// its rule version. -update writes the file of a new version, never
// rewrites an existing one: a change of defaults or of decision bytes is a
// new RuleVersion.
func TestRuleSetPinned(t *testing.T) {
	var all bytes.Buffer
	for _, d := range goldenRun(t).fold() {
		all.Write(d.Value)
		all.WriteByte('\n')
	}
	sum := sha256.Sum256(all.Bytes())
	got, err := json.MarshalIndent(ruleSet{RuleVersion: RuleVersion, Defaults: events.DefaultConfig(), GoldenDecisions: hex.EncodeToString(sum[:])}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "golden", fmt.Sprintf("ruleset-v%d.json", RuleVersion))
	want, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%v (a new rule version: run go test -update to pin it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("this build's rule set differs from the one pinned for rule version %d: bump projections.RuleVersion "+
			"and pin the new version with go test -update (an existing ruleset file is never rewritten)\n%s", RuleVersion, firstLineDiff(got, want))
	}
}
