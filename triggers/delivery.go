package triggers

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomdb/loom/collections"
)

const (
	// maxRetryAfter caps a receiver's Retry-After.
	maxRetryAfter = 24 * time.Hour
	// disabledRecheck is how long a delivery of a disabled trigger waits
	// before looking again (an enable wakes it at once).
	disabledRecheck = time.Minute
	// pollBatch bounds the rows one poll claims (and is its page size).
	pollBatch = 256
	// pollScan bounds the due rows one poll looks at.
	pollScan = 4 * pollBatch
)

// job is a delivery held by this node: in flight, queued behind its
// ordering key, or waiting for its next attempt.
type job struct {
	d *Delivery
	// leasedUntil is when this node's lease on the row ends; past it the
	// row must be claimed again before an attempt.
	leasedUntil time.Time
	// inserted is closed when the commit inserting a fresh row is done,
	// with insertErr set when it failed; nil for rows already stored.
	inserted  chan struct{}
	insertErr error
}

// stored waits until j's row is in the outbox; false when it never will be
// (its insert failed and the change will be evaluated again) or ctx ended.
func (j *job) stored(ctx context.Context) bool {
	if j.inserted == nil {
		return true
	}
	select {
	case <-j.inserted:
	case <-ctx.Done():
		return false
	}
	if j.insertErr != nil {
		return false
	}
	j.inserted = nil
	return true
}

// outcome of one attempt.
type outcome int

const (
	done  outcome = iota // finished, parked, or no longer ours
	retry                // attempt again at d.NextAttemptAt
)

// dispatcher runs deliveries: concurrently for rows without an ordering
// key, one at a time in commit order per (trigger, key) otherwise.
//
// What it holds in memory is bounded four ways: MaxHeld in all, keyCap
// per ordering key, originCap per origin (the top-level document a row's
// document lives under: its tenant, see originOf) and triggerCap per
// trigger. The shares keep one tenant's blocked key (a head row waiting
// for its retry with thousands of rows queued behind it), one tenant's
// many blocked keys, or one flooded trigger from taking the memory every
// other key, tenant and trigger needs. A row refused for want of room is
// not lost: it stays pending and due in the outbox, and the key's runner
// (refill) or the poller picks it up once there is room.
type dispatcher struct {
	s   *Service
	sem chan struct{} // bounds concurrent requests (Workers)
	// Shares of the Workers one trigger and one origin may keep busy, so
	// a receiver that hangs for one tenant's or one trigger's deliveries
	// leaves workers for everyone else (guarded by mu).
	triggerSem, originSem         map[string]*share
	triggerWorkers, originWorkers int

	keyCap, originCap, triggerCap int

	mu        sync.Mutex
	held      map[string]heldRow   // outbox row ids this node holds
	byKey     map[string]int       // held rows per trigger + ordering key
	byOrigin  map[string]int       // held rows per origin
	byTrigger map[string]int       // held rows per trigger
	keys      map[string]*keyQueue // per trigger + ordering key
	inflight  int                  // attempts between begin and end
	draining  bool
	drained   chan struct{} // closed when the last attempt ends during a drain
	wg        sync.WaitGroup
	ctx       context.Context
	stop      context.CancelFunc

	// pollFrom is where the next poll continues in the due rows (used by
	// the poll loop only).
	pollFrom string
}

// heldRow is what a held row counts against.
type heldRow struct{ trigger, key, origin string }

// Shares of MaxHeld (by default 100 rows per key, 400 per tenant, 2,500
// per trigger). A key needs few rows in memory: they are delivered one at
// a time, and the runner refills from the outbox when it has room. A
// tenant gets a few keys' worth, a trigger (whose rows without a key run
// concurrently) a quarter. They are fixed fractions rather than settings:
// what matters is that no one share can take the rest, and rows over a
// share lose no more than a refill's or a poll's delay.
func keyCapOf(maxHeld int) int {
	return max(1, min(max(16, maxHeld/100), maxHeld/4))
}

func originCapOf(maxHeld int) int {
	return max(keyCapOf(maxHeld), maxHeld/25)
}

func triggerCapOf(maxHeld int) int {
	return max(1, maxHeld/4, min(maxHeld, 2*originCapOf(maxHeld)))
}

func (d *dispatcher) init(s *Service) {
	d.s = s
	d.sem = make(chan struct{}, s.cfg.Workers)
	d.triggerWorkers = max(1, s.cfg.Workers*3/4)
	d.originWorkers = max(1, s.cfg.Workers/4)
	d.triggerSem = map[string]*share{}
	d.originSem = map[string]*share{}
	d.keyCap = keyCapOf(s.cfg.MaxHeld)
	d.originCap = originCapOf(s.cfg.MaxHeld)
	d.triggerCap = triggerCapOf(s.cfg.MaxHeld)
	d.held = map[string]heldRow{}
	d.byKey = map[string]int{}
	d.byOrigin = map[string]int{}
	d.byTrigger = map[string]int{}
	d.keys = map[string]*keyQueue{}
	d.drained = make(chan struct{})
	d.ctx, d.stop = context.WithCancel(context.Background())
}

