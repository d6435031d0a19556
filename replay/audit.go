package replay

import (
	"context"

	"github.com/rolloutledger/rolloutledger/projections"
)

// Audit replays src once: it verifies every decision and head (as
// [Verify]) and runs the audit projection over the facts and the
// recomputed decisions. The report's tree is the final head recomputed.
func Audit(ctx context.Context, src Source, o VerifyOptions) (*projections.AuditReport, *Report, error) {
	o.Audit = projections.NewAudit(src.Run())
	rep, err := Verify(ctx, src, o)
	if err != nil {
		return nil, nil, err
	}
	r := o.Audit.Report()
	r.Tree = rep.Head
	return &r, rep, nil
}
