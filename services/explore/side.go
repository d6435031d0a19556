package explore

import "github.com/rolloutledger/rolloutledger/events"

// SideView is a group's attempts side by side: each attempt's turns with
// their text and tool calls (no tokens), so the page can set them in
// columns and diff them turn by turn.
type SideView struct {
	Group    string        `json:"group"`
	Task     string        `json:"task"`
	State    string        `json:"state"`
	Attempts []SideAttempt `json:"attempts"`
}

// SideAttempt is one column of a [SideView].
type SideAttempt struct {
	AttemptRow
	TurnList []SideTurn `json:"turn_list"`
}

// SideTurn is a turn as the side-by-side view compares it.
type SideTurn struct {
	Turn             int                 `json:"turn"`
	Text             string              `json:"text"`
	TextCut          int64               `json:"text_cut,omitempty"`
	Finish           string              `json:"finish"`
	CompletionTokens int64               `json:"completion_tokens"`
	Tools            []events.ToolCalled `json:"tools"`
}