// queueKey names the queue of an ordering key ("" for rows without one).
func queueKey(dl *Delivery) string {
	if dl.OrderingKey == "" {
		return ""
	}
	return dl.TriggerID + "\x00" + dl.OrderingKey
}

// reserve marks a row as held by this node; false when it is held already
// or there is no room for it: the node, its trigger, its origin or its
// ordering key holds its share. force skips the shares: a key's runner takes its head
// row that way (and gives back a row in exchange, see swapIn), so rows
// waiting for their head can never keep the head out.
func (d *dispatcher) reserve(dl *Delivery, force bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.held[dl.ID]; ok {
		return false
	}
	k, o := queueKey(dl), originKey(dl.event)
	if !force && (len(d.held) >= d.s.cfg.MaxHeld || d.byTrigger[dl.TriggerID] >= d.triggerCap ||
		d.byOrigin[o] >= d.originCap || (k != "" && d.byKey[k] >= d.keyCap)) {
		if q := d.keys[k]; q != nil {
			q.spilled = true // the key's runner looks for it when it has room
		}
		return false
	}
	d.held[dl.ID] = heldRow{trigger: dl.TriggerID, key: k, origin: o}
	d.byTrigger[dl.TriggerID]++
	d.byOrigin[o]++
	if k != "" {
		d.byKey[k]++
	}
	return true
}

func (d *dispatcher) release(id string) {
	d.mu.Lock()
	d.releaseLocked(id)
	d.mu.Unlock()
}

func (d *dispatcher) releaseLocked(id string) {
	h, ok := d.held[id]
	if !ok {
		return
	}
	delete(d.held, id)
	decr(d.byTrigger, h.trigger)
	decr(d.byOrigin, h.origin)
	if h.key != "" {
		decr(d.byKey, h.key)
	}
}

func decr(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// share is a semaphore of one trigger or origin, kept while used.
type share struct {
	ch   chan struct{}
	refs int
}

// worker waits for a worker for a request of trigger and origin: a slot
// of the origin's share, then of the trigger's, then of the Workers (always
// in this order, and every slot is given back when the request ends, so
// no wait can close a cycle). free gives them back; false when ctx ended.
func (d *dispatcher) worker(ctx context.Context, trigger, origin string) (free func(), ok bool) {
	d.mu.Lock()
	so := d.shareOf(d.originSem, origin, d.originWorkers)
	st := d.shareOf(d.triggerSem, trigger, d.triggerWorkers)
	d.mu.Unlock()
	sems := []chan struct{}{so.ch, st.ch, d.sem}
	taken := 0
	free = func() {
		for _, c := range sems[:taken] {
			<-c
		}
		d.mu.Lock()
		d.unshare(d.originSem, origin)
		d.unshare(d.triggerSem, trigger)
		d.mu.Unlock()
	}
	for _, c := range sems {
		select {
		case c <- struct{}{}:
			taken++
		case <-ctx.Done():
			free()
			return nil, false
		}
	}
	return free, true
}

func (d *dispatcher) shareOf(m map[string]*share, k string, n int) *share {
	sh := m[k]
	if sh == nil {
		sh = &share{ch: make(chan struct{}, n)}
		m[k] = sh
	}
	sh.refs++
	return sh
}

func (d *dispatcher) unshare(m map[string]*share, k string) {
	if sh := m[k]; sh != nil {
		if sh.refs--; sh.refs <= 0 {
			delete(m, k)
		}
	}
}

// full reports whether the node holds MaxHeld rows.
func (d *dispatcher) full() bool {
	return d.heldCount() >= d.s.cfg.MaxHeld
}

func (d *dispatcher) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

// submit starts a reserved job.
func (d *dispatcher) submit(j *job) {
	d.wg.Add(1)
	if j.d.OrderingKey == "" {
		go func() {
			defer d.wg.Done()
			d.runOne(j)
		}()
		return
	}
	k := queueKey(j.d)
	d.mu.Lock()
	q := d.keys[k]
	start := q == nil
	if start {
		q = &keyQueue{trigger: j.d.TriggerID, key: j.d.OrderingKey}
		d.keys[k] = q
	}
	heap.Push(&q.jobs, j)
	d.mu.Unlock()
	if !start {
		d.wg.Done()
		return
	}
	go func() {
		defer d.wg.Done()
		d.runKey(k, q)
	}()
}

// wait drains: attempts in flight may finish (and record their outcome)
// for up to timeout, no new one starts; then every held delivery stops.
// Rows not finished stay leased to this node and are taken back at the next
// start.
func (d *dispatcher) wait(timeout time.Duration) {
	d.mu.Lock()
	d.draining = true
	idle := d.inflight == 0
	d.mu.Unlock()
	if !idle {
		select {
		case <-d.drained:
		case <-time.After(timeout):
		}
	}
	d.stop()
	d.wg.Wait()
}

// begin counts an attempt in; false once draining.
func (d *dispatcher) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.inflight++
	return true
}

