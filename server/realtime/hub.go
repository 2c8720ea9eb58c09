// Package realtime fans the change log out to live subscriptions. It knows
// nothing about HTTP: server/ turns subscriptions into WebSocket, SSE and
// RxDB pullStream streams.
//
// Basics: one Hub per Store runs one tailer goroutine. It sleeps on
// Store.Notify, reads the change log once (Store.ReadChanges) and hands each
// change to the subscriptions whose collection can contain it (indexed by
// database + concrete collection, and by database + collection shape for
// collection-group patterns). Each subscription has a bounded queue; the
// tailer never blocks on it.
//
// Guarantees: a subscription's stream is every matching change after its
// start position, in commit order, exactly once — or an explicit error:
// *SlowConsumerError (its queue overflowed; resubscribe with the token),
// ErrReset (the resume position is older than retention) or ErrClosed.
//
// Caveats: security rules are not the hub's business; Request.Check is
// called for every document state the subscription would deliver or that
// its event type would reveal (both states of an update: see
// Subscription.acceptUpdate), on the consumer's goroutine (rules may read
// the store, the tailer must not wait for them).
package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/loomdb/loom/collections"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultQueueSize is the per-subscription queue of dispatched changes.
	// Each slot holds a pointer to a change shared by all subscribers, so
	// the memory cost is small; a subscriber that falls this far behind
	// ends with SLOW_CONSUMER.
	DefaultQueueSize = 1024
	// DefaultReadBatch bounds one ReadChanges call of the tailer and of a
	// catch-up.
	DefaultReadBatch = 512
	// DefaultSnapshotReads bounds concurrent snapshot page reads.
	DefaultSnapshotReads = 8
	// retryDelay is how long the tailer waits after a failed read.
	retryDelay = 500 * time.Millisecond
)

// Errors that end a subscription.
var (
	// ErrClosed: the hub (or the subscription) was closed.
	ErrClosed = errors.New("realtime: closed")
	// ErrReset wraps collections.ErrPositionExpired: the resume position is
	// older than the change log's retention; the client must re-snapshot.
	ErrReset = fmt.Errorf("realtime: resume position expired: %w", collections.ErrPositionExpired)
	// ErrTokenAhead: a resume token beyond the change log's head.
	ErrTokenAhead = errors.New("realtime: resume token is ahead of the change log")
)

// SlowConsumerError ends a subscription whose queue overflowed. Token is
// the last position the consumer was given: resubscribing with it loses
// nothing.
type SlowConsumerError struct{ Token int64 }

func (e *SlowConsumerError) Error() string {
	return fmt.Sprintf("realtime: slow consumer (resume from %d)", e.Token)
}

// Config configures a Hub.
type Config struct {
	// QueueSize is the per-subscription queue (DefaultQueueSize when 0).
	QueueSize int
	// ReadBatch bounds one change-log read (DefaultReadBatch when 0).
	ReadBatch int
	// SnapshotReads bounds the snapshot pages read at once across all
	// subscriptions (DefaultSnapshotReads when 0): each page is up to
	// collections.MaxLimit documents in memory.
	SnapshotReads int
	// Logger receives tailer errors; nil discards.
	Logger *slog.Logger
}

// Hub is the fan-out of one Store's change log. It starts its tailer on the
// first Subscribe and stops it on Close.
type Hub struct {
	snapshots chan struct{} // semaphore of snapshot page reads
	store     collections.Store
	log       *slog.Logger
	queueSize int
	readBatch int

	startOnce sync.Once
	startErr  error
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}

	mu     sync.Mutex
	closed bool
	pos    int64 // every change <= pos has been dispatched
	// Indexes: db + concrete collection, db + shape (patterns whose
	// wildcards are all at id positions), and per db the rare patterns
	// with a wildcard collection name, which see every change of the db.
	byColl  map[key]map[*Subscription]struct{}
	byShape map[key]map[*Subscription]struct{}
	wild    map[string]map[*Subscription]struct{}
	count   int
}

