// Package recorded builds the run explorer's model of a recorded history,
// an archive or the topics as replay reads them, for the static bundle of
// `rolloutledger explore` (docs/design.md §15.7). It is apart from package
// explore because replay's tests start the whole stack, which serves the
// explorer: explore itself must not import replay.
package recorded

import (
	"context"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/replay"
	"github.com/rolloutledger/rolloutledger/services/explore"
)

// Load builds the model of a recorded history: an archive or the topics
// as [replay.Source] reads them.
func Load(ctx context.Context, src replay.Source) (*explore.Model, error) {
	m := explore.NewModel(src.Run())
	err := src.Facts(ctx, func(f replay.Fact) error {
		ev := f.Event
		if ev.Type == "" {
			var err error
			if ev, err = events.Decode(f.Value); err != nil {
				return nil // the fold skips what does not decode; so does the model
			}
		}
		m.Fact(f.Partition, f.Offset, f.Value, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = src.Decisions(ctx, func(r replay.Recorded) error { return m.Decision(r.Value) })
	return m, err
}