// end counts an attempt out; the last one during a drain signals it.
func (d *dispatcher) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight--
	if d.draining && d.inflight == 0 {
		close(d.drained)
	}
}

// runOne delivers a row without an ordering key until it is finished.
//
// A row waiting for a retry is not held: it is released, and the poller
// claims it when it is due. Memory then holds only requests in flight, so a
// receiver that is down for hours cannot fill MaxHeld and starve the first
// attempts of every other trigger.
func (d *dispatcher) runOne(j *job) {
	defer d.release(j.d.ID)
	d.s.attempt(d.ctx, j)
}

// runKey delivers the rows of one ordering key in seq order: the next row
// waits until the previous one was delivered or went dead. Rows of the key
// held by other nodes (or not yet picked up after a restart) are older
// heads in the outbox: a row is only attempted when it is the oldest
// pending row of its key there.
//
// The queue holds at most keyCap rows. Later rows of the key wait in the
// outbox and are refilled from there in seq order once half of the held
// ones are done, so a key whose head keeps failing holds a small, fixed
// share of memory however many rows pile up behind it.
func (d *dispatcher) runKey(k string, q *keyQueue) {
	for {
		j, refill, ok := d.nextOf(k, q)
		if !ok {
			return
		}
		if refill {
			if !d.refill(k, q) {
				return
			}
			continue
		}

		// A row still being inserted is the head when no older row of its
		// key is pending (older rows of this batch are ahead of it here).
		head, err := d.s.keyHead(d.ctx, j.d)
		headID := ""
		if head != nil {
			headID = head.ID
		}
		if err != nil || (headID != j.d.ID && (headID != "" || j.inserted == nil)) {
			if err != nil && d.ctx.Err() == nil {
				d.s.log.Warn("ordering key head lookup", "trigger", j.d.TriggerID, "err", err)
			}
			if err == nil && j.inserted == nil && !d.s.stillPending(d.ctx, j.d) {
				// Finished elsewhere (another node took it over): drop it.
				d.drop(q, j)
				continue
			}
			if err == nil && d.swapIn(k, q, head) {
				continue
			}
			// An older row of the key is pending elsewhere: wait for it
			// (the poller brings it here once its lease ends).
			if !d.s.sleep(d.ctx, d.s.cfg.PollInterval) {
				return
			}
			continue
		}
		out := d.s.attempt(d.ctx, j)
		switch out {
		case done:
			d.drop(q, j)
		case retry:
			if !d.s.sleep(d.ctx, time.Until(time.UnixMilli(j.d.NextAttemptAt))) {
				return
			}
		}
	}
}

// nextOf returns the key's next row, or asks for a refill when rows of the
// key were left in the outbox and half of the queue's share is free; ok is
// false when the queue is done (it is then removed).
func (d *dispatcher) nextOf(k string, q *keyQueue) (j *job, refill, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := q.jobs.Len()
	if q.spilled && n <= d.keyCap/2 {
		q.spilled = false
		return nil, true, true
	}
	if n == 0 {
		delete(d.keys, k)
		return nil, false, false
	}
	return q.jobs[0], false, true
}

// drop removes a finished row from its queue and releases it.
func (d *dispatcher) drop(q *keyQueue, j *job) {
	d.mu.Lock()
	if i := indexOf(&q.jobs, j); i >= 0 {
		heap.Remove(&q.jobs, i)
	}
	d.releaseLocked(j.d.ID)
	d.mu.Unlock()
}

