// Package lifecycle holds the open/closed checks the storage engines share.
package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/loomdb/loom/collections"
)

// Begin checks the context and that the store is open (closed not set).
func Begin(ctx context.Context, closed *atomic.Bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if closed.Load() {
		return collections.ErrClosed
	}
	return nil
}

// RacedClose reports whether err, of an operation that began while the store
// was open, is due to Close (the store is closed and the caller's context
// did not end): the operation then reports ErrClosed.
func RacedClose(closed *atomic.Bool, err error) bool {
	return closed.Load() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
