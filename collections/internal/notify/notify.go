// Package notify holds the change-log broadcaster the storage engines share:
// a channel that is closed and replaced on every wake, so any number of
// waiters learn of the next commit without registering.
package notify

import "sync"

// Broadcaster hands out the channel the next Wake closes. The zero value is
// ready to use; it must not be copied after first use.
type Broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

// C returns a channel closed by the next Wake.
func (b *Broadcaster) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Wake closes the channel of every current waiter and starts a new one.
func (b *Broadcaster) Wake() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
	}
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
