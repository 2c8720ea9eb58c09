package triggers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/loomdb/loom/collections"
)

// Info is a trigger as the admin API shows it: the definition (never its
// secret) plus where it comes from, its status and counters.
type Info struct {
	Trigger
	Source         string `json:"source"`
	Status         string `json:"status"` // enabled | disabled
	DisabledReason string `json:"disabledReason,omitempty"`
	Counts         Counts `json:"counts"`
	LastError      string `json:"lastError,omitempty"`
	LastErrorAt    int64  `json:"lastErrorAt,omitempty"`
	// SecretRotatingUntil: the previous secret also signs until then.
	SecretRotatingUntil int64 `json:"secretRotatingUntil,omitempty"`
	// FileError is the last failed reload of triggers.json (file triggers).
	FileError string `json:"fileError,omitempty"`
}

// infoLocked builds the view of e; r.mu is held.
func (r *registry) infoLocked(e *entry) Info {
	def := e.c.Def
	def.Secret = ""
	on := e.enabled()
	def.Enabled = &on
	in := Info{Trigger: def, Source: e.source, Status: "enabled", Counts: e.st.Counts,
		LastError: e.st.LastError, LastErrorAt: e.st.LastErrorAt}
	if !on {
		in.Status, in.DisabledReason = "disabled", e.st.DisabledReason
	}
	in.Counts.add(r.pendingDelta(def.ID))
	if e.st.PrevSecret != "" && e.st.PrevUntil > ms(time.Now()) {
		in.SecretRotatingUntil = e.st.PrevUntil
	}
	if e.source == SourceFile {
		in.FileError = r.fileErr
	}
	return in
}

// list returns every trigger, sorted by id. Generated secrets that were
// never shown are returned once in secrets (id → secret).
func (r *registry) list(ctx context.Context) (list []Info, secrets map[string]string, err error) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.entries))
	for id := range r.entries {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		in, secret, err := r.get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		list = append(list, in)
		if secret != "" {
			if secrets == nil {
				secrets = map[string]string{}
			}
			secrets[id] = secret
		}
	}
	return list, secrets, nil
}