// refill takes the key's due rows that follow the last one queued here
// from the outbox, in seq order, up to the key's share. The queue stays
// marked spilled only while a full page was found and taken from; rows it
// cannot take now (leased elsewhere, no room) are the poller's. False when
// the dispatcher stopped.
func (d *dispatcher) refill(k string, q *keyQueue) bool {
	d.mu.Lock()
	var after int64
	for _, j := range q.jobs {
		after = max(after, j.d.Seq)
	}
	room := min(d.keyCap-d.byKey[k], collections.MaxLimit)
	d.mu.Unlock()
	if room <= 0 {
		return true
	}
	docs, err := d.s.keyRows(d.ctx, q.trigger, q.key, after, room)
	if err != nil {
		if d.ctx.Err() != nil {
			return false
		}
		d.s.log.Warn("refilling an ordering key from the outbox", "trigger", q.trigger, "err", err)
		d.mu.Lock()
		q.spilled = true
		d.mu.Unlock()
		return d.s.sleep(d.ctx, d.s.cfg.PollInterval)
	}
	now := time.Now()
	took := 0
	for _, doc := range docs {
		if d.s.dueFor(doc, now) && d.s.takeOver(d.ctx, doc, now, false) {
			took++
		}
	}
	d.mu.Lock()
	q.spilled = took > 0 && (q.spilled || len(docs) == room)
	d.mu.Unlock()
	return true
}

// swapIn takes the key's head row from the outbox when it is due (or
// leased to this node) and not held here, whatever the shares, and gives
// back the queue's last row if that put the node, the trigger, the key or
// the head's origin over its share (a key's rows may come from several
// origins: the head's origin may then stay one row over while the head is
// held). The rows queued here wait for that head: without this a head
// whose retry came due (or whose lease ended) could find no room left but
// the room taken by the rows waiting for it.
func (d *dispatcher) swapIn(k string, q *keyQueue, head *collections.Document) bool {
	now := time.Now()
	if head == nil || !d.s.dueFor(head, now) || !d.s.takeOver(d.ctx, head, now, true) {
		return false
	}
	if j := d.evictLast(k, q, head); j != nil {
		d.s.unlease(d.ctx, j)
	}
	return true
}

// evictLast removes the queue's last row when the node, the trigger, the
// key or the head's origin is over its share; nil when nothing was.
func (d *dispatcher) evictLast(k string, q *keyQueue, head *collections.Document) *job {
	d.mu.Lock()
	defer d.mu.Unlock()
	over := len(d.held) > d.s.cfg.MaxHeld || d.byTrigger[q.trigger] > d.triggerCap || d.byKey[k] > d.keyCap ||
		d.byOrigin[originKey(eventOf(head))] > d.originCap
	if !over || q.jobs.Len() < 2 {
		return nil
	}
	last := 0
	for i, j := range q.jobs {
		if j.d.Seq > q.jobs[last].d.Seq {
			last = i
		}
	}
	j := q.jobs[last]
	heap.Remove(&q.jobs, last)
	d.releaseLocked(j.d.ID)
	q.spilled = true
	return j
}

// unlease gives back this node's lease on a row it no longer holds, so the
// row is due at once for whoever has room (if the write fails, the lease
// simply runs out).
func (s *Service) unlease(ctx context.Context, j *job) {
	if !j.stored(ctx) {
		return // its insert failed: the change is evaluated again
	}
	_, _ = s.patchRow(ctx, j.d, map[string]any{fOwner: nil, fNext: ms(time.Now())})
}

// keyQueue is the rows of one ordering key this node holds.
type keyQueue struct {
	trigger, key string
	jobs         jobHeap
	// spilled: rows of the key were refused for want of room and may
	// wait in the outbox.
	spilled bool
}

// jobHeap is a min-heap of jobs by seq.
type jobHeap []*job

func (q jobHeap) Len() int           { return len(q) }
func (q jobHeap) Less(i, j int) bool { return q[i].d.Seq < q[j].d.Seq }
func (q jobHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *jobHeap) Push(x any)        { *q = append(*q, x.(*job)) }
func (q *jobHeap) Pop() any {
	old := *q
	j := old[len(old)-1]
	*q = old[:len(old)-1]
	return j
}

func indexOf(q *jobHeap, j *job) int {
	for i, x := range *q {
		if x == j {
			return i
		}
	}
	return -1
}

// keyHead returns the oldest pending row of d's ordering key (nil when
// there is none).
func (s *Service) keyHead(ctx context.Context, d *Delivery) (*collections.Document, error) {
	docs, err := s.keyRows(ctx, d.TriggerID, d.OrderingKey, 0, 1)
	if err != nil || len(docs) == 0 {
		return nil, err
	}
	return docs[0], nil
}

// keyRows returns up to limit pending rows of an ordering key with a seq
// after after, in seq order.
func (s *Service) keyRows(ctx context.Context, trigger, key string, after int64, limit int) ([]*collections.Document, error) {
	q := collections.Query{
		Collection: outboxColl,
		Filters: []collections.Filter{
			{Field: fTrigger, Op: collections.OpEq, Value: trigger},
			{Field: fKey, Op: collections.OpEq, Value: key},
			{Field: fStatus, Op: collections.OpEq, Value: StatusPending},
		},
		OrderBy: []collections.Order{{Field: fSeq}},
		Limit:   limit,
	}
	if after > 0 {
		q.Filters = append(q.Filters, collections.Filter{Field: fSeq, Op: collections.OpGt, Value: after})
	}
	if err := q.Normalize(); err != nil {
		return nil, err
	}
	res, err := s.store.Query(ctx, SystemDB, q)
	if err != nil {
		return nil, err
	}
	return res.Docs, nil
}

