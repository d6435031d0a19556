package replay

import (
	"context"
	"errors"
)

// ExportOptions tune [Export].
type ExportOptions struct {
	// OnFact and OnDecision, when set, are called after each fact and
	// decision is written: progress for long exports.
	OnFact     func(Fact)
	OnDecision func(Recorded)
}

// skipper is a Source that leaves records out, as the Kafka source does.
type skipper interface{ Skipped() []Skipped }

// Export writes src's history — its facts with their positions, its
// recorded decisions, the leaf index and a manifest — to an archive at
// path. The archive appears only once complete.
func Export(ctx context.Context, src Source, path string, o ExportOptions) (ArchiveManifest, error) {
	w, err := CreateArchive(path, src.Run(), src.Describe())
	if err != nil {
		return ArchiveManifest{}, err
	}
	err = src.Facts(ctx, func(f Fact) error {
		if err := w.AddFact(f); err != nil {
			return err
		}
		if o.OnFact != nil {
			o.OnFact(f)
		}
		return nil
	})
	if s, ok := src.(skipper); ok && err == nil {
		w.SetSkipped(s.Skipped())
	}
	if err == nil {
		err = src.Decisions(ctx, func(r Recorded) error {
			if err := w.AddDecision(r); err != nil {
				return err
			}
			if o.OnDecision != nil {
				o.OnDecision(r)
			}
			return nil
		})
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		w.Abort()
		return ArchiveManifest{}, errors.Join(errors.New("replay: export failed"), err)
	}
	return w.Close()
}