type key struct{ db, coll string }

// New builds a Hub over store; nothing runs until the first Subscribe.
func New(store collections.Store, cfg Config) *Hub {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.ReadBatch <= 0 {
		cfg.ReadBatch = DefaultReadBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SnapshotReads <= 0 {
		cfg.SnapshotReads = DefaultSnapshotReads
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		snapshots: make(chan struct{}, cfg.SnapshotReads),
		store:     store,
		log:       cfg.Logger.With("component", "realtime"),
		queueSize: cfg.QueueSize,
		readBatch: cfg.ReadBatch,
		ctx:       ctx,
		cancel:    cancel,
		done:      make(chan struct{}),
		byColl:    map[key]map[*Subscription]struct{}{},
		byShape:   map[key]map[*Subscription]struct{}{},
		wild:      map[string]map[*Subscription]struct{}{},
	}
}

// start reads the head and launches the tailer, once.
func (h *Hub) start(ctx context.Context) error {
	h.startOnce.Do(func() {
		head, err := h.store.Head(ctx)
		if err != nil {
			h.startErr = fmt.Errorf("realtime: read head: %w", err)
			close(h.done)
			return
		}
		h.mu.Lock()
		h.pos = head
		h.mu.Unlock()
		go h.tail()
	})
	return h.startErr
}

// Close stops the tailer and ends every subscription with ErrClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.failAllLocked(ErrClosed)
	h.mu.Unlock()
	h.cancel()
	h.startOnce.Do(func() { close(h.done) }) // never started
	<-h.done
}

// Subscriptions returns the number of live subscriptions.
func (h *Hub) Subscriptions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Position returns the dispatch position: every change up to it has been
// handed to the subscriptions.
func (h *Hub) Position() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pos
}

// tail is the one reader of the change log.
func (h *Hub) tail() {
	defer close(h.done)
	h.mu.Lock()
	pos := h.pos
	h.mu.Unlock()
	for {
		// Take the channel before reading: a commit after the read closes
		// it, so no wake-up is lost.
		wake := h.store.Notify()
		changes, err := h.store.ReadChanges(h.ctx, pos, h.readBatch)
		if h.ctx.Err() != nil {
			return
		}
		var pe *collections.PositionExpiredError
		switch {
		case errors.As(err, &pe):
			// The hub itself fell behind retention (stalled for longer than
			// the retention period): every subscriber must re-snapshot.
			h.log.Error("change log purged past the realtime position; resetting all subscriptions", "pos", pos, "oldest", pe.Oldest)
			h.mu.Lock()
			h.failAllLocked(ErrReset)
			pos = pe.Oldest
			h.pos = pos
			h.mu.Unlock()
			continue
		case err != nil:
			h.log.Error("read change log", "after", pos, "err", err)
			select {
			case <-time.After(retryDelay):
			case <-h.ctx.Done():
				return
			}
			continue
		}
		if len(changes) == 0 {
			select {
			case <-wake:
			case <-h.ctx.Done():
				return
			}
			continue
		}
		h.mu.Lock()
		for i := range changes {
			h.dispatchLocked(&Change{Change: changes[i]})
		}
		pos = changes[len(changes)-1].Seq
		h.pos = pos
		h.mu.Unlock()
	}
}

// dispatchLocked offers c to every subscription whose collection can hold
// it. Filters are evaluated here (cheap, no I/O); rules later, by the
// consumer.
func (h *Hub) dispatchLocked(c *Change) {
	// System changes (the trigger state every node follows) are never
	// anyone's event: drop them once here rather than in every
	// subscription a "*" pattern holds.
	if h.count == 0 || collections.IsSystemPath(c.Path) {
		return
	}
	coll := c.After.Collection
	for s := range h.byColl[key{c.DB, coll}] {
		s.offerLocked(c)
	}
	if strings.Contains(coll, "/") {
		for s := range h.byShape[key{c.DB, collections.Shape(coll)}] {
			s.offerLocked(c)
		}
	}
	for s := range h.wild[c.DB] {
		s.offerLocked(c)
	}
}