// eventOf is the event an outbox row carries.
func eventOf(doc *collections.Document) map[string]any {
	ev, _ := doc.Data[fPayload].(map[string]any)
	return ev
}

// dueFor reports whether a pending row may be taken by this node now: its
// lease or retry wait is over, or it is leased to this node already.
func (s *Service) dueFor(doc *collections.Document, now time.Time) bool {
	return num(doc.Data[fNext]) <= ms(now) || str(doc.Data[fOwner]) == s.cfg.NodeID
}

// stillPending reports whether d's row is still pending at the version this
// node knows (errors count as yes: the row is looked at again later).
func (s *Service) stillPending(ctx context.Context, d *Delivery) bool {
	doc, err := s.store.Get(ctx, SystemDB, outboxColl+"/"+d.ID)
	if errors.Is(err, collections.ErrNotFound) {
		return false
	}
	return err != nil || (doc.Version == d.version && str(doc.Data[fStatus]) == StatusPending)
}

// attempt makes one delivery attempt of j and records it.
func (s *Service) attempt(ctx context.Context, j *job) outcome {
	d := j.d
	e := s.entry(d.TriggerID)
	now := time.Now()
	if (e == nil || !e.enabled() || d.Seq <= e.st.ActiveFrom) && !j.stored(ctx) {
		return done
	}
	if e == nil {
		// The trigger was deleted: nothing will ever deliver this row.
		return s.finishWithoutAttempt(ctx, j, "trigger "+d.TriggerID+" no longer exists")
	}
	if d.Seq <= e.st.ActiveFrom {
		// A trigger of the same id was deleted and created again: the row
		// belongs to the old one and must not reach the new URL.
		return s.finishWithoutAttempt(ctx, j, "trigger "+d.TriggerID+" was deleted; this delivery belonged to it")
	}
	if !e.enabled() {
		s.park(ctx, j.d, now)
		return done
	}
	if now.After(j.leasedUntil.Add(-time.Second)) {
		if !s.claim(ctx, j, e, now) {
			return done
		}
	}
	keys, err := s.signingKeys(e, now)
	if err != nil {
		if !j.stored(ctx) {
			return done
		}
		return s.finishWithoutAttempt(ctx, j, "signing secret: "+err.Error())
	}

	free, ok := s.d.worker(ctx, d.TriggerID, originKey(d.event))
	if !ok {
		return done
	}
	defer free()
	// A drain lets attempts already started finish; none starts after it.
	if !s.d.begin() {
		return done // shutting down: the row stays leased and is taken back at the next start
	}
	defer s.d.end()
	a, retryAfter := s.post(ctx, e, d, keys)
	if !j.stored(ctx) || ctx.Err() != nil {
		return done
	}
	return s.record(ctx, j, e, a, retryAfter)
}

