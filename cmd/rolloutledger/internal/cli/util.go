package cli

import (
	"context"
	"time"
)

// contextWithTimeout is for shutdown work, which must run even though the
// command's own context is already cancelled by the signal.
func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
