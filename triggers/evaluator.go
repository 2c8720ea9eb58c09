package triggers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/loomdb/loom/collections"
)

const (
	// readBatch is how many changes the evaluator reads at a time.
	readBatch = 256
	// commitRows is how many outbox rows one evaluator commit carries at
	// most (a commit always ends at a change boundary).
	commitRows = 256
	// idleRecheck bounds the wait for a commit notification.
	idleRecheck = 5 * time.Second
	// commitTimeout bounds one outbox commit.
	commitTimeout = 30 * time.Second
)

// evaluator turns committed changes into outbox rows. It reads the
// enabled triggers from the registry's snapshot and adds their counters
// there; each new row it can hold it hands to delivery through intake.
type evaluator struct {
	cfg    *Config
	store  collections.Store
	reg    *registry
	intake intake
	log    *slog.Logger
	m      *metrics
	// epoch prefixes the ids of the rows (see initEpoch).
	epoch string
}

// intake is the evaluator's seam to delivery (the dispatcher): reserve
// asks whether this node may hold a new row now (false: the row waits in
// the outbox, due at once, for a poller with room); submit starts a row
// that was reserved, possibly while its insert is still committing.
type intake interface {
	reserve(d *Delivery, force bool) bool
	submit(j *job)
}

// run tails the change log from the durable cursor. For each change
// it evaluates the enabled triggers and inserts one outbox row per match
// in the same transaction that advances the cursor, so a crash at any point
// neither loses nor duplicates a row. One node evaluates at a time: it
// holds the evaluator lease (docs/architecture.md, "Several nodes"), so
// the other nodes' evaluators do not race it (and send no early requests
// for rows they would lose). The cursor advance is a compare-and-set
// besides, so even two evaluators during a lease handover never both insert
// a change's rows.
func (v *evaluator) run(ctx context.Context) {
	var ev *evalState
	var lease time.Time // until when this node holds the evaluator lease
	for ctx.Err() == nil {
		if time.Until(lease) < evalLease/2 {
			until, err := v.claimEvaluator(ctx)
			if err != nil {
				if !errors.Is(err, collections.ErrPreconditionFailed) && ctx.Err() == nil {
					v.log.Warn("claiming the trigger evaluator lease", "err", err)
				}
				ev = nil // another node evaluates; re-read the cursor when we take over
				sleep(ctx, evalLease/4)
				continue
			}
			lease = until
		}
		if ev == nil {
			pos, err := v.store.Cursor(ctx, cursorName)
			if err != nil {
				v.log.Error("reading the trigger cursor", "err", err)
				sleep(ctx, time.Second)
				continue
			}
			ev = &evalState{durable: pos, pos: pos}
		}
		wake := v.store.Notify()
		before := ev.pos
		err := v.evaluateBatch(ctx, ev)
		if err == nil && ev.pos == before {
			// Idle: make a lazily kept position durable once it is
			// lazyAdvanceEvery old, then wait. Not at once: a chain of
			// writes that match nothing (an agent handler's) would pay a
			// cursor commit after each, in the one committer their next
			// write waits for; re-reading those changes after a crash
			// inserts nothing.
			wait := min(idleRecheck, time.Until(lease)-evalLease/2)
			if ev.pos > ev.durable {
				if due := lazyAdvanceEvery - time.Since(ev.advancedAt); due > 0 {
					wait = min(wait, due)
				} else {
					err = v.advance(ctx, ev)
				}
			}
			if err == nil {
				select {
				case <-ctx.Done():
				case <-wake:
				case <-time.After(wait):
				}
				continue
			}
		}
		if err != nil && !v.recoverFrom(ctx, ev, err) {
			return // shut down during a batch: changes past the stored cursor are read again at the next start
		}
	}
	if ev != nil && ev.pos > ev.durable {
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = v.advance(actx, ev)
	}
}

// recoverFrom puts ev back on its feet after a failed batch; false when the
// failure is the shutdown.
func (v *evaluator) recoverFrom(ctx context.Context, ev *evalState, err error) bool {
	var pe *collections.PositionExpiredError
	switch {
	case errors.Is(err, collections.ErrCursorConflict):
		// Another evaluator moved the cursor (a lease handover): go on
		// from there.
		if p, cerr := v.store.Cursor(ctx, cursorName); cerr == nil {
			ev.durable, ev.pos = p, p
		}
	case ctx.Err() != nil:
		return false
	case errors.As(err, &pe):
		// Only possible when the cursor was created after retention
		// purged the log under it: say so loudly, never skip silently.
		v.log.Error("trigger cursor is older than the change-log retention; changes were skipped", "from", ev.pos, "to", pe.Oldest)
		v.m.skipped.Add(float64(pe.Oldest - ev.pos))
		ev.pos = pe.Oldest
		_ = v.advance(ctx, ev)
	default:
		v.log.Error("trigger evaluation", "err", err)
		ev.pos = ev.durable
		sleep(ctx, time.Second)
	}
	return true
}