// post sends one webhook request.
func (s *Service) post(ctx context.Context, e *entry, d *Delivery, keys [][]byte) (Attempt, time.Duration) {
	start := time.Now()
	a := Attempt{At: ms(start)}
	body, err := json.Marshal(map[string]any{
		"id":        d.EventID,
		"type":      "document." + str(d.event["type"]),
		"triggerId": d.TriggerID,
		"database":  d.event["database"],
		"timestamp": d.event["timestamp"],
		"attempt":   len(d.Attempts) + 1,
		"event":     d.event,
	})
	if err != nil {
		a.Error = "encode body: " + err.Error()
		return a, 0
	}
	rctx, cancel := context.WithTimeout(ctx, e.c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, e.c.Def.URL, bytes.NewReader(body))
	if err != nil {
		a.Error = err.Error()
		return a, 0
	}
	for k, v := range e.c.Def.Headers {
		req.Header.Set(k, v)
	}
	ts := start.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Loom/"+s.cfg.Version)
	req.Header.Set("webhook-id", d.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(keys, d.EventID, ts, body))
	client := s.client
	if s.builtin(e) {
		client = s.builtinClient
	}
	resp, err := client.Do(req)
	a.LatencyMs = time.Since(start).Milliseconds()
	s.m.attemptSeconds.WithLabelValues(d.TriggerID).Observe(time.Since(start).Seconds())
	if err != nil {
		if rctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			a.Error = fmt.Sprintf("timeout after %s", e.c.Timeout)
		} else {
			a.Error = truncate(err.Error(), maxErrorText)
		}
		return a, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	a.Status = resp.StatusCode
	a.Response = truncateUTF8(b)
	return a, retryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// record stores an attempt and decides what comes next.
func (s *Service) record(ctx context.Context, j *job, e *entry, a Attempt, retryAfter time.Duration) outcome {
	d := j.d
	now := time.Now()
	ok := a.Status >= 200 && a.Status < 300
	// A 410 from the built-in handlers is an ordinary failure: they never
	// send it, and one document must not switch them off for everyone.
	gone := a.Status == http.StatusGone && !s.builtin(e)
	budget := d.budget + 1
	status := StatusPending
	next := int64(0)
	out := done
	switch {
	case ok:
		status = StatusDelivered
	case gone:
		// The receiver says the endpoint is gone: disable the trigger; the
		// row is parked until an enable.
		next = ms(now.Add(disabledRecheck))
	case budget >= e.c.MaxAttempts():
		status = StatusDead
	default:
		delay := e.c.Backoff(budget, s.rnd)
		if retryAfter > 0 {
			delay = retryAfter
		}
		next = ms(now.Add(delay))
		out = retry
	}
	patch := map[string]any{
		fStatus:   status,
		fAttempts: attemptsValue(append(d.Attempts, a)),
		fBudget:   budget,
		fNext:     next,
	}
	// The lease ends with the attempt: a retry is claimed again when due,
	// so a row with an owner is always one in flight.
	patch[fOwner] = nil
	if status != StatusPending {
		patch[fFinishedAt] = ms(now)
	}
	ver, err := s.patchRow(ctx, d, patch)
	if err != nil {
		if !errors.Is(err, collections.ErrPreconditionFailed) && ctx.Err() == nil {
			s.log.Error("recording a delivery attempt", "delivery", d.ID, "err", err)
		}
		return done // no longer ours (or the store is failing): the lease expires and someone retries
	}
	d.version = ver
	d.Attempts = append(d.Attempts, a)
	d.budget = budget
	d.Status = status
	d.NextAttemptAt = next
	j.leasedUntil = time.UnixMilli(next) // a retry claims again

	c := Counts{}
	switch {
	case ok:
		c.Delivered = 1
		s.m.deliveries.WithLabelValues(d.TriggerID, "delivered").Inc()
		s.deliveredOK(ctx, e)
	case status == StatusDead:
		c.Dead, c.FailedAttempts = 1, 1
		s.m.deliveries.WithLabelValues(d.TriggerID, "dead").Inc()
		s.wentDead(ctx, e, d, attemptError(a))
	default:
		c.FailedAttempts = 1
		s.m.deliveries.WithLabelValues(d.TriggerID, "failed").Inc()
		s.noteError(e, attemptError(a))
		if gone {
			_ = s.setEnabled(ctx, d.TriggerID, false, fmt.Sprintf("receiver answered 410 Gone at %s", time.UnixMilli(a.At).UTC().Format(time.RFC3339)))
		}
	}
	s.count(d.TriggerID, c)
	return out
}

// patchRow updates an outbox row this node holds (version-checked).
func (s *Service) patchRow(ctx context.Context, d *Delivery, patch map[string]any) (int64, error) {
	res, err := s.store.Commit(ctx, SystemDB, []collections.Write{{
		Type: collections.WriteUpdate, Path: outboxColl + "/" + d.ID, Data: patch,
		IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: d.version}},
	}}, collections.CommitOptions{})
	if err != nil {
		return 0, err
	}
	return res[0].Doc.Version, nil
}

// claim takes the lease on a row this node holds in memory but whose
// lease ended (a retry, or a row leased before a restart).
func (s *Service) claim(ctx context.Context, j *job, e *entry, now time.Time) bool {
	lease := now.Add(e.c.Timeout + s.cfg.LeaseSlack)
	ver, err := s.patchRow(ctx, j.d, map[string]any{fOwner: s.cfg.NodeID, fNext: ms(lease)})
	if err != nil {
		return false // another node claimed it
	}
	j.d.version = ver
	j.leasedUntil = lease
	return true
}

// finishWithoutAttempt marks a row dead for a reason that no retry fixes.
func (s *Service) finishWithoutAttempt(ctx context.Context, j *job, reason string) outcome {
	a := Attempt{At: ms(time.Now()), Error: reason}
	_, err := s.patchRow(ctx, j.d, map[string]any{
		fStatus: StatusDead, fAttempts: attemptsValue(append(j.d.Attempts, a)),
		fNext: 0, fFinishedAt: a.At, fOwner: nil,
	})
	if err == nil {
		s.m.deliveries.WithLabelValues(j.d.TriggerID, "dead").Inc()
		s.log.Warn("delivery dead without an attempt", "delivery", j.d.ID, "reason", reason)
	}
	return done
}

