package realtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loomdb/loom/collections"
)

// Request describes a subscription.
type Request struct {
	DB string
	// Query selects the result set: Collection (a concrete collection or a
	// pattern) and Filters; it must be normalized. Order, limit, cursor and
	// ShowDeleted are ignored.
	Query collections.Query
	// Resume starts the stream after the change-log position After instead
	// of at the current position.
	Resume bool
	After  int64
	// Snapshot first delivers every matching document (in pages), then the
	// changes after the snapshot. It takes precedence over Resume.
	Snapshot bool
	// Check reports whether the subscriber may read a document; nil allows
	// everything. It is called on the consumer's goroutine (in Next).
	Check func(ctx context.Context, d *collections.Document) (bool, error)
}

// Event is one item of a subscription's stream.
type Event struct {
	// Seq is the resume token: the change-log position the stream has
	// reached with this event.
	Seq int64
	// Type is the change relative to the result set as the subscriber may
	// see it (Request.Check): create (entered), update (changed, still
	// matching) or delete (left). Empty for a snapshot page.
	Type collections.ChangeOp
	// Change is the underlying change (Op is the write); nil for a
	// snapshot page. Change.Before matched the query unless Type is create.
	Change *Change
	// Snapshot is one page of the snapshot; More is true when more pages
	// follow.
	Snapshot []*collections.Document
	More     bool
}

// IsSnapshot reports whether e is a snapshot page.
func (e *Event) IsSnapshot() bool { return e.Change == nil }

// item is a dispatched change with its type for this subscription. The
// type is kept as a byte rather than a ChangeOp string: 16 bytes an item
// instead of 24 in a subscriber's backlog.
type item struct {
	c   *Change
	typ opByte
}

// opByte is a ChangeOp in one byte.
type opByte uint8

const (
	opByteCreate opByte = iota
	opByteUpdate
	opByteDelete
)

func opByteOf(op collections.ChangeOp) opByte {
	switch op {
	case collections.OpUpdate:
		return opByteUpdate
	case collections.OpDelete:
		return opByteDelete
	}
	return opByteCreate
}

func (b opByte) op() collections.ChangeOp {
	switch b {
	case opByteUpdate:
		return collections.OpUpdate
	case opByteDelete:
		return collections.OpDelete
	}
	return collections.OpCreate
}

// Subscription is one subscriber's stream. Next must be called from one
// goroutine at a time.
type Subscription struct {
	hub   *Hub
	db    string
	query collections.Query
	check func(ctx context.Context, d *collections.Document) (bool, error)
	start int64

	q    *queue
	done chan struct{} // closed (under hub.mu) when err is set

	// Guarded by hub.mu.
	err        error
	catching   bool // catching up from the store: an overflow re-arms instead of failing
	overflowed bool // dropped live events while catching up; regP must move
	regP       int64

	// Consumer state (Next's goroutine).
	scanned int64 // every change <= scanned has been considered
	given   int64 // the last token returned by Next
	pending []Event
	snap    *snapState
	skip    map[string]int64 // snapshot documents newer than the snapshot head
	skipMax int64
}

type snapState struct {
	head   int64
	cursor string
}

// Subscribe registers a subscription at the hub's dispatch position and
// returns it; its events come from Next.
func (h *Hub) Subscribe(ctx context.Context, req Request) (*Subscription, error) {
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	q := collections.Query{Collection: req.Query.Collection, Filters: req.Query.Filters}
	if req.Resume && !req.Snapshot {
		head, err := h.store.Head(ctx)
		if err != nil {
			return nil, fmt.Errorf("realtime: read head: %w", err)
		}
		// Head may trail the tailer by a moment (the log is readable
		// before the head counter moves): tokens up to either are real.
		if req.After > max(head, h.Position()) || req.After < 0 {
			return nil, ErrTokenAhead
		}
	}
	s := &Subscription{
		hub:      h,
		db:       req.DB,
		query:    q,
		check:    req.Check,
		q:        newQueue(h.queueSize),
		done:     make(chan struct{}),
		catching: true,
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	s.regP = h.pos
	h.registerLocked(s)
	h.mu.Unlock()

	switch {
	case req.Snapshot:
		// The snapshot reads at least everything up to head; changes after
		// head follow it (minus those the snapshot already shows).
		head, err := h.store.Head(ctx)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("realtime: read head: %w", err)
		}
		head = max(head, s.regP)
		s.scanned = head
		s.snap = &snapState{head: head}
	case req.Resume:
		s.scanned = req.After
	default:
		s.scanned = s.regP
	}
	s.given, s.start = s.scanned, s.scanned
	return s, nil
}

// Start is the position the stream starts after: the resume token, the
// snapshot's head, or the dispatch position at subscribe time.
func (s *Subscription) Start() int64 { return s.start }

