package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// attempt answers GET /v1/runs/{run}/attempts/{attempt}?wait=D: what the
// ledger knows of an attempt, read after the projector has folded every
// fact of the run the log held when the request arrived (docs/design.md
// §15.4). A recording proxy in strict mode asks it before an attempt's
// first turn; a scheduler can ask it too.
//
//   - 200 and the attempt when a fact named it (started, or not started
//     though every fact of the run the log held is folded);
//   - 404 not_found when no fact of the log names it;
//   - 503 projector_behind, with Retry-After, when the projector had not
//     folded that far within wait (default 10s): the answer is not known
//     yet, which is not "unknown".
func (s *Service) attempt(w http.ResponseWriter, r *http.Request) {
	run, ok := runParam(w, r)
	if !ok {
		return
	}
	attempt, ok := entityParam(w, r, "attempt", "an attempt id")
	if !ok {
		return
	}
	wait, ok := waitParam(w, r.URL.Query().Get("wait"), 10*time.Second)
	if !ok {
		return
	}
	a, err := s.Projector.WaitAttempt(r.Context(), run, attempt, wait)
	if errors.Is(err, context.Canceled) {
		return // the request ended: no one is waiting for an answer
	}
	if errors.Is(err, projector.ErrLogUnreachable) {
		if s.Logger != nil {
			s.Logger.Warn("attempt lookup: the log's end is unknown", "run", run, "err", err)
		}
		w.Header().Set("Retry-After", "5")
		httpx.WriteError(w, http.StatusServiceUnavailable, "kafka_unreachable", "the ledger cannot read the log's end now; ask again")
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	switch {
	case a.Found && (a.View.Started || a.CaughtUp):
		httpx.WriteJSON(w, http.StatusOK, a.View)
	case a.CaughtUp:
		httpx.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no fact of run %s names attempt %s", run, attempt))
	default:
		w.Header().Set("Retry-After", "5")
		httpx.WriteError(w, http.StatusServiceUnavailable, "projector_behind",
			fmt.Sprintf("the projector has not yet folded every fact of run %s that the log held when asked; ask again", run))
	}
}