// noteError remembers a trigger's last error (stored with the next
// counter flush).
func (s *Service) noteError(e *entry, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.entries[e.c.Def.ID]
	if cur == nil {
		return
	}
	ne := *cur
	ne.st.LastError, ne.st.LastErrorAt = msg, ms(time.Now())
	s.entries[e.c.Def.ID] = &ne
	s.publishLocked()
}

// deliveredOK resets the dead streak.
func (s *Service) deliveredOK(ctx context.Context, e *entry) {
	if e.st.ConsecutiveDead > 0 || len(e.st.DeadOrigins) > 0 {
		_, _ = s.updateEntry(ctx, e.c.Def.ID, func(e *entry) error {
			e.st.ConsecutiveDead, e.st.DeadOrigins = 0, nil
			return nil
		})
	}
}

// wentDead counts a dead delivery and disables the trigger after too many
// in a row, if they came from enough distinct origins (so one tenant's
// documents that fail the receiver cannot switch the trigger off for
// everyone) and the trigger is not one of the built-in handlers'.
func (s *Service) wentDead(ctx context.Context, e *entry, d *Delivery, msg string) {
	id := e.c.Def.ID
	origin := originOf(d)
	var disable bool
	var origins int
	_, err := s.updateEntry(ctx, id, func(e *entry) error {
		e.st.ConsecutiveDead++
		if len(e.st.DeadOrigins) < s.cfg.DisableOrigins && !slices.Contains(e.st.DeadOrigins, origin) {
			e.st.DeadOrigins = append(slices.Clip(e.st.DeadOrigins), origin)
		}
		e.st.LastError, e.st.LastErrorAt = msg, ms(time.Now())
		origins = len(e.st.DeadOrigins)
		disable = s.cfg.DisableAfterDead > 0 && e.st.ConsecutiveDead >= s.cfg.DisableAfterDead &&
			origins >= s.cfg.DisableOrigins && !s.builtin(e) && e.enabled()
		return nil
	})
	if err == nil && disable {
		_ = s.setEnabled(ctx, id, false, fmt.Sprintf("%d deliveries in a row from %d origins went dead (last: %s)", s.cfg.DisableAfterDead, origins, msg))
	}
}

// builtin reports whether e delivers to this server's own handlers.
func (s *Service) builtin(e *entry) bool {
	return s.cfg.BuiltinURL != "" && strings.HasPrefix(e.c.Def.URL, s.cfg.BuiltinURL)
}

// originOf names the top-level document d's document lives under (its
// database and first two path segments), hashed to keep the trigger state
// small.
func originOf(d *Delivery) string {
	sum := sha256.Sum256([]byte(originKey(d.event)))
	return hex.EncodeToString(sum[:8])
}

// originKey is the database and top-level document of an event's document
// ("default\x00users/alice" for users/alice/chats/c1/messages/m1): in the
// usual layout, the tenant it belongs to.
func originKey(event map[string]any) string {
	segs := strings.SplitN(str(event["path"]), "/", 3)
	return str(event["database"]) + "\x00" + strings.Join(segs[:min(2, len(segs))], "/")
}

func attemptError(a Attempt) string {
	if a.Error != "" {
		return a.Error
	}
	return "HTTP " + strconv.Itoa(a.Status)
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

func str(v any) string { s, _ := v.(string); return s }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// truncateUTF8 keeps a response body as text, cut at a rune boundary.
func truncateUTF8(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) > maxResponse {
		s = s[:maxResponse]
		for len(s) > 0 && !utf8Start(s[len(s)-1]) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func utf8Start(c byte) bool { return c < 0x80 || c >= 0xC0 }

// poll finds due rows (retries, expired leases, rows inserted while this
// node was full) and rows this node leased before a restart, claims them
// and starts them.
func (d *dispatcher) poll(ctx context.Context) {
	s := d.s
	s.adoptOwn(ctx)
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.pollOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("polling the outbox", "err", err)
		}
	}
}

