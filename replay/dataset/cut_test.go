package dataset

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// Cuts a producer made to fit text into a fact (docs/design.md §4.3): the
// first turn's text, the first tool call's input and output, every prompt.
const (
	promptCut = 100
	textCut   = 4096
	inputCut  = 7
	outputCut = 2048
)

func withCuts(ev *events.Event) {
	withText(ev)
	switch d := ev.Data.(type) {
	case *events.TurnGenerated:
		if d.Turn == 0 {
			d.TextCut = textCut
		}
	case *events.ToolCalled:
		if d.Turn == 0 && d.Call == 0 {
			d.InputCut, d.OutputCut = inputCut, outputCut
			d.OutputBytes = max(d.OutputBytes, int64(len(d.Output))+outputCut)
		}
	case *events.TaskRegistered:
		d.PromptCut = promptCut
	}
}

// cutSource is textRun with withCuts applied.
func cutSource(t *testing.T, run string) *memSource {
	t.Helper()
	return planSourceWith(t, textRun, run, withCuts)
}

// jsonLines reads a JSONL file.
func jsonLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// Someone fine-tuning on a chat export must see where text was cut, and
// by how many bytes: the prompt, each turn's text, each tool's input and
// output.
func TestMessagesMarkCuts(t *testing.T) {
	src := cutSource(t, "cut-msg")
	res := exportTo(t, src, FormatMessages, filepath.Join(t.TempDir(), "m.jsonl"))
	type msg struct {
		Role       string
		ContentCut int64 `json:"content_cut"`
		ToolCalls  []struct {
			ID       string
			InputCut int64 `json:"input_cut"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	}
	var got, want struct{ prompt, text, input, output, uncut int }
	for _, l := range jsonLines[struct{ Messages []msg }](t, res.Out) {
		firstCall := ""
		for i, m := range l.Messages {
			switch {
			case m.Role == "user":
				want.prompt++
				if m.ContentCut == promptCut {
					got.prompt++
				}
			case m.Role == "assistant":
				if i == 1 {
					want.text++
					if m.ContentCut == textCut {
						got.text++
					}
				} else if m.ContentCut != 0 {
					got.uncut++
				}
				for _, c := range m.ToolCalls {
					if strings.HasSuffix(c.ID, "#0.0") {
						firstCall = c.ID
						want.input++
						if c.InputCut == inputCut {
							got.input++
						}
					} else if c.InputCut != 0 {
						got.uncut++
					}
				}
			case m.Role == "tool":
				if m.ToolCallID == firstCall {
					want.output++
					if m.ContentCut == outputCut {
						got.output++
					}
				} else if m.ContentCut != 0 {
					got.uncut++
				}
			}
		}
	}
	if want.prompt == 0 || want.text == 0 || want.input == 0 {
		t.Fatalf("the run has %+v places to cut: too few to test", want)
	}
	if got != want {
		t.Errorf("cuts marked %+v, want %+v (uncut text marked nowhere)", got, want)
	}
}

// ATIF marks the prompt's, a turn's and each tool call's cuts on their
// step.
func TestATIFMarksCuts(t *testing.T) {
	src := cutSource(t, "cut-atif")
	res := exportTo(t, src, FormatATIF, filepath.Join(t.TempDir(), "a.jsonl"))
	type step struct {
		Extra struct {
			PromptCut int64 `json:"prompt_cut"`
			TextCut   int64 `json:"text_cut"`
			Turn      int
			ToolCuts  []atifToolCut `json:"tool_cuts"`
		}
		ToolCalls []struct {
			ID string `json:"tool_call_id"`
		} `json:"tool_calls"`
	}
	trs := jsonLines[struct{ Steps []step }](t, res.Out)
	calls := 0
	for _, tr := range trs {
		if tr.Steps[0].Extra.PromptCut != promptCut {
			t.Fatalf("step 1 extra %+v: want prompt_cut %d", tr.Steps[0].Extra, promptCut)
		}
		for _, s := range tr.Steps[1:] {
			if s.Extra.Turn == 0 && s.Extra.TextCut != textCut || s.Extra.Turn != 0 && s.Extra.TextCut != 0 {
				t.Fatalf("turn %d: text_cut %d", s.Extra.Turn, s.Extra.TextCut)
			}
			var want []atifToolCut
			for _, c := range s.ToolCalls {
				if strings.HasSuffix(c.ID, "#0.0") {
					want = []atifToolCut{{ToolCallID: c.ID, InputCut: inputCut, OutputCut: outputCut}}
					calls++
				}
			}
			if len(s.Extra.ToolCuts) != len(want) || len(want) == 1 && s.Extra.ToolCuts[0] != want[0] {
				t.Fatalf("turn %d: tool_cuts %+v, want %+v", s.Extra.Turn, s.Extra.ToolCuts, want)
			}
		}
	}
	if calls == 0 {
		t.Fatal("no first turn with a tool call: nothing tested")
	}
}