// register adds s to the indexes and sets its registration position.
func (h *Hub) registerLocked(s *Subscription) {
	add := func(m map[key]map[*Subscription]struct{}, k key) {
		set := m[k]
		if set == nil {
			set = map[*Subscription]struct{}{}
			m[k] = set
		}
		set[s] = struct{}{}
	}
	coll := s.query.Collection
	switch {
	case !collections.IsPattern(coll):
		add(h.byColl, key{s.db, coll})
	case !wildName(coll):
		add(h.byShape, key{s.db, collections.Shape(coll)})
	default:
		set := h.wild[s.db]
		if set == nil {
			set = map[*Subscription]struct{}{}
			h.wild[s.db] = set
		}
		set[s] = struct{}{}
	}
	h.count++
}

func (h *Hub) unregisterLocked(s *Subscription) {
	del := func(m map[key]map[*Subscription]struct{}, k key) bool {
		set, ok := m[k]
		if !ok {
			return false
		}
		if _, ok := set[s]; !ok {
			return false
		}
		delete(set, s)
		if len(set) == 0 {
			delete(m, k)
		}
		return true
	}
	coll := s.query.Collection
	removed := del(h.byColl, key{s.db, coll}) || del(h.byShape, key{s.db, collections.Shape(coll)})
	if !removed {
		if set, ok := h.wild[s.db]; ok {
			if _, ok := set[s]; ok {
				delete(set, s)
				removed = true
				if len(set) == 0 {
					delete(h.wild, s.db)
				}
			}
		}
	}
	if removed {
		h.count--
	}
}

func (h *Hub) failAllLocked(err error) {
	for _, m := range []map[key]map[*Subscription]struct{}{h.byColl, h.byShape} {
		for _, set := range m {
			for s := range set {
				s.failLocked(err)
			}
		}
	}
	for _, set := range h.wild {
		for s := range set {
			s.failLocked(err)
		}
	}
}

// wildName reports whether a pattern has a wildcard at a collection-name
// (even) position, where Shape does not put one.
func wildName(pattern string) bool {
	for i, seg := range strings.Split(pattern, "/") {
		if i%2 == 0 && seg == "*" {
			return true
		}
	}
	return false
}

// Change is one change-log entry shared by every subscriber it is
// dispatched to; its documents' wire JSON is encoded once, on first use.
// Treat it as read-only.
type Change struct {
	collections.Change

	afterOnce, beforeOnce sync.Once
	afterJSON, beforeJSON []byte
	memo                  [MemoSlots]struct {
		once sync.Once
		b    []byte
	}
}

// MemoSlots is the number of Memo slots of a Change.
const MemoSlots = 8

// Memo returns the bytes build returns for slot, computing them once per
// change: a transport caches the part of its event message that all
// subscribers share. slot must be in [0, MemoSlots).
func (c *Change) Memo(slot int, build func() []byte) []byte {
	m := &c.memo[slot]
	m.once.Do(func() { m.b = build() })
	return m.b
}

// AfterJSON is the wire envelope of the document after the change.
func (c *Change) AfterJSON() []byte {
	c.afterOnce.Do(func() { c.afterJSON = docJSON(c.After) })
	return c.afterJSON
}

// BeforeJSON is the wire envelope of the document before the change (nil on
// create).
func (c *Change) BeforeJSON() []byte {
	c.beforeOnce.Do(func() { c.beforeJSON = docJSON(c.Before) })
	return c.beforeJSON
}

func docJSON(d *collections.Document) []byte {
	if d == nil {
		return nil
	}
	b, err := d.MarshalJSON()
	if err != nil { // data decoded from the store always encodes
		return []byte("null")
	}
	return b
}