// Close ends the subscription; Next then returns ErrClosed.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	s.failLocked(ErrClosed)
	s.hub.mu.Unlock()
}

func (s *Subscription) failLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
	s.hub.unregisterLocked(s)
}

// errSlow marks an overflow; Next turns it into *SlowConsumerError with the
// consumer's last token.
var errSlow = errors.New("realtime: queue overflow")

// offerLocked queues c if it changes the subscription's result set. It never
// blocks.
func (s *Subscription) offerLocked(c *Change) {
	if s.err != nil || s.overflowed {
		return
	}
	typ, ok := s.classify(&c.Change)
	if !ok {
		return
	}
	if !s.q.push(item{c, opByteOf(typ)}) {
		if s.catching {
			// The consumer is still reading the store; it will read these
			// changes from there too.
			s.overflowed = true
			return
		}
		s.failLocked(errSlow)
	}
}

// classify returns the change's type relative to the result set.
// System changes (the _triggers state, which holds signing secrets, is
// logged for the nodes to follow) never reach a subscription, not even an
// admin's that names the collection.
func (s *Subscription) classify(c *collections.Change) (collections.ChangeOp, bool) {
	if c.DB != s.db || collections.IsSystemPath(c.Path) {
		return "", false
	}
	bm := c.Before != nil && s.query.Matches(c.Before)
	am := c.After != nil && s.query.Matches(c.After)
	switch {
	case bm && am:
		return collections.OpUpdate, true
	case am:
		return collections.OpCreate, true
	case bm:
		return collections.OpDelete, true
	}
	return "", false
}

// failure returns the error that ended the subscription, if any.
func (s *Subscription) failure() error {
	select {
	case <-s.done:
		if s.err == errSlow {
			return &SlowConsumerError{Token: s.given}
		}
		return s.err
	default:
		return nil
	}
}

// Next returns the next event: snapshot pages first (when asked), then
// the changes from the store up to the registration position, then live
// changes. It returns *SlowConsumerError, ErrReset, ErrClosed, a Check or
// store error, or ctx's error; after an error other than ctx's the
// subscription is over.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	ev, _, err := s.next(ctx, true)
	return ev, err
}

// TryNext is Next without waiting for live changes: ok is false (and err
// nil) when no event is ready. It may still read the store (snapshot,
// catch-up) and call Check. A transport uses it to write every ready event
// before one flush.
func (s *Subscription) TryNext(ctx context.Context) (ev Event, ok bool, err error) {
	return s.next(ctx, false)
}

func (s *Subscription) next(ctx context.Context, block bool) (Event, bool, error) {
	for {
		if err := s.failure(); err != nil {
			return Event{}, false, err
		}
		if s.snap != nil {
			ev, err := s.nextSnapshot(ctx)
			if err != nil {
				return Event{}, false, s.end(err)
			}
			return ev, true, nil
		}
		if len(s.pending) > 0 {
			ev := s.pending[0]
			s.pending = s.pending[1:]
			s.given = ev.Seq
			return ev, true, nil
		}
		if s.catching {
			if err := s.catchUp(ctx); err != nil {
				return Event{}, false, s.end(err)
			}
			continue
		}
		if !block {
			select {
			case <-s.done:
				continue
			case <-ctx.Done():
				return Event{}, false, ctx.Err()
			default:
			}
		}
		if it, ok := s.q.pop(); ok {
			if it.c.Seq <= s.scanned {
				continue
			}
			s.scanned = it.c.Seq
			ev, ok, err := s.accept(ctx, it.c, it.typ.op())
			if err != nil {
				return Event{}, false, s.end(err)
			}
			if ok {
				s.given = ev.Seq
				return ev, true, nil
			}
			continue
		}
		if !block {
			return Event{}, false, nil
		}
		// A push after the pop above left its signal in ready: no wake-up
		// is lost.
		select {
		case <-s.q.ready:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, false, ctx.Err()
		}
	}
}

// end closes the subscription after err (unless err is the caller's
// cancellation, after which Next may be called again).
func (s *Subscription) end(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, collections.ErrPositionExpired) {
		err = ErrReset
	}
	s.hub.mu.Lock()
	s.failLocked(err)
	s.hub.mu.Unlock()
	return err
}

