package groupcommit

import (
	"context"
	"sync/atomic"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/internal/lifecycle"
)

// Call is the part of an engine's request the queue handles; requests
// embed it.
type Call struct {
	// Size estimates the bytes the request writes; a Queue with MaxBytes
	// bounds a batch by it.
	Size int
	Err  error
	Done chan struct{} // closed when the request is answered
}

func (c *Call) call() *Call { return c }

// Request is an engine's request type (a pointer to a struct embedding
// Call).
type Request interface{ call() *Call }

// Queue hands requests to one committer goroutine, which runs as many as
// are waiting in one transaction.
type Queue[R Request] struct {
	C    chan R        // requests waiting for the committer
	Stop chan struct{} // closed by Close / crash
	Done chan struct{} // closed when the committer exits

	maxBatch int // requests in one batch
	maxBytes int // Size of a batch beyond its first request; 0: unbounded

	closed  *atomic.Bool // set by Close / crash: Submit refuses
	abandon *atomic.Bool // set by crash: the committer drops queued work
}

// New returns a queue of 4*maxBatch slots whose batches take at most
// maxBatch requests and, when maxBytes > 0, beyond the first about maxBytes
// of Size. closed and abandon are the store's flags.
func New[R Request](maxBatch, maxBytes int, closed, abandon *atomic.Bool) *Queue[R] {
	return &Queue[R]{
		C:        make(chan R, 4*maxBatch),
		Stop:     make(chan struct{}),
		Done:     make(chan struct{}),
		maxBatch: maxBatch,
		maxBytes: maxBytes,
		closed:   closed,
		abandon:  abandon,
	}
}

// Submit hands r to the committer and waits for its outcome. When ctx ends
// first the caller gets ctx.Err(); the request may still commit, which is
// the documented contract of Store.Commit.
func (q *Queue[R]) Submit(ctx context.Context, r R) error {
	if err := lifecycle.Begin(ctx, q.closed); err != nil {
		return err
	}
	c := r.call()
	c.Done = make(chan struct{})
	select {
	case q.C <- r:
	case <-q.Stop:
		return collections.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.Done:
		return c.Err
	case <-ctx.Done():
		return ctx.Err()
	case <-q.Done:
		// The committer exited; r was either finished before that or was
		// never taken from the queue.
		select {
		case <-c.Done:
			return c.Err
		default:
			return collections.ErrClosed
		}
	}
}

func (q *Queue[R]) full(n, size int) bool {
	return n >= q.maxBatch || q.maxBytes > 0 && size >= q.maxBytes
}

// Run is the committer loop: take one request, drain whatever else is
// queued (up to the batch bounds), run them all (commit, which answers
// every request by closing its Done), repeat. After Stop it commits what is
// already queued (crash drops it, answering ErrClosed), calls exit when it
// is not nil, and closes Done.
func (q *Queue[R]) Run(commit func([]R), exit func()) {
	defer close(q.Done)
	if exit != nil {
		defer exit()
	}
	batch := make([]R, 0, q.maxBatch)
	var next R // taken from the queue but left for the next batch
	hasNext := false
	for {
		batch = batch[:0]
		size := 0
		if hasNext {
			batch, size, hasNext = append(batch, next), next.call().Size, false
		} else {
			select {
			case r := <-q.C:
				batch, size = append(batch, r), r.call().Size
			case <-q.Stop:
				// Close commits what is already queued; crash drops it.
				for {
					select {
					case r := <-q.C:
						c := r.call()
						if q.abandon.Load() {
							c.Err = collections.ErrClosed
							close(c.Done)
							continue
						}
						if len(batch) > 0 && q.full(len(batch), size+c.Size) {
							commit(batch)
							batch, size = batch[:0], 0
						}
						batch, size = append(batch, r), size+c.Size
						continue
					default:
					}
					break
				}
				if len(batch) > 0 {
					commit(batch)
				}
				return
			}
		}
	drain:
		for !q.full(len(batch), size) {
			select {
			case r := <-q.C:
				if q.full(len(batch), size+r.call().Size) {
					next, hasNext = r, true
					break drain
				}
				batch, size = append(batch, r), size+r.call().Size
			default:
				break drain
			}
		}
		commit(batch)
	}
}