// pollOnce claims up to pollBatch due rows, looking at no more than
// pollScan of them. Due rows it cannot take (held here already, or their
// key or trigger holds its share) stay where they are, so each poll goes
// on where the last one stopped and wraps around at the end: however many
// rows one blocked key leaves due in the outbox, every due row is looked at
// within a bounded number of polls, and a poll's work stays bounded.
func (s *Service) pollOnce(ctx context.Context) error {
	now := time.Now()
	q := collections.Query{
		Collection: outboxColl,
		Filters: []collections.Filter{
			{Field: fStatus, Op: collections.OpEq, Value: StatusPending},
			{Field: fNext, Op: collections.OpLe, Value: ms(now)},
		},
		OrderBy: []collections.Order{{Field: fNext}},
		Limit:   pollBatch,
	}
	q.StartAfter = s.d.pollFrom
	if err := q.Normalize(); err != nil {
		s.d.pollFrom = ""
		return err
	}
	wrapped := q.StartAfter == ""
	claimed, scanned := 0, 0
	for claimed < pollBatch && scanned < pollScan && !s.d.full() {
		res, err := s.store.Query(ctx, SystemDB, q)
		if err != nil {
			s.d.pollFrom = ""
			return err
		}
		for _, doc := range res.Docs {
			scanned++
			if s.takeOver(ctx, doc, now, false) {
				claimed++
			}
		}
		if s.d.full() {
			return nil // this page is looked at again when there is room
		}
		if res.NextCursor == "" {
			// The end: the next page starts at the front again.
			s.d.pollFrom, q.StartAfter = "", ""
			if wrapped {
				return nil
			}
			wrapped = true
			continue
		}
		s.d.pollFrom, q.StartAfter = res.NextCursor, res.NextCursor
	}
	return nil
}

// adoptOwn takes back the pending rows leased to this node before it
// restarted, without waiting for their leases to end.
func (s *Service) adoptOwn(ctx context.Context) {
	q := collections.Query{
		Collection: outboxColl,
		Filters:    []collections.Filter{{Field: fStatus, Op: collections.OpEq, Value: StatusPending}},
		OrderBy:    []collections.Order{{Field: fSeq}},
		Limit:      collections.MaxLimit,
	}
	if err := q.Normalize(); err != nil {
		return
	}
	now := time.Now()
	for ctx.Err() == nil {
		res, err := s.store.Query(ctx, SystemDB, q)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("adopting outbox rows", "err", err)
			}
			return
		}
		for _, doc := range res.Docs {
			if str(doc.Data[fOwner]) == s.cfg.NodeID {
				s.takeOver(ctx, doc, now, false)
			}
		}
		if res.NextCursor == "" {
			return
		}
		q.StartAfter = res.NextCursor
	}
}

// takeOver claims one outbox row and starts it; false when it was not
// taken (held already, no room, or claimed by someone else). force skips
// the shares of the key and the trigger (see dispatcher.reserve).
func (s *Service) takeOver(ctx context.Context, doc *collections.Document, now time.Time, force bool) bool {
	d, err := decodeDelivery(doc)
	if err != nil {
		s.log.Error("skipping a malformed outbox row", "err", err)
		return false
	}
	if d.Status != StatusPending {
		return false
	}
	e := s.entry(d.TriggerID)
	if e != nil && !e.enabled() {
		s.park(ctx, d, now)
		return false
	}
	if !s.d.reserve(d, force) {
		return false
	}
	j := &job{d: d}
	if e != nil && !s.claim(ctx, j, e, now) {
		s.d.release(d.ID)
		return false
	}
	// A row of an unknown trigger is started unclaimed: its attempt marks
	// it dead (version-checked).
	s.d.submit(j)
	return true
}

// park releases a row of a disabled trigger and makes it due again a
// little later; enabling the trigger makes it due at once (wakeTrigger).
// The row is not held in memory meanwhile.
func (s *Service) park(ctx context.Context, d *Delivery, now time.Time) {
	_, _ = s.patchRow(ctx, d, map[string]any{fNext: ms(now.Add(disabledRecheck)), fOwner: nil})
}

// wakeTrigger makes the parked pending rows of a trigger due now.
func (s *Service) wakeTrigger(ctx context.Context, id string) {
	q := collections.Query{
		Collection: outboxColl,
		Filters: []collections.Filter{
			{Field: fTrigger, Op: collections.OpEq, Value: id},
			{Field: fStatus, Op: collections.OpEq, Value: StatusPending},
		},
		OrderBy: []collections.Order{{Field: fSeq}},
		Limit:   collections.MaxLimit,
	}
	if err := q.Normalize(); err != nil {
		return
	}
	now := ms(time.Now())
	for ctx.Err() == nil {
		res, err := s.store.Query(ctx, SystemDB, q)
		if err != nil {
			s.log.Warn("waking a trigger's deliveries", "trigger", id, "err", err)
			return
		}
		for _, doc := range res.Docs {
			if str(doc.Data[fOwner]) == "" && num(doc.Data[fNext]) > now {
				d := &Delivery{ID: doc.ID, version: doc.Version}
				_, _ = s.patchRow(ctx, d, map[string]any{fNext: now})
			}
		}
		if res.NextCursor == "" {
			return
		}
		q.StartAfter = res.NextCursor
	}
}
