package triggers

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/loomdb/loom/collections"
)

const (
	// pollBatch bounds the rows one poll claims (and is its page size).
	pollBatch = 256
	// pollScan bounds the due rows one poll looks at.
	pollScan = 4 * pollBatch
)

// poll finds due rows (retries, expired leases, rows inserted while this
// node was full) and rows this node leased before a restart, claims them
// and starts them.
func (dv *deliverer) poll(ctx context.Context) {
	dv.adoptOwn(ctx)
	t := time.NewTicker(dv.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := dv.pollOnce(ctx); err != nil && ctx.Err() == nil {
			dv.log.Warn("polling the outbox", "err", err)
		}
	}
}

// pollOnce claims up to pollBatch due rows, looking at no more than
// pollScan of them. Due rows it cannot take (held here already, or their
// key or trigger holds its share) stay where they are, so each poll goes
// on where the last one stopped and wraps around at the end: however many
// rows one blocked key leaves due in the outbox, every due row is looked at
// within a bounded number of polls, and a poll's work stays bounded.
func (dv *deliverer) pollOnce(ctx context.Context) error {
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
	q.StartAfter = dv.pollFrom
	if err := q.Normalize(); err != nil {
		dv.pollFrom = ""
		return err
	}
	wrapped := q.StartAfter == ""
	claimed, scanned := 0, 0
	for claimed < pollBatch && scanned < pollScan && !dv.disp.full() {
		res, err := dv.queryRaw(ctx, q)
		if err != nil {
			dv.pollFrom = ""
			return err
		}
		for _, doc := range res.Docs {
			scanned++
			// A row held here (queued behind its key, or answered and
			// being recorded) is not decoded again: takeOver would refuse it.
			if dv.disp.holds(doc.ID) {
				continue
			}
			if dv.takeOver(ctx, doc, now, false) {
				claimed++
			}
		}
		if dv.disp.full() {
			return nil // this page is looked at again when there is room
		}
		if res.NextCursor == "" {
			// The end: the next page starts at the front again.
			dv.pollFrom, q.StartAfter = "", ""
			if wrapped {
				return nil
			}
			wrapped = true
			continue
		}
		dv.pollFrom, q.StartAfter = res.NextCursor, res.NextCursor
	}
	return nil
}