// evalLease is how long the evaluator lease lasts; the holder renews it at
// half time, and another node takes over at most this long after the holder
// died.
const evalLease = 10 * time.Second

// claimEvaluator takes or renews the evaluator lease (collections.Claim on
// the lease document) and returns its end; ErrPreconditionFailed when
// another node holds it.
func (v *evaluator) claimEvaluator(ctx context.Context) (time.Time, error) {
	now := time.Now()
	_, err := collections.Claim(ctx, v.store, SystemDB, leasePath, v.cfg.NodeID, evalLease, now)
	if errors.Is(err, collections.ErrNotFound) {
		_, err = v.store.Commit(ctx, SystemDB, []collections.Write{{Type: collections.WriteCreate, Path: leasePath, Data: map[string]any{}}}, collections.CommitOptions{})
		if err == nil || errors.Is(err, collections.ErrAlreadyExists) {
			_, err = collections.Claim(ctx, v.store, SystemDB, leasePath, v.cfg.NodeID, evalLease, now)
		}
	}
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(evalLease), nil
}

// evalState is the evaluator's position. durable is the stored cursor;
// pos may run ahead of it over changes that matched nothing: re-reading
// those after a crash inserts nothing (under the same trigger states: a
// state change makes the position before it durable first, as a restarted
// node evaluates with the states at the head), so their advance can wait and ride
// along with the next commit (or a periodic one) instead of costing a
// commit each.
type evalState struct {
	durable, pos int64
	advancedAt   time.Time
	// loggedAt throttles evaluation-error logs to one per trigger per
	// minute (the counter and metric count every one).
	loggedAt map[string]time.Time
}

// lazyAdvance bounds how far and how long the stored cursor may trail.
const (
	lazyAdvanceChanges = 4096
	lazyAdvanceEvery   = time.Second
)

// advance stores ev.pos as the cursor.
func (v *evaluator) advance(ctx context.Context, ev *evalState) error {
	_, err := v.store.Commit(ctx, SystemDB, nil, collections.CommitOptions{
		Cursor: &collections.CursorAdvance{Name: cursorName, From: ev.durable, To: ev.pos},
	})
	if err == nil {
		ev.durable = ev.pos
		ev.advancedAt = time.Now()
	}
	return err
}

// evaluateBatch processes the changes after ev.pos (up to readBatch).
func (v *evaluator) evaluateBatch(ctx context.Context, ev *evalState) error {
	act := v.reg.activeTriggers()
	if len(act) == 0 {
		return v.skipIdle(ctx, ev)
	}
	changes, err := v.readChanges(ctx, ev.pos, act)
	for err == nil && len(changes) > 0 {
		// The triggers may have changed between the look above and the
		// read without a state change in the log (a file reload moves
		// a trigger to another collection and keeps its stored state):
		// the changes committed after that are evaluated with the
		// triggers in force after the read, as a batch read whole always
		// was. When some change was read without its documents for the
		// old set, it is read again for the new one.
		cur := v.reg.activeTriggers()
		if sameTriggers(cur, act) {
			break
		}
		act = cur
		if !withoutData(changes) {
			break
		}
		changes, err = v.readChanges(ctx, ev.pos, act)
	}
	if err != nil || len(changes) == 0 {
		return err
	}
	now := time.Now()
	var rows []*Delivery
	counts := map[string]*Counts{}
	defer func() {
		for id, c := range counts {
			v.reg.count(id, *c)
		}
	}()
	// commit stores the rows matched so far with the cursor at seq.
	commit := func(seq int64) error {
		if err := v.commitRows(ctx, ev.durable, seq, rows, now); err != nil {
			clear(counts) // re-evaluated after the retry
			return err
		}
		ev.durable, ev.pos, ev.advancedAt = seq, seq, now
		rows = rows[:0]
		for id, c := range counts {
			v.reg.count(id, *c)
		}
		clear(counts)
		return nil
	}
	for i := range changes {
		ch := &changes[i]
		if isStateChange(ch) {
			// The changes before it were evaluated without it: make that
			// durable first. A node restarting after a crash loads the
			// states at the head, so it would evaluate them again with
			// this one in force (a trigger switched on just after a write
			// it missed would fire for that write).
			prev := ev.pos
			if i > 0 {
				prev = changes[i-1].Seq
			}
			if len(rows) > 0 {
				if err := commit(prev); err != nil {
					return err
				}
			} else if prev > ev.durable {
				before := ev.pos
				ev.pos = prev
				if err := v.advance(ctx, ev); err != nil {
					ev.pos = before
					clear(counts) // re-evaluated after the retry
					return err
				}
			}
			// An admin change, maybe another node's: the changes after it
			// are evaluated with it in force, as on the node that made it.
			if err := v.reg.syncTo(ctx, ch.Seq); err != nil {
				clear(counts) // re-evaluated after the retry
				return err
			}
			cur := v.reg.activeTriggers()
			if !sameTriggers(cur, act) && withoutData(changes[i+1:]) {
				// They were read for the triggers before this change:
				// one enabled by it may match a change read without
				// its documents. End the batch here; the next one reads
				// them again for the triggers in force now. (A change
				// the registry had applied before the read, such as
				// this node's own, leaves the triggers as read.)
				changes = changes[:i+1]
			}
			act = cur
		}
		rows = v.match(ev, ch, act, now, counts, rows)
		if len(rows) >= commitRows || (len(rows) > 0 && i == len(changes)-1) {
			if err := commit(ch.Seq); err != nil {
				return err
			}
		}
		if i == len(changes)-1 {
			break // the batch may have been cut short above
		}
	}
	ev.pos = changes[len(changes)-1].Seq
	v.m.lagSeconds.Set(time.Since(time.UnixMilli(changes[len(changes)-1].Time)).Seconds())
	if ev.pos > ev.durable && (ev.pos-ev.durable >= lazyAdvanceChanges || time.Since(ev.advancedAt) >= lazyAdvanceEvery) {
		return v.advance(ctx, ev)
	}
	return nil
}