// accept applies the snapshot skip and the rules to a change of the result
// set.
func (s *Subscription) accept(ctx context.Context, c *Change, typ collections.ChangeOp) (Event, bool, error) {
	if s.skip != nil {
		if c.Seq > s.skipMax {
			s.skip = nil
		} else if seq, ok := s.skip[c.Path]; ok && seq >= c.Seq {
			return Event{}, false, nil // the snapshot already showed this state or a later one
		}
	}
	ev := Event{Seq: c.Seq, Type: typ, Change: c}
	if s.check == nil {
		return ev, true, nil
	}
	switch typ {
	case collections.OpCreate:
		ok, err := s.check(ctx, c.After)
		return ev, ok && err == nil, err
	case collections.OpDelete:
		ok, err := s.check(ctx, c.Before)
		return ev, ok && err == nil, err
	}
	return s.acceptUpdate(ctx, ev)
}

// acceptUpdate applies the rules to a change that stays in the result set,
// so that the subscriber's view is the result set restricted to what it
// may read: readable before and after → update; only after → create (it
// enters the view, without the old state); only before → delete (it
// leaves the view; like any delete the event may carry the old state,
// which the subscriber may read, and never the new one); neither →
// nothing.
//
// The old state is checked even for a subscriber that is not sent data:
// the type alone would tell it that the unreadable old state matched its
// filters. It costs one more rule evaluation, only for a change this
// subscriber is about to receive. A leave caused by the rules looks exactly
// like one caused by the filters, so it tells nothing about the new state.
func (s *Subscription) acceptUpdate(ctx context.Context, ev Event) (Event, bool, error) {
	c := ev.Change
	after, err := s.check(ctx, c.After)
	if err != nil {
		return Event{}, false, err
	}
	before, err := s.check(ctx, c.Before)
	if err != nil {
		return Event{}, false, err
	}
	switch {
	case after && !before:
		ev.Type = collections.OpCreate
	case before && !after:
		ev.Type = collections.OpDelete
	case !after:
		return Event{}, false, nil
	}
	return ev, true, nil
}

// logLagRecheck bounds a wait for changes the log does not show yet.
const logLagRecheck = 100 * time.Millisecond

// waitForLog waits until the store commits again, logLagRecheck passes or
// ctx ends (the caller reads again; only ctx's end is an error).
func waitForLog(ctx context.Context, wake <-chan struct{}) error {
	t := time.NewTimer(logLagRecheck)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// catchUp reads the next batch of changes up to the registration position
// from the store; when there are none left it switches to live delivery
// (or, after an overflow, moves the registration position and goes on).
func (s *Subscription) catchUp(ctx context.Context) error {
	h := s.hub
	if s.scanned < s.regP {
		wake := h.store.Notify()
		changes, err := h.store.ReadChanges(ctx, s.scanned, h.readBatch)
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			// The log is behind the position this subscription registered
			// at: a replica that has not yet seen what another reported
			// (MongoDB right after a failover). Skipping ahead would drop
			// those changes for good; wait for them instead.
			return waitForLog(ctx, wake)
		}
		for i := range changes {
			c := &changes[i]
			if c.Seq > s.regP {
				break
			}
			s.scanned = c.Seq
			typ, ok := s.classify(c)
			if !ok {
				continue
			}
			ev, ok, err := s.accept(ctx, &Change{Change: *c}, typ)
			if err != nil {
				return err
			}
			if ok {
				s.pending = append(s.pending, ev)
			}
		}
		if changes[len(changes)-1].Seq >= s.regP {
			s.scanned = max(s.scanned, s.regP)
		}
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !s.overflowed {
		s.catching = false
		return nil
	}
	// Live changes were dropped while we read the store: read them from
	// the store as well, up to the current dispatch position.
	s.overflowed = false
	s.q.drain()
	s.regP = h.pos
	return nil
}

// nextSnapshot returns the next snapshot page.
func (s *Subscription) nextSnapshot(ctx context.Context) (Event, error) {
	q := s.query
	q.Limit = collections.MaxLimit
	q.StartAfter = s.snap.cursor
	select {
	case s.hub.snapshots <- struct{}{}:
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
	res, err := s.hub.store.Query(ctx, s.db, q)
	<-s.hub.snapshots
	if err != nil {
		return Event{}, err
	}
	head := s.snap.head
	docs := res.Docs[:0:0]
	for _, d := range res.Docs {
		if d.Seq > head {
			// Written after the snapshot head: changes up to d.Seq are
			// already reflected and must not be delivered again.
			if s.skip == nil {
				s.skip = map[string]int64{}
			}
			s.skip[d.Path] = d.Seq
			s.skipMax = max(s.skipMax, d.Seq)
		}
		if s.check != nil {
			ok, err := s.check(ctx, d)
			if err != nil {
				return Event{}, err
			}
			if !ok {
				continue
			}
		}
		docs = append(docs, d)
	}
	ev := Event{Seq: head, Snapshot: docs, More: res.NextCursor != ""}
	s.snap.cursor = res.NextCursor
	if !ev.More {
		s.snap = nil
	}
	return ev, nil
}