// adoptOwn takes back the pending rows leased to this node before it
// restarted, without waiting for their leases to end. The store picks them
// out: a backlog of other rows is not read (with its payloads) at start-up.
func (dv *deliverer) adoptOwn(ctx context.Context) {
	q := collections.Query{
		Collection: outboxColl,
		Filters: []collections.Filter{
			{Field: fStatus, Op: collections.OpEq, Value: StatusPending},
			{Field: fOwner, Op: collections.OpEq, Value: dv.cfg.NodeID},
		},
		OrderBy: []collections.Order{{Field: fSeq}},
		Limit:   collections.MaxLimit,
	}
	if err := q.Normalize(); err != nil {
		return
	}
	now := time.Now()
	for ctx.Err() == nil {
		res, err := dv.store.Query(ctx, SystemDB, q)
		if err != nil {
			if ctx.Err() == nil {
				dv.log.Warn("adopting outbox rows", "err", err)
			}
			return
		}
		for _, doc := range res.Docs {
			dv.takeOver(ctx, doc, now, false)
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
func (dv *deliverer) takeOver(ctx context.Context, doc *collections.Document, now time.Time, force bool) bool {
	j, e := dv.reserveRow(ctx, doc, now, force, false)
	if j == nil {
		return false
	}
	if e != nil && !dv.claim(ctx, j, e, now) {
		dv.disp.release(j.d.ID)
		return false
	}
	// A row of an unknown trigger is started unclaimed: its attempt marks
	// it dead (version-checked).
	dv.disp.submit(j)
	return true
}

// reserveRow is takeOver up to the claim: the row reserved here as a job,
// and its trigger (nil when unknown); a nil job when it is not to be taken.
// refill: for its key's refill (dispatcher.reserveFor).
func (dv *deliverer) reserveRow(ctx context.Context, doc *collections.Document, now time.Time, force, refill bool) (*job, *entry) {
	if err := doc.DecodeRaw(); err != nil {
		dv.log.Error("skipping a malformed outbox row", "err", err)
		return nil, nil
	}
	d, err := decodeDelivery(doc)
	if err != nil {
		dv.log.Error("skipping a malformed outbox row", "err", err)
		return nil, nil
	}
	if d.Status != StatusPending {
		return nil, nil
	}
	e := dv.reg.entry(d.TriggerID)
	if e != nil && !e.enabled() {
		dv.park(ctx, d, now)
		return nil, nil
	}
	if !dv.disp.reserveFor(d, force, refill) {
		return nil, nil
	}
	return &job{d: d}, e
}

// wakeTrigger makes the parked pending rows of a trigger due now (not the
// scheduled ones, whose deliverAt is still ahead).
func (dv *deliverer) wakeTrigger(ctx context.Context, id string) {
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
		res, err := dv.store.Query(ctx, SystemDB, q)
		if err != nil {
			dv.log.Warn("waking a trigger's deliveries", "trigger", id, "err", err)
			return
		}
		for _, doc := range res.Docs {
			// A scheduled row is not parked: it stays due at its deliverAt.
			if str(doc.Data[fOwner]) == "" && num(doc.Data[fNext]) > now && num(doc.Data[fDeliverAt]) <= now {
				d := &Delivery{ID: doc.ID, version: doc.Version}
				_, _ = dv.patchRow(ctx, d, map[string]any{fNext: now})
			}
		}
		if res.NextCursor == "" {
			return
		}
		q.StartAfter = res.NextCursor
	}
}

// keyHead returns the oldest pending row of d's ordering key, passing over
// the rows in answered (answered 2xx by this node's runner of the key, their
// record not stored yet); nil when there is none. The rows are read without
// decoding their payloads where the engine allows it: only a head that is
// not d's own row is decoded (the caller reads its fields).
func (dv *deliverer) keyHead(ctx context.Context, d *Delivery, answered []string) (*collections.Document, error) {
	q, err := keyQuery(d.TriggerID, d.OrderingKey, 0, len(answered)+1)
	if err != nil {
		return nil, err
	}
	res, err := dv.queryRaw(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, doc := range res.Docs {
		if slices.Contains(answered, doc.ID) {
			continue
		}
		if doc.ID != d.ID {
			if err := doc.DecodeRaw(); err != nil {
				return nil, err
			}
		}
		return doc, nil
	}
	return nil, nil
}

// keyRows returns up to limit pending rows of an ordering key with a seq
// after after, in seq order.
func (dv *deliverer) keyRows(ctx context.Context, trigger, key string, after int64, limit int) ([]*collections.Document, error) {
	q, err := keyQuery(trigger, key, after, limit)
	if err != nil {
		return nil, err
	}
	res, err := dv.store.Query(ctx, SystemDB, q)
	if err != nil {
		return nil, err
	}
	return res.Docs, nil
}

// keyQuery is the normalized query of keyRows.
func keyQuery(trigger, key string, after int64, limit int) (collections.Query, error) {
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
	err := q.Normalize()
	return q, err
}

// queryRaw reads outbox rows, leaving their stored encoding undecoded
// (Data nil) where the engine allows it (collections.RawReader): the caller
// decodes only the rows it reads the fields of (DecodeRaw).
func (dv *deliverer) queryRaw(ctx context.Context, q collections.Query) (collections.QueryResult, error) {
	if rr, ok := dv.store.(collections.RawReader); ok {
		return rr.QueryRaw(ctx, SystemDB, q)
	}
	return dv.store.Query(ctx, SystemDB, q)
}

// eventOf is the event an outbox row carries.
func eventOf(doc *collections.Document) map[string]any {
	ev, _ := doc.Data[fPayload].(map[string]any)
	return ev
}

// dueFor reports whether a pending row may be taken by this node now: its
// lease or retry wait is over, or it is leased to this node already.
func (dv *deliverer) dueFor(doc *collections.Document, now time.Time) bool {
	return num(doc.Data[fNext]) <= ms(now) || str(doc.Data[fOwner]) == dv.cfg.NodeID
}

// stillPending reports whether d's row is still pending at the version this
// node knows (errors count as yes: the row is looked at again later).
func (dv *deliverer) stillPending(ctx context.Context, d *Delivery) bool {
	doc, err := dv.store.Get(ctx, SystemDB, outboxColl+"/"+d.ID)
	if errors.Is(err, collections.ErrNotFound) {
		return false
	}
	return err != nil || (doc.Version == d.version && str(doc.Data[fStatus]) == StatusPending)
}

// unlease gives back this node's lease on a row it no longer holds, so the
// row is due at once for whoever has room (if the write fails, the lease
// simply runs out).
func (dv *deliverer) unlease(ctx context.Context, j *job) {
	if !j.stored(ctx) {
		return // its insert failed: the change is evaluated again
	}
	_, _ = dv.patchRow(ctx, j.d, map[string]any{fOwner: nil, fNext: ms(time.Now())})
}
