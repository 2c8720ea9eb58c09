package realtime

import "sync"

// queue is a subscription's bounded FIFO of dispatched changes. It holds
// memory only for what is queued: most subscriptions are idle most of the
// time, and a channel of QueueSize items would cost every one of them the
// whole bound up front (16 KiB at the default).
type queue struct {
	max   int
	ready chan struct{} // one pending signal: items were added

	mu    sync.Mutex
	items []item
	head  int // items[head:] are queued
}

func newQueue(max int) *queue {
	return &queue{max: max, ready: make(chan struct{}, 1)}
}

// shrinkCap is the capacity above which an emptied queue gives its buffer
// back instead of keeping it for the next burst.
const shrinkCap = 64

// push queues it; false when the queue holds max items already. It never
// blocks.
func (q *queue) push(it item) bool {
	q.mu.Lock()
	if len(q.items)-q.head >= q.max {
		q.mu.Unlock()
		return false
	}
	if len(q.items) == cap(q.items) && q.head > 0 {
		// A consumer that never empties the queue would otherwise grow the
		// slice without bound behind head: reuse the popped prefix first.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default: // a signal is pending already
	}
	return true
}

// pop takes the oldest item; ok is false when the queue is empty.
func (q *queue) pop() (it item, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return item{}, false
	}
	it = q.items[q.head]
	q.items[q.head] = item{} // let the change be collected
	q.head++
	if q.head == len(q.items) {
		q.resetLocked()
	}
	return it, true
}

// len is the number of queued items.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}

// drain drops every queued item.
func (q *queue) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.items[q.head:])
	q.resetLocked()
}

func (q *queue) resetLocked() {
	q.head = 0
	if cap(q.items) > shrinkCap {
		q.items = nil
	} else {
		q.items = q.items[:0]
	}
}
