package triggers

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/loomdb/loom/collections"
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
//
// It is the memory and fairness half of delivery: it decides which rows
// this node holds and when each may run; the deliverer (del) makes the
// attempts and does the outbox reads and claims a key's runner needs.
type dispatcher struct {
	cfg *Config
	del *deliverer
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

	// waiting are the key heads whose runner sleeps until their retry
	// (row id → closed to wake it early: the row was canceled or
	// replayed through the admin API on this node; guarded by mu).
	waiting map[string]chan struct{}
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

func newDispatcher(cfg *Config, del *deliverer) *dispatcher {
	d := &dispatcher{
		cfg:            cfg,
		del:            del,
		sem:            make(chan struct{}, cfg.Workers),
		triggerWorkers: max(1, cfg.Workers*3/4),
		originWorkers:  max(1, cfg.Workers/4),
		triggerSem:     map[string]*share{},
		originSem:      map[string]*share{},
		keyCap:         keyCapOf(cfg.MaxHeld),
		originCap:      originCapOf(cfg.MaxHeld),
		triggerCap:     triggerCapOf(cfg.MaxHeld),
		held:           map[string]heldRow{},
		byKey:          map[string]int{},
		byOrigin:       map[string]int{},
		byTrigger:      map[string]int{},
		keys:           map[string]*keyQueue{},
		waiting:        map[string]chan struct{}{},
		drained:        make(chan struct{}),
	}
	d.ctx, d.stop = context.WithCancel(context.Background())
	return d
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
	return d.reserveFor(dl, force, false)
}

// reserveFor is reserve; refill: for the key's refill, which takes the rows
// waiting in the outbox although the key is marked spilled.
func (d *dispatcher) reserveFor(dl *Delivery, force, refill bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.held[dl.ID]; ok {
		return false
	}
	k, o := queueKey(dl), originKey(dl.event)
	q := d.keys[k]
	// While rows of the key wait in the outbox (spilled), a later row waits
	// behind them there too: the runner refills them together, in seq order,
	// a page per claim commit, instead of meeting each older one as the
	// head of a newer held row and taking it alone (swapIn).
	if !force && (len(d.held) >= d.cfg.MaxHeld || d.byTrigger[dl.TriggerID] >= d.triggerCap ||
		d.byOrigin[o] >= d.originCap || (k != "" && (d.byKey[k] >= d.keyCap || q != nil && q.spilled && !refill))) {
		if q != nil && !refill {
			q.spilled = true // the key's runner looks for it when it has room
			q.refused++
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

// holds reports whether this node holds the row id.
func (d *dispatcher) holds(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.held[id]
	return ok
}

// full reports whether the node holds MaxHeld rows.
func (d *dispatcher) full() bool {
	return d.heldCount() >= d.cfg.MaxHeld
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
		q = newKeyQueue(d, j.d.TriggerID, j.d.OrderingKey)
		d.keys[k] = q
	}
	heap.Push(&q.jobs, j)
	d.mu.Unlock()
	if !start {
		q.poke()
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
	d.del.attempt(d.ctx, j)
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
//
// A row answered 2xx is not recorded before the next one goes: the key's
// recorder stores the answers in order, in one commit for all that wait,
// while the runner sends the next rows (at most keyPipeline answers wait to
// be stored; they stay held until stored, counting against the shares).
// The next row is still sent only once every earlier row of its key was
// answered 2xx (or went dead), one request at a time. What this gives up:
// when a record fails (the row's lease was lost, the store failed) or the
// node dies before its records are stored, the row is delivered again —
// with its webhook-id — after later rows of its key were delivered. A
// failed record stops the pipeline (retake).
func (d *dispatcher) runKey(k string, q *keyQueue) {
	for {
		if q.rec.failedSince() && !d.retake(q) {
			return
		}
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
		if j == nil {
			// Nothing queued, answers still being stored: the runner stays
			// (a new runner of the key would not know which pending rows of
			// the key are answered already) until a row comes or they are stored.
			if !q.waitForWork(d.ctx) {
				return
			}
			continue
		}
		if !q.rec.room(d.ctx) {
			return
		}

		if e := d.del.reg.entry(j.d.TriggerID); e == nil || !e.enabled() {
			// The trigger was disabled (a 410 of the head, say) or deleted:
			// attempt parks the row, or marks it dead, without a request,
			// so rows of a disabled trigger are not held here, each key
			// asking the outbox for its parked head every poll interval.
			// An enable wakes them; the head check keeps their order.
			d.del.attempt(d.ctx, j)
			d.drop(q, j)
			continue
		}

		// A row still being inserted is the head when no older row of its
		// key is pending (older rows of this batch are ahead of it here).
		head, err := d.del.keyHead(d.ctx, j.d, q.rec.unrecorded())
		headID := ""
		if head != nil {
			headID = head.ID
		}
		if err != nil || (headID != j.d.ID && (headID != "" || j.inserted == nil)) {
			if err != nil && d.ctx.Err() == nil {
				d.del.log.Warn("ordering key head lookup", "trigger", j.d.TriggerID, "err", err)
			}
			if err == nil && j.inserted == nil && !d.del.stillPending(d.ctx, j.d) {
				// Finished elsewhere (another node took it over): drop it.
				d.drop(q, j)
				continue
			}
			if err == nil && d.swapIn(k, q, head) {
				continue
			}
			// An older row of the key is pending elsewhere: wait for it
			// (the poller brings it here once its lease ends).
			if !sleep(d.ctx, d.cfg.PollInterval) {
				return
			}
			continue
		}
		out := d.del.attemptKeyed(d.ctx, j, q.rec)
		switch out {
		case done:
			d.drop(q, j)
		case acked:
			d.unqueue(q, j) // held until its recorder stored it
		case retry:
			if !d.sleepHead(j.d.ID, time.Until(time.UnixMilli(j.d.NextAttemptAt))) {
				return
			}
		}
	}
}

// sleepHead waits until the retry of the key head id is due, or until wake
// is called for it; false when the dispatcher stopped.
func (d *dispatcher) sleepHead(id string, wait time.Duration) bool {
	ch := make(chan struct{})
	d.mu.Lock()
	d.waiting[id] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		if d.waiting[id] == ch {
			delete(d.waiting, id)
		}
		d.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.ctx.Done():
		return false
	case <-t.C:
	case <-ch:
	}
	return true
}

// wake ends the retry wait of the key head id, if its runner is here: the
// row was canceled (the rows behind it may go now) or replayed (it is due
// now). The runner looks at its key's head again.
func (d *dispatcher) wake(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.waiting[id]; ok {
		close(ch)
		delete(d.waiting, id)
	}
}

// nextOf returns the key's next row, or asks for a refill when rows of the
// key were left in the outbox and half of the queue's share is free; ok is
// false when the queue is done (it is then removed). A nil row without a
// refill: nothing is queued but the key's recorder still stores answers.
func (d *dispatcher) nextOf(k string, q *keyQueue) (j *job, refill, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := q.jobs.Len()
	if q.spilled && n <= d.keyCap/2 {
		return nil, true, true
	}
	if n == 0 {
		if q.rec.busy() {
			return nil, false, true
		}
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

// retake waits until every answer of q's key is stored or failed, then
// puts the rows whose answer could not be stored back in the queue (they
// are still held), so they go again before any later row; a row no longer
// pending at the version known here (another node took it over, or it was
// canceled) is released instead. False when the dispatcher stopped.
func (d *dispatcher) retake(q *keyQueue) bool {
	if !q.rec.flush(d.ctx) {
		return false
	}
	for _, j := range q.rec.takeFailed() {
		if d.del.stillPending(d.ctx, j.d) {
			d.mu.Lock()
			heap.Push(&q.jobs, j)
			d.mu.Unlock()
		} else {
			d.release(j.d.ID)
		}
	}
	return true
}

// unqueue removes an answered row from its queue; it stays held (and
// counted in the node's, trigger's and origin's shares) until the key's
// recorder stored its answer, but leaves the key's share to the rows
// still to send (keyPipeline bounds the answered ones), so the key's
// refills take full pages while answers are being stored.
func (d *dispatcher) unqueue(q *keyQueue, j *job) {
	d.mu.Lock()
	if i := indexOf(&q.jobs, j); i >= 0 {
		heap.Remove(&q.jobs, i)
	}
	if h, ok := d.held[j.d.ID]; ok && h.key != "" {
		decr(d.byKey, h.key)
		h.key = ""
		d.held[j.d.ID] = h
	}
	q.lastAnswered = max(q.lastAnswered, j.d.Seq)
	d.mu.Unlock()
}

// refill takes the key's due rows that follow the last one queued (or
// answered) here from the outbox, in seq order, up to the key's share, and
// claims them in one commit. The queue stays marked spilled only while it
// took rows and a full page was found or rows were refused meanwhile; rows
// it cannot take now (leased elsewhere, no room) are the poller's. False
// when the dispatcher stopped.
func (d *dispatcher) refill(k string, q *keyQueue) bool {
	d.mu.Lock()
	refused := q.refused    // rows refused from now on are after this page
	after := q.lastAnswered // answered rows may still be pending: they are held here
	for _, j := range q.jobs {
		after = max(after, j.d.Seq)
	}
	room := min(d.keyCap-d.byKey[k], collections.MaxLimit)
	d.mu.Unlock()
	if room <= 0 {
		d.mu.Lock()
		q.spilled = false // set again by the next row refused
		d.mu.Unlock()
		return true
	}
	docs, err := d.del.keyRows(d.ctx, q.trigger, q.key, after, room)
	if err != nil {
		if d.ctx.Err() != nil {
			return false
		}
		d.del.log.Warn("refilling an ordering key from the outbox", "trigger", q.trigger, "err", err)
		d.mu.Lock()
		q.spilled = true
		d.mu.Unlock()
		return sleep(d.ctx, d.cfg.PollInterval)
	}
	// The rows are claimed together: one commit, not one per row (a key
	// that fell behind takes every row of its backlog this way).
	now := time.Now()
	var (
		claim []*job
		e     *entry
		took  int
	)
	for _, doc := range docs {
		if !d.del.dueFor(doc, now) {
			continue
		}
		j, je := d.del.reserveRow(d.ctx, doc, now, false, true)
		switch {
		case j == nil:
		case je == nil:
			d.submit(j) // an unknown trigger: its attempt marks it dead (version-checked)
			took++
		default:
			claim, e = append(claim, j), je
		}
	}
	if len(claim) > 0 {
		for i, ok := range d.del.claimAll(d.ctx, e, claim, now) {
			if ok {
				d.submit(claim[i])
				took++
			} else {
				d.release(claim[i].d.ID)
			}
		}
	}
	d.mu.Lock()
	// Still spilled when this page was full or rows were refused meanwhile,
	// unless nothing could be taken (rows leased elsewhere, no room): those
	// are the poller's, and the runner must not spin on them.
	q.spilled = took > 0 && (len(docs) == room || q.refused != refused)
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
	if head == nil || !d.del.dueFor(head, now) || !d.del.takeOver(d.ctx, head, now, true) {
		return false
	}
	if j := d.evictLast(k, q, head); j != nil {
		d.del.unlease(d.ctx, j)
	}
	return true
}

// evictLast removes the queue's last row when the node, the trigger, the
// key or the head's origin is over its share; nil when nothing was.
func (d *dispatcher) evictLast(k string, q *keyQueue, head *collections.Document) *job {
	d.mu.Lock()
	defer d.mu.Unlock()
	over := len(d.held) > d.cfg.MaxHeld || d.byTrigger[q.trigger] > d.triggerCap || d.byKey[k] > d.keyCap ||
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

// keyQueue is the rows of one ordering key this node holds.
type keyQueue struct {
	trigger, key string
	jobs         jobHeap
	// spilled: rows of the key were refused for want of room and may
	// wait in the outbox; refused counts the refusals (but the refill's).
	spilled bool
	refused int
	// lastAnswered is the seq of the last row its runner saw answered 2xx.
	lastAnswered int64
	// rec stores the key's 2xx answers in order (see runKey).
	rec *keyRecorder
	// pushed wakes the runner waiting for work (a row was queued).
	pushed chan struct{}
}

func newKeyQueue(d *dispatcher, trigger, key string) *keyQueue {
	return &keyQueue{trigger: trigger, key: key, rec: newKeyRecorder(d), pushed: make(chan struct{}, 1)}
}

// poke tells the key's runner a row was queued.
func (q *keyQueue) poke() {
	select {
	case q.pushed <- struct{}{}:
	default:
	}
}

// waitForWork waits until a row is queued or the recorder stored a batch
// (at once when it holds failed rows, or none); false when ctx ended.
func (q *keyQueue) waitForWork(ctx context.Context) bool {
	r := q.rec
	r.mu.Lock()
	now := len(r.failed) > 0 || len(r.pending) == 0
	changed := r.changed
	r.mu.Unlock()
	if now {
		return true
	}
	select {
	case <-q.pushed:
	case <-changed:
	case <-ctx.Done():
		return false
	}
	return true
}

// keyPipeline bounds the 2xx answers of one ordering key that wait to be
// stored: the runner sends no further row of the key while that many wait.
const keyPipeline = 16

// keyRecorder stores the 2xx answers of one ordering key's rows in the
// order they came, all that wait in one commit, while the key's runner
// sends the next rows. Only the key's runner adds to it; a goroutine runs
// while answers wait (started by add, counted in the dispatcher's
// WaitGroup, so a stop waits for it). Each answer counts as an attempt in
// flight until stored, so a drain stores the answers before it ends.
type keyRecorder struct {
	d  *dispatcher
	mu sync.Mutex
	// waiting are the answers not handed to a commit yet; pending those
	// and the ones being committed, in order.
	waiting, pending []*answer
	running          bool // the goroutine runs
	// failed are the rows whose answer could not be stored, still held,
	// until the runner takes them back (retake).
	failed []*job
	// changed is closed (and replaced) each time a commit ends.
	changed chan struct{}
}

func newKeyRecorder(d *dispatcher) *keyRecorder {
	return &keyRecorder{d: d, changed: make(chan struct{})}
}

// add hands over a row's 2xx answer; the row stays held until it is stored.
func (r *keyRecorder) add(a *answer) {
	r.mu.Lock()
	r.waiting = append(r.waiting, a)
	r.pending = append(r.pending, a)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		r.d.wg.Add(1) // the runner calling add is counted: this is not a wg.Add from zero
		go r.run()
	}
}

// run commits the waiting answers, all of them in one commit, until none
// waits.
func (r *keyRecorder) run() {
	defer r.d.wg.Done()
	for {
		r.mu.Lock()
		batch := r.waiting
		r.waiting = nil
		if len(batch) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		failed := r.d.del.recordAll(r.d.ctx, batch)
		for _, a := range batch {
			if !slices.Contains(failed, a) {
				r.d.release(a.j.d.ID)
			}
			r.d.end()
		}
		r.mu.Lock()
		r.pending = append(r.pending[:0:0], r.pending[len(batch):]...)
		for _, a := range failed {
			r.failed = append(r.failed, a.j)
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// state returns how many answers are not stored yet and a channel closed
// at the next change.
func (r *keyRecorder) state() (int, chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending), r.changed
}

// busy reports whether answers are not stored yet, or failed and were not
// taken back.
func (r *keyRecorder) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) > 0 || len(r.failed) > 0
}

// unrecorded returns the ids of the rows answered 2xx and not stored yet:
// the key's head check passes over them.
func (r *keyRecorder) unrecorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(r.pending))
	for i, a := range r.pending {
		ids[i] = a.j.d.ID
	}
	return ids
}

// failedSince reports whether an answer could not be stored since the
// runner last took the failed rows.
func (r *keyRecorder) failedSince() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failed) > 0
}

// takeFailed returns the rows whose answer could not be stored and
// forgets them.
func (r *keyRecorder) takeFailed() []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failed
	r.failed = nil
	return f
}

// flush waits until every answer is stored or failed; false when ctx ended.
func (r *keyRecorder) flush(ctx context.Context) bool {
	return r.waitBelow(ctx, 1)
}

// room waits until fewer than keyPipeline answers wait to be stored.
func (r *keyRecorder) room(ctx context.Context) bool {
	return r.waitBelow(ctx, keyPipeline)
}

func (r *keyRecorder) waitBelow(ctx context.Context, n int) bool {
	for {
		have, changed := r.state()
		if have < n {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
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