// get returns one trigger, and its generated secret if it was never shown.
func (r *registry) get(ctx context.Context, id string) (Info, string, error) {
	var secret string
	e, err := r.updateEntry(ctx, id, func(e *entry) error {
		// fn runs again on another node's newer state (updateLocked): one
		// that has shown the secret meanwhile shows it here no more.
		secret = ""
		if e.c.Def.Secret == "" && !e.st.SecretShown {
			secret = e.st.Secret
			e.st.SecretShown = true
			return nil
		}
		return errUnchanged
	})
	if errors.Is(err, errUnchanged) {
		e = r.entry(id)
		err = nil
		if e == nil {
			err = fmt.Errorf("%w: trigger %q", ErrNotFound, id)
		}
	}
	if err != nil {
		return Info{}, "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infoLocked(e), secret, nil
}

// errUnchanged lets an updateEntry callback skip the write.
var errUnchanged = errors.New("unchanged")

// register adds an external webhook trigger and returns it with its
// signing secret (shown this once).
func (r *registry) register(ctx context.Context, def Trigger) (Info, string, error) {
	c, err := r.cfg.compile(def)
	if err != nil {
		return Info{}, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	head, err := r.store.Head(ctx)
	if err != nil {
		return Info{}, "", err
	}
	secret := c.Def.Secret
	if secret == "" {
		secret = NewSecret()
	}
	stored := def
	stored.Secret = ""
	c.Def.Secret = ""
	e := &entry{c: c, source: SourceAPI, st: state{Source: SourceAPI, Def: &stored, Secret: secret, SecretShown: true, ActiveFrom: head}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[c.Def.ID]; ok {
		return Info{}, "", fmt.Errorf("%w: trigger %q exists", ErrConflict, c.Def.ID)
	}
	// A state left by a deleted trigger of the same id is replaced; that
	// of a trigger another node registered, which this node has not read
	// yet, is not.
	cur, ver, err := readState(ctx, r.store, c.Def.ID)
	if err != nil {
		return Info{}, "", err
	}
	if cur.registered() {
		return Info{}, "", fmt.Errorf("%w: trigger %q exists", ErrConflict, c.Def.ID)
	}
	if ver > 0 {
		e.ver = ver
	}
	ver, seq, err := saveState(ctx, r.store, c.Def.ID, &e.st, e.ver)
	if err != nil {
		if errors.Is(err, errStateConflict) {
			err = fmt.Errorf("%w: trigger %q was registered concurrently", ErrConflict, c.Def.ID)
		}
		return Info{}, "", err
	}
	e.ver = ver
	r.noteSeqLocked(c.Def.ID, seq)
	r.entries[c.Def.ID] = e
	r.publishLocked()
	return r.infoLocked(e), secret, nil
}

// redefine replaces a registered trigger's definition; its counters,
// switches and position are kept, and so is its secret unless def sets one.
func (r *registry) redefine(ctx context.Context, id string, def Trigger) (Info, error) {
	if def.ID == "" {
		def.ID = id
	}
	if def.ID != id {
		return Info{}, fmt.Errorf("%w: triggerId %q in the body does not match the path (%q)", ErrInvalid, def.ID, id)
	}
	c, err := r.cfg.compile(def)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	e, err := r.updateEntry(ctx, id, func(e *entry) error {
		if e.source == SourceFile {
			return fmt.Errorf("%w: trigger %q comes from triggers.json; edit the file and reload", ErrConflict, id)
		}
		if c.Def.Secret != "" {
			e.st.Secret = c.Def.Secret
		}
		stored := def
		stored.Secret = ""
		c.Def.Secret = ""
		e.st.Def = &stored
		e.c = c
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infoLocked(e), nil
}

// remove removes a registered trigger. Its pending deliveries go dead.
func (r *registry) remove(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[id]
	if e == nil {
		return fmt.Errorf("%w: trigger %q", ErrNotFound, id)
	}
	if e.source == SourceFile {
		return fmt.Errorf("%w: trigger %q comes from triggers.json; edit the file and reload", ErrConflict, id)
	}
	res, err := r.store.Commit(ctx, SystemDB, []collections.Write{{Type: collections.WriteDelete, Path: statePath(id)}}, collections.CommitOptions{})
	if err != nil && !errors.Is(err, collections.ErrNotFound) {
		return err
	}
	if err == nil {
		r.noteSeqLocked(id, res[0].Doc.Seq)
	}
	delete(r.entries, id)
	r.takeDeltaOf(id)
	r.publishLocked()
	return nil
}

// rotateSecret replaces the signing secret and returns the new one; the
// previous secret keeps signing too (two signatures) for RotationOverlap.
func (r *registry) rotateSecret(ctx context.Context, id string) (string, error) {
	secret := NewSecret()
	_, err := r.updateEntry(ctx, id, func(e *entry) error {
		if e.c.Def.Secret != "" {
			return fmt.Errorf("%w: trigger %q has its secret in triggers.json; change it there", ErrConflict, id)
		}
		e.st.PrevSecret = e.st.Secret
		e.st.PrevUntil = ms(time.Now().Add(r.cfg.RotationOverlap))
		e.st.Secret = secret
		e.st.SecretShown = true
		return nil
	})
	return secret, err
}

// The admin operations on the triggers themselves are the registry's;
// enabling also wakes the trigger's parked deliveries.

// List returns every trigger, sorted by id. Generated secrets that were
// never shown are returned once in secrets (id → secret).
func (s *Service) List(ctx context.Context) (list []Info, secrets map[string]string, err error) {
	return s.reg.list(ctx)
}

// Len is the number of triggers (file and registered).
func (s *Service) Len() int { return s.reg.len() }

// Get returns one trigger, and its generated secret if it was never shown.
func (s *Service) Get(ctx context.Context, id string) (Info, string, error) {
	return s.reg.get(ctx, id)
}

// IssuesTokens reports whether trigger id exists, is enabled and sends
// Syntrix-format webhooks for database db: what a preIssuedToken it signed
// still needs to be honoured. A token of a trigger deleted, disabled, moved
// to another database or switched to another format is refused from then
// on, not only once it expires. Lock-free (the published snapshot).
func (s *Service) IssuesTokens(id, db string) bool {
	e := s.reg.entry(id)
	return e != nil && e.c != nil && e.c.Def.Format == FormatSyntrix && e.c.Def.Database == db && e.enabled()
}

// Register adds an external webhook trigger and returns it with its
// signing secret (shown this once).
func (s *Service) Register(ctx context.Context, def Trigger) (Info, string, error) {
	return s.reg.register(ctx, def)
}

// Update replaces a registered trigger's definition; its counters,
// switches and position are kept, and so is its secret unless def sets one.
func (s *Service) Update(ctx context.Context, id string, def Trigger) (Info, error) {
	return s.reg.redefine(ctx, id, def)
}

// Delete removes a registered trigger. Its pending deliveries go dead.
func (s *Service) Delete(ctx context.Context, id string) error {
	return s.reg.remove(ctx, id)
}

// Enable switches a trigger on (also after an auto-disable); its parked
// deliveries resume.
func (s *Service) Enable(ctx context.Context, id string) error {
	if err := s.reg.setEnabled(ctx, id, true, ""); err != nil {
		return err
	}
	s.del.wakeTrigger(ctx, id)
	return nil
}

// Disable switches a trigger off: it stops matching new changes and its
// pending deliveries wait.
func (s *Service) Disable(ctx context.Context, id string) error {
	return s.reg.setEnabled(ctx, id, false, "disabled through the admin API")
}

// RotateSecret replaces the signing secret and returns the new one; the
// previous secret keeps signing too (two signatures) for RotationOverlap.
func (s *Service) RotateSecret(ctx context.Context, id string) (string, error) {
	return s.reg.rotateSecret(ctx, id)
}

// DeliveryQuery selects deliveries for the log, newest first (Status
// "scheduled": the soonest due first).
type DeliveryQuery struct {
	TriggerID string
	Status    string // "" (all), pending, scheduled, delivered, dead or canceled
	Limit     int
	Cursor    string
}

// ErrInvalid: a bad admin request (unknown status, bad cursor).
var ErrInvalid = errors.New("invalid")

// A page of the log skips rows its status filter cannot pick out in the
// query (scheduled rows under pending): it reads at most this many pages
// to fill itself, and returns fewer rows (with a cursor) beyond that.
const maxLogPages = 8

// Deliveries returns one page of the delivery log. A pending row that has
// had no attempt and whose deliverAt is ahead is reported as scheduled,
// and only under that status.
func (s *Service) Deliveries(ctx context.Context, dq DeliveryQuery) ([]*Delivery, string, error) {
	now := time.Now()
	limit := dq.Limit
	switch {
	case limit < 0:
		return nil, "", fmt.Errorf("%w: limit must not be negative", ErrInvalid)
	case limit == 0:
		limit = 50
	}
	limit = min(limit, collections.MaxLimit)
	q := collections.Query{
		Collection: outboxColl,
		OrderBy:    []collections.Order{{Field: fSeq, Direction: "desc"}},
		Limit:      limit,
		StartAfter: dq.Cursor,
	}
	if dq.TriggerID != "" && dq.Status != StatusScheduled {
		q.Filters = append(q.Filters, collections.Filter{Field: fTrigger, Op: collections.OpEq, Value: dq.TriggerID})
	}
	keep := func(*Delivery) bool { return true }
	switch dq.Status {
	case "":
	case StatusScheduled:
		q.Filters = append(q.Filters,
			collections.Filter{Field: fStatus, Op: collections.OpEq, Value: StatusPending},
			collections.Filter{Field: fNext, Op: collections.OpGt, Value: ms(now)})
		// On the due-rows index: until its first attempt a scheduled row
		// is due at its deliverAt (nextAttemptAt = deliverAt), so this is
		// deliverAt order; the rows waiting for a retry or leased are
		// skipped (keep).
		q.OrderBy = []collections.Order{{Field: fNext}}
		// A trigger's scheduled rows are picked out of all of them (no
		// index of their own on the outbox's hot path; a page reads at most
		// maxLogPages pages of scheduled rows).
		keep = func(d *Delivery) bool {
			return d.scheduled(now) && (dq.TriggerID == "" || d.TriggerID == dq.TriggerID)
		}
	case StatusPending:
		q.Filters = append(q.Filters, collections.Filter{Field: fStatus, Op: collections.OpEq, Value: dq.Status})
		keep = func(d *Delivery) bool { return !d.scheduled(now) }
	case StatusDelivered, StatusDead, StatusCanceled:
		q.Filters = append(q.Filters, collections.Filter{Field: fStatus, Op: collections.OpEq, Value: dq.Status})
	default:
		return nil, "", fmt.Errorf("%w: status %q (use pending, scheduled, delivered, dead or canceled)", ErrInvalid, dq.Status)
	}
	if err := q.Normalize(); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	out := make([]*Delivery, 0, limit)
	for page := 1; ; page++ {
		res, err := s.cfg.Store.Query(ctx, SystemDB, q)
		if err != nil {
			return nil, "", err
		}
		for _, doc := range res.Docs {
			d, err := decodeDelivery(doc)
			if err != nil {
				return nil, "", err
			}
			if !keep(d) {
				continue
			}
			if d.scheduled(now) {
				d.Status = StatusScheduled
			}
			out = append(out, d)
		}
		if res.NextCursor == "" || len(out) >= limit || page >= maxLogPages {
			return out, res.NextCursor, nil
		}
		// The next page only fills this one: no row is skipped or repeated.
		q.StartAfter, q.Limit = res.NextCursor, limit-len(out)
	}
}

// deliveryRow reads one outbox row by its delivery id.
func (s *Service) deliveryRow(ctx context.Context, id string) (*Delivery, error) {
	doc, err := s.cfg.Store.Get(ctx, SystemDB, outboxColl+"/"+id)
	if errors.Is(err, collections.ErrNotFound) || (err == nil && !collections.ValidSegment(id)) {
		return nil, fmt.Errorf("%w: delivery %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return decodeDelivery(doc)
}

// Replay delivers a row again (a new attempt with the same webhook-id and a
// fresh retry budget). A scheduled row is delivered now.
func (s *Service) Replay(ctx context.Context, id string) error {
	d, err := s.deliveryRow(ctx, id)
	if err != nil {
		return err
	}
	if e := s.reg.entry(d.TriggerID); e == nil || d.Seq <= e.st.ActiveFrom {
		return fmt.Errorf("%w: trigger %q of delivery %q no longer exists", ErrConflict, d.TriggerID, id)
	}
	now := ms(time.Now())
	patch := map[string]any{
		fStatus: StatusPending, fBudget: 0, fNext: now, fOwner: nil, fFinishedAt: nil,
	}
	if d.DeliverAt > now {
		patch[fDeliverAt] = now
	}
	_, err = s.del.patchRow(ctx, d, patch)
	if errors.Is(err, collections.ErrPreconditionFailed) {
		return fmt.Errorf("%w: delivery %q changed concurrently; try again", ErrConflict, id)
	}
	if err == nil {
		s.del.disp.wake(id) // a key head waiting for its retry here goes now
	}
	return err
}

// Cancel finishes a pending (or scheduled) delivery as canceled: it is not
// attempted again. An attempt already in flight may still reach the
// receiver; its outcome is not recorded. A canceled delivery can be
// replayed. ErrConflict when the delivery is finished already.
func (s *Service) Cancel(ctx context.Context, id string) error {
	d, err := s.deliveryRow(ctx, id)
	if err != nil {
		return err
	}
	if d.Status != StatusPending {
		return fmt.Errorf("%w: delivery %q is %s; only a pending or scheduled delivery can be canceled", ErrConflict, id, d.Status)
	}
	_, err = s.del.patchRow(ctx, d, map[string]any{
		fStatus: StatusCanceled, fNext: 0, fOwner: nil, fFinishedAt: ms(time.Now()),
	})
	if errors.Is(err, collections.ErrPreconditionFailed) {
		return fmt.Errorf("%w: delivery %q changed concurrently; try again", ErrConflict, id)
	}
	if err == nil {
		s.log.Info("delivery canceled", "delivery", id, "trigger", d.TriggerID)
		// A key head waiting for its retry here: the rows behind it go now.
		// (On another node they go when that head's retry comes due.)
		s.del.disp.wake(id)
	}
	return err
}

// Purge deletes delivered, dead and canceled outbox rows that finished
// more than the retention ago (the service also does it every 10 minutes).
func (s *Service) Purge(ctx context.Context) error {
	for _, st := range []string{StatusDelivered, StatusDead, StatusCanceled} {
		if err := s.purge(ctx, st, time.Now().Add(-s.cfg.Retention)); err != nil {
			return fmt.Errorf("triggers: purge %s deliveries: %w", st, err)
		}
	}
	return nil
}

// purgeLoop deletes finished outbox rows older than the retention and
// keeps the outbox depth gauge current.
func (s *Service) purgeLoop(ctx context.Context) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	last := time.Now()
	for {
		pending, scheduled := s.countPending(ctx)
		s.m.pending.Store(pending)
		s.m.scheduled.Store(scheduled)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(last) >= 10*time.Minute {
			last = time.Now()
			if err := s.Purge(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("purging the outbox", "err", err)
			}
		}
	}
}

// maxCounted bounds the pending count (the gauge then reads "at least").
const maxCounted = 10000

func (s *Service) countPending(ctx context.Context) (pending, scheduled int64) {
	q := collections.Query{
		Collection: outboxColl,
		Filters:    []collections.Filter{{Field: fStatus, Op: collections.OpEq, Value: StatusPending}},
		OrderBy:    []collections.Order{{Field: fSeq}},
		Limit:      collections.MaxLimit,
	}
	if q.Normalize() != nil {
		return -1, -1
	}
	now := time.Now()
	for pending+scheduled < maxCounted {
		res, err := s.cfg.Store.Query(ctx, SystemDB, q)
		if err != nil {
			return -1, -1
		}
		for _, doc := range res.Docs {
			if scheduledDoc(doc, now) {
				scheduled++
			} else {
				pending++
			}
		}
		if res.NextCursor == "" {
			break
		}
		q.StartAfter = res.NextCursor
	}
	return pending, scheduled
}

// purge deletes rows with status finished before cutoff, oldest first.
// It goes by finishedAt, not seq: a scheduled delivery finishes long after
// the rows that follow it in seq order, and must not hold their purge back.
func (s *Service) purge(ctx context.Context, status string, cutoff time.Time) error {
	q := collections.Query{
		Collection: outboxColl,
		Filters: []collections.Filter{
			{Field: fStatus, Op: collections.OpEq, Value: status},
			{Field: fFinishedAt, Op: collections.OpLt, Value: ms(cutoff)},
		},
		OrderBy: []collections.Order{{Field: fFinishedAt}},
		Limit:   500,
	}
	if err := q.Normalize(); err != nil {
		return err
	}
	for ctx.Err() == nil {
		res, err := s.cfg.Store.Query(ctx, SystemDB, q)
		if err != nil {
			return err
		}
		dels := make([]collections.Write, 0, len(res.Docs))
		for _, doc := range res.Docs {
			dels = append(dels, collections.Write{Type: collections.WriteDelete, Path: doc.Path,
				IfMatch: []collections.Filter{{Field: collections.FieldVersion, Op: collections.OpEq, Value: doc.Version}}})
		}
		if len(dels) > 0 {
			if _, err := s.cfg.Store.Commit(ctx, SystemDB, dels, collections.CommitOptions{}); err != nil && !errors.Is(err, collections.ErrPreconditionFailed) {
				return err
			}
		}
		if res.NextCursor == "" {
			return nil
		}
		q.StartAfter = res.NextCursor
	}
	return ctx.Err()
}
