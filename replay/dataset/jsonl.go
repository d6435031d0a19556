package dataset

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func fileOf(rel, table string, rows int64, b []byte) File {
	sum := sha256.Sum256(b)
	return File{Path: rel, Table: table, Rows: rows, Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// writeJSONL writes one JSON line per attempt of runs to path, beside it
// first, then renamed into place.
func writeJSONL(path, kind string, runs []*Run, line func(*Run, *Attempt) (any, error)) (File, error) {
	tmp, err := createBeside(path)
	if err != nil {
		return File{}, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var rows int64
lines:
	for _, r := range runs {
		r.scattered = true
		for a, aerr := range r.EachAttempt() {
			if err = aerr; err != nil {
				break lines
			}
			if err = r.trajectory(a); err != nil {
				break lines
			}
			var v any
			v, err = line(r, a)
			a.turns, a.calls = nil, nil
			if err != nil {
				break lines
			}
			if err = enc.Encode(v); err != nil {
				break lines
			}
			rows++
		}
	}
	if err == nil {
		err = spillErr(runs)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err := commitFile(tmp, path, err); err != nil {
		return File{}, err
	}
	return File{Path: filepath.Base(path), Table: kind, Rows: rows, Bytes: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// callID is a tool call's id in the chat formats: unique within the run.
func callID(c *ToolCall) string { return fmt.Sprintf("%s#%d.%d", c.Attempt, c.Turn, c.Call) }

// callsByTurn groups an attempt's tool calls by turn index.
func callsByTurn(a *Attempt) map[int][]*ToolCall {
	m := map[int][]*ToolCall{}
	for _, c := range a.calls {
		m[c.Turn] = append(m[c.Turn], c)
	}
	return m
}

// outcome is what the history says about an attempt's result, for the
// metadata of the chat formats.
type outcome struct {
	Run           string   `json:"run"`
	Task          string   `json:"task"`
	Group         string   `json:"group"`
	Attempt       string   `json:"attempt"`
	Purpose       string   `json:"purpose,omitempty"`
	Outcome       string   `json:"outcome,omitempty"`
	FailureReason string   `json:"failure_reason,omitempty"`
	Passed        *bool    `json:"passed"`
	TestsPassed   *int     `json:"tests_passed,omitempty"`
	TestsTotal    *int     `json:"tests_total,omitempty"`
	Batch         *uint64  `json:"batch_seq"`
	Score         *float64 `json:"score"`
	Bonus         *float64 `json:"bonus"`
	Reward        *float64 `json:"reward"`
	Advantage     *float64 `json:"advantage"`
	TrainedShare  *float64 `json:"trained_share"`
	DropReason    string   `json:"drop_reason,omitempty"`
	PromptCut     int64    `json:"prompt_cut,omitempty"`
	LedgerHead    string   `json:"ledger_head"`
}

func outcomeOf(r *Run, a *Attempt) outcome {
	o := outcome{Run: r.Run, Task: a.Task, Group: a.Group, Attempt: a.Attempt, Purpose: a.Purpose, Outcome: a.Outcome,
		FailureReason: a.FailureReason, DropReason: a.DropReason, LedgerHead: fmt.Sprintf("%d:%s", r.Head.Size, r.Head.Root)}
	if a.Rewarded {
		o.Passed, o.TestsPassed, o.TestsTotal = &a.Passed, &a.TestsPassed, &a.TestsTotal
	}
	if a.Batch > 0 {
		o.Batch, o.Score, o.Bonus, o.Reward, o.Advantage, o.TrainedShare = &a.Batch, &a.Score, &a.Bonus, &a.Reward, &a.Advantage, &a.TrainedShare
	}
	_, o.PromptCut = r.Prompt(a.Task)
	return o
}
