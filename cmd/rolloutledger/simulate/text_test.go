package simulate

import (
	"reflect"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// A version 2 run has turns spanning a weight update, and its text is
// bounded with the rest counted; text changes nothing else; a version 1
// run has neither.
func TestVersionSegmentsAndText(t *testing.T) {
	o := Options{Seed: 11, Tasks: 12, Steps: 3, BatchGroups: 2, MaxTurns: 40}
	withText := o
	withText.Text = true
	plain, err := Generate(o, "r")
	if err != nil {
		t.Fatal(err)
	}
	text, err := Generate(withText, "r")
	if err != nil {
		t.Fatal(err)
	}
	a, b := plain.All(), text.All()
	if len(a) != len(b) {
		t.Fatalf("%d events without text, %d with", len(a), len(b))
	}
	spanning, cut := 0, 0
	for i := range b {
		if b[i].V != min(events.CurrentVersion(b[i].Type), 2) {
			t.Fatalf("event %d: %s version %d, want the newest up to 2", i, b[i].Type, b[i].V)
		}
		if _, err := events.Encode(b[i]); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		switch d := b[i].Data.(type) {
		case *events.TurnGenerated:
			if len(d.VersionSegments) > 1 {
				spanning++
			}
			if d.Text == "" || len(d.Text) > textBound || int64(len(d.Text))+d.TextCut < d.CompletionTokens*bytesPerToken {
				t.Errorf("turn %s/%d: %d B of text and %d cut for %d tokens", d.Attempt, d.Turn, len(d.Text), d.TextCut, d.CompletionTokens)
			}
			c := *d
			c.Text, c.TextCut = "", 0
			if !reflect.DeepEqual(&c, a[i].Data) {
				t.Fatalf("event %d differs beyond its text:\n%+v\n%+v", i, &c, a[i].Data)
			}
		case *events.ToolCalled:
			if d.Input == "" || len(d.Output) > textBound || int64(len(d.Output))+d.OutputCut != d.OutputBytes {
				t.Errorf("tool call %s/%d/%d: input %q, %d B of output and %d cut of %d", d.Attempt, d.Turn, d.Call, d.Input, len(d.Output), d.OutputCut, d.OutputBytes)
			}
			if d.OutputCut > 0 {
				cut++
			}
		case *events.TaskRegistered:
			if d.Prompt == "" || len(d.Prompt) > textBound {
				t.Errorf("task %s: %d B of prompt", d.Task, len(d.Prompt))
			}
		}
	}
	if spanning == 0 || cut == 0 {
		t.Errorf("%d turns spanning a weight update and %d cut tool outputs, want some of each", spanning, cut)
	}

	v1 := o
	v1.FactVersion = 1
	old, err := Generate(v1, "r")
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range old.All() {
		if ev.V != 1 {
			t.Fatalf("event %d: version %d, want 1", i, ev.V)
		}
		if d, ok := ev.Data.(*events.TurnGenerated); ok && len(d.VersionSegments) != 1 {
			t.Fatalf("v1 turn %s/%d has segments %v", d.Attempt, d.Turn, d.VersionSegments)
		}
	}
	if err := (Options{FactVersion: 1, Text: true}).Validate(); err == nil {
		t.Error("text with version 1 facts was accepted")
	}
}
