package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
)

// The demo's step table ends with the turns that span a weight update and
// are only partly trained, and the tokens masked by segment.
func TestPrintStepsPartlyTrained(t *testing.T) {
	steps := []simulate.TrainerStep{
		{Step: 1, Groups: 8, Turns: 100, TrainedTurns: 100, TrainedTokens: 9000, MaskedTokens: 0},
		{Step: 2, Groups: 8, Turns: 100, TrainedTurns: 90, PartlyTrainedTurns: 3, TrainedTokens: 8000, MaskedTokens: 1000},
	}
	var out bytes.Buffer
	printSteps(&out, steps)
	want := "turns partly trained: 3 (they span a weight update; only their stale version segments are masked); tokens masked by segment: 1000 of 18000 (5.6%)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("got\n%s\nwant a line with %q", out.String(), want)
	}
}
