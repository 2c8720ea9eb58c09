package realtime

import (
	"testing"

	"github.com/loomdb/loom/collections"
)

func TestQueue_BoundedFIFOWithSignal(t *testing.T) {
	q := newQueue(3)
	if _, ok := q.pop(); ok {
		t.Fatal("pop on an empty queue")
	}
	for i := int64(1); i <= 3; i++ {
		if !q.push(item{c: &Change{Change: collections.Change{Seq: i}}}) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if q.push(item{c: &Change{Change: collections.Change{Seq: 4}}}) {
		t.Fatal("push beyond the bound accepted")
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no ready signal after pushes")
	}
	for want := int64(1); want <= 3; want++ {
		it, ok := q.pop()
		if !ok || it.c.Seq != want {
			t.Fatalf("pop = %v %v, want seq %d", it.c, ok, want)
		}
	}
	if q.len() != 0 {
		t.Fatalf("len %d after popping everything", q.len())
	}
	// Room again after popping.
	if !q.push(item{c: &Change{Change: collections.Change{Seq: 5}}}) {
		t.Fatal("push refused after the queue emptied")
	}
	q.drain()
	if _, ok := q.pop(); ok || q.len() != 0 {
		t.Fatal("drain left items")
	}
}

// An idle subscription holds no queue buffer, and a burst's buffer is
// given back once it is consumed.
func TestQueue_HoldsMemoryOnlyForItsBacklog(t *testing.T) {
	q := newQueue(DefaultQueueSize)
	if cap(q.items) != 0 {
		t.Fatalf("new queue holds %d items of buffer", cap(q.items))
	}
	for i := range 1000 {
		q.push(item{c: &Change{Change: collections.Change{Seq: int64(i)}}})
	}
	for {
		if _, ok := q.pop(); !ok {
			break
		}
	}
	if cap(q.items) > shrinkCap {
		t.Fatalf("emptied queue keeps a buffer of %d items", cap(q.items))
	}
}

// A consumer that keeps one item queued at all times never empties the
// queue: its buffer must stay bounded all the same.
func TestQueue_BufferBoundedWhenNeverEmptied(t *testing.T) {
	const max = 8
	q := newQueue(max)
	q.push(item{c: &Change{Change: collections.Change{Seq: 0}}})
	for i := int64(1); i <= 100000; i++ {
		if !q.push(item{c: &Change{Change: collections.Change{Seq: i}}}) {
			t.Fatalf("push %d refused with one item queued", i)
		}
		it, ok := q.pop()
		if !ok || it.c.Seq != i-1 {
			t.Fatalf("pop = %v %v, want seq %d", it.c, ok, i-1)
		}
	}
	if c := cap(q.items); c > 4*max {
		t.Fatalf("queue of at most %d items holds a buffer of %d", max, c)
	}
}

// The bound counts what is queued, not what was popped: a full queue that
// gave one item to its consumer takes one more.
func TestQueue_RoomAfterPartialPop(t *testing.T) {
	q := newQueue(4)
	for i := int64(1); i <= 4; i++ {
		if !q.push(item{c: &Change{Change: collections.Change{Seq: i}}}) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	for want := int64(1); want <= 2; want++ {
		if it, ok := q.pop(); !ok || it.c.Seq != want {
			t.Fatalf("pop = %v %v, want seq %d", it.c, ok, want)
		}
	}
	if n := q.len(); n != 2 {
		t.Fatalf("len %d after popping 2 of 4, want 2", n)
	}
	for i := int64(5); i <= 6; i++ {
		if !q.push(item{c: &Change{Change: collections.Change{Seq: i}}}) {
			t.Fatalf("push %d refused with %d of 4 items queued", i, q.len())
		}
	}
	if n := q.len(); n != 4 {
		t.Fatalf("len %d, want 4", n)
	}
	if q.push(item{c: &Change{Change: collections.Change{Seq: 7}}}) {
		t.Fatal("push beyond the bound accepted after a partial pop")
	}
	for want := int64(3); want <= 6; want++ {
		if it, ok := q.pop(); !ok || it.c.Seq != want {
			t.Fatalf("pop = %v %v, want seq %d", it.c, ok, want)
		}
	}
}