// readChanges reads the batch after `after` for the triggers act. From an
// engine that can (collections.FilteredChangeReader) only the changes one
// of them can match carry their documents: the others (every write of a
// collection no trigger names, every system write) need no decode. match
// never builds an event of such a change, as long as it is given the same
// triggers (see withoutData).
func (v *evaluator) readChanges(ctx context.Context, after int64, act []activeTrigger) ([]collections.Change, error) {
	fr, ok := v.store.(collections.FilteredChangeReader)
	if !ok {
		return v.store.ReadChanges(ctx, after, readBatch)
	}
	return fr.ReadChangesFiltered(ctx, after, readBatch, func(db string, op collections.ChangeOp, path string) bool {
		return canMatch(act, db, op, path)
	})
}

// canMatch reports whether a trigger of act may match a change of db, op
// and path: the test of match before it needs the documents (the
// condition, orderingKey and deliverAt read them; activeFrom is left to
// match).
func canMatch(act []activeTrigger, db string, op collections.ChangeOp, path string) bool {
	if collections.IsSystemPath(path) {
		return false
	}
	coll, _ := collections.SplitDocPath(path)
	for _, t := range act {
		if _, ok := t.c.Match(db, op, coll); ok {
			return true
		}
	}
	return false
}

// sameTriggers reports whether a and b are the same snapshot of the
// registry's enabled triggers (every change of them publishes a new one).
func sameTriggers(a, b []activeTrigger) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// withoutData reports whether one of changes was read without its
// documents (collections.FilteredChangeReader: After is nil only then).
func withoutData(changes []collections.Change) bool {
	for i := range changes {
		if changes[i].After == nil {
			return true
		}
	}
	return false
}

// skipIdle moves ev to the head of the log without reading the changes
// while no trigger is enabled: nothing could match them, and a node
// without triggers should not pay a read of every commit. The head is read
// before the triggers are looked at again, so a trigger enabled in between
// is seen and the batch is evaluated instead; one enabled later starts
// after the head (a new trigger's ActiveFrom is the head when it appears,
// and a disabled one misses what was committed while it was off).
func (v *evaluator) skipIdle(ctx context.Context, ev *evalState) error {
	head, err := v.store.Head(ctx)
	if err != nil || head <= ev.pos {
		return err
	}
	// A trigger registered or enabled through another node up to the head
	// is seen too.
	if err := v.reg.syncTo(ctx, head); err != nil {
		return err
	}
	if len(v.reg.activeTriggers()) > 0 {
		return nil // enabled meanwhile: the next batch reads the changes
	}
	ev.pos = head
	v.m.lagSeconds.Set(0)
	if ev.pos-ev.durable >= lazyAdvanceChanges || time.Since(ev.advancedAt) >= lazyAdvanceEvery {
		return v.advance(ctx, ev)
	}
	return nil
}

