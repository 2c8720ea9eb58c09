package groupcommit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/loomdb/loom/collections"
)

type req struct {
	n int
	Call
}

func TestSubmitRefusesWhenClosedOrCancelled(t *testing.T) {
	var closed, abandon atomic.Bool
	q := New[*req](2, 0, &closed, &abandon)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Submit(ctx, &req{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v, want context.Canceled", err)
	}
	closed.Store(true)
	if err := q.Submit(context.Background(), &req{}); !errors.Is(err, collections.ErrClosed) {
		t.Errorf("closed queue: %v, want ErrClosed", err)
	}
}

// Batches take at most maxBatch requests; after Stop the queued requests
// are committed, or answered ErrClosed when abandoned.
func TestRunBatchesAndStop(t *testing.T) {
	for _, abandoned := range []bool{false, true} {
		var closed, abandon atomic.Bool
		abandon.Store(abandoned)
		q := New[*req](2, 0, &closed, &abandon)
		rs := make([]*req, 5)
		for i := range rs {
			rs[i] = &req{n: i, Call: Call{Done: make(chan struct{})}}
			q.C <- rs[i]
		}
		close(q.Stop)
		var sizes []int
		exited := false
		q.Run(func(b []*req) {
			sizes = append(sizes, len(b))
			for _, r := range b {
				close(r.Done)
			}
		}, func() { exited = true })
		<-q.Done
		if !exited {
			t.Error("exit not called")
		}
		// Stop and queued requests race in the loop's select, so some
		// batches may run before the Stop is seen: every request is
		// committed, or (abandoned) answered ErrClosed, never lost.
		committed := 0
		for _, n := range sizes {
			if n > 2 {
				t.Errorf("batches %v, want at most 2 requests each", sizes)
			}
			committed += n
		}
		dropped := 0
		for _, r := range rs {
			<-r.Done
			if r.Err != nil {
				if !abandoned || !errors.Is(r.Err, collections.ErrClosed) {
					t.Errorf("request %d: %v", r.n, r.Err)
				}
				dropped++
			}
		}
		if committed+dropped != len(rs) || !abandoned && dropped != 0 {
			t.Errorf("abandoned=%v: %d committed, %d dropped of %d", abandoned, committed, dropped, len(rs))
		}
	}
}