// match appends a row for every active trigger that ch matches, counting
// the matches and the failed evaluations in counts. A system change never
// matches: the log carries _triggers (the state the registries follow,
// signing secrets included), and no pattern, not even one naming the
// collection, may turn it into a webhook.
func (v *evaluator) match(ev *evalState, ch *collections.Change, act []activeTrigger, now time.Time, counts map[string]*Counts, rows []*Delivery) []*Delivery {
	if collections.IsSystemPath(ch.Path) {
		return rows
	}
	coll, _ := collections.SplitDocPath(ch.Path)
	for _, t := range act {
		if ch.Seq <= t.activeFrom {
			continue
		}
		params, ok := t.c.Match(ch.DB, ch.Op, coll)
		if !ok {
			continue
		}
		id := t.c.Def.ID
		event := NewEvent(ch, params)
		r, err := t.c.Evaluate(event, now)
		if err != nil {
			v.evalFailed(ev, id, ch, err, now)
			countOf(counts, id).EvalErrors++
			continue
		}
		if !r.Matched {
			continue
		}
		countOf(counts, id).Matched++
		d := &Delivery{TriggerID: id, Seq: ch.Seq, Status: StatusPending, OrderingKey: r.OrderingKey, DeliverAt: r.DeliverAt, event: event.Map()}
		d.ID, d.EventID = deliveryIDs(v.epoch, ch.Seq, id)
		rows = append(rows, d)
	}
	return rows
}

// evalFailed counts a failed condition, ordering key or deliverAt in the
// metric and logs it at most once a minute per trigger.
func (v *evaluator) evalFailed(ev *evalState, id string, ch *collections.Change, err error, now time.Time) {
	v.m.evalErrors.WithLabelValues(id).Inc()
	if now.Sub(ev.loggedAt[id]) < time.Minute {
		return
	}
	if ev.loggedAt == nil {
		ev.loggedAt = map[string]time.Time{}
	}
	ev.loggedAt[id] = now
	v.log.Warn("trigger condition, orderingKey or deliverAt failed; counted as no match (logged once a minute per trigger; see loom_trigger_eval_errors_total)", "trigger", id, "seq", ch.Seq, "path", ch.Path, "err", err)
}

func countOf(m map[string]*Counts, id string) *Counts {
	c := m[id]
	if c == nil {
		c = &Counts{}
		m[id] = c
	}
	return c
}

// commitRows inserts rows and advances the cursor from..to in one commit,
// then hands the rows this node leased to itself to the dispatcher.
func (v *evaluator) commitRows(ctx context.Context, from, to int64, rows []*Delivery, now time.Time) error {
	writes := make([]collections.Write, len(rows))
	var jobs []*job
	for i, d := range rows {
		// Lease the new row to this node when it has room (for the row,
		// its trigger and its ordering key), so the first attempt needs no
		// claim round-trip; otherwise the row waits, due at once, for its
		// key's runner or a poller with room.
		d.NextAttemptAt = ms(now)
		if d.DeliverAt > ms(now) {
			// A scheduled row is neither leased nor held: it waits in the
			// outbox, due at its deliverAt, for whichever poller finds it
			// due then (here or on another node, after any restart).
			d.NextAttemptAt = d.DeliverAt
		} else if e := v.reg.entry(d.TriggerID); e != nil && v.intake.reserve(d, false) {
			lease := now.Add(e.c.Timeout + v.cfg.LeaseSlack)
			d.owner = v.cfg.NodeID
			d.NextAttemptAt = ms(lease)
			jobs = append(jobs, &job{d: d, leasedUntil: lease})
		}
		writes[i] = newRow(d)
	}
	// A new row makes its first request while its insert commits: the
	// commit's fsync is off the latency path. If the commit fails, the
	// request was an early extra delivery: the change is evaluated again
	// and its row (same event id) inserted and delivered.
	for _, j := range jobs {
		j.inserted = make(chan struct{})
		j.d.CreatedAt = ms(now)
		v.intake.submit(j)
	}
	// Shutdown does not interrupt the commit: its requests may already be
	// out, and an abandoned commit leaves them unrecorded.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	res, err := v.store.Commit(cctx, SystemDB, writes, collections.CommitOptions{
		Cursor: &collections.CursorAdvance{Name: cursorName, From: from, To: to},
	})
	byID := make(map[string]int64, len(res))
	for _, r := range res {
		byID[r.Doc.ID] = r.Doc.Version
	}
	for _, j := range jobs {
		j.d.version = byID[j.d.ID]
		j.d.CreatedAt = ms(now)
		j.insertErr = err
		close(j.inserted)
	}
	if err != nil {
		return err
	}
	for _, d := range rows {
		v.m.matches.WithLabelValues(d.TriggerID).Inc()
	}
	return nil
}

// sleep waits d or until ctx is done; false when ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
