package triggers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomdb/loom/collections"
)

// entry is one known trigger.
type entry struct {
	c      *Compiled
	source string
	st     state
	ver    int64 // version of the stored state (0 = not stored)
}

func (e *entry) enabled() bool {
	if e.st.Enabled != nil {
		return *e.st.Enabled
	}
	return e.c.Def.Enabled == nil || *e.c.Def.Enabled
}

// activeTrigger is an immutable snapshot of an enabled trigger.
type activeTrigger struct {
	c          *Compiled
	activeFrom int64
}

// registry owns the trigger definitions and their state: the file and
// registered triggers (entries), their stored state documents (_triggers),
// the counters, and the snapshots the evaluator and the deliverer read
// without locking. Entries are never modified once published: a change
// stores a copy and publishes it (updateEntry).
//
// Every node has its own registry over the same _triggers documents. Their
// writes are logged (collections.IsLogged), so they carry a seq and wake
// Notify, and each registry follows them (follow), so an admin change made
// through one node reaches the others within one Notify round.
type registry struct {
	cfg   *Config
	store collections.Store
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu
	fileErr string            // the last failed reload (guarded by mu)
	// seen is, per trigger, the seq of the newest state change the
	// entries already reflect, for the changes past pos only: this node's
	// own writes, which following brings back later. Guarded by mu.
	seen map[string]int64
	// followMu serializes reading the state changes (follow, and the
	// evaluator through syncTo); it is taken before mu.
	followMu sync.Mutex
	// pos is the seq up to which the state changes are applied: the
	// newest state document read, or the head at load or reload (guarded
	// by followMu; load sets it before Run).
	pos int64
	// checked is a seq up to which no state change is left to apply past
	// pos: the head known to be committed before a read that found none,
	// or a head the engine vouches for (collections.SystemChanges). A
	// commit of any other document then costs no read (guarded by
	// followMu).
	checked int64
	// active is the evaluator's view: enabled triggers sorted by id.
	active atomic.Pointer[[]activeTrigger]
	// snap is a copy of entries for lock-free lookups.
	snap atomic.Pointer[map[string]*entry]

	deltaMu sync.Mutex
	deltas  map[string]*Counts // guarded by deltaMu
}

func newRegistry(cfg *Config, store collections.Store, log *slog.Logger) *registry {
	r := &registry{cfg: cfg, store: store, log: log, entries: map[string]*entry{}, seen: map[string]int64{}, deltas: map[string]*Counts{}}
	r.publishLocked()
	return r
}

// load reads the registered triggers from their state documents and sets
// the file triggers. A registered trigger that no longer compiles (an env
// var went away) must not stop the server: it is left out, and so
// disabled, with an error in the log. head was read before the states:
// follow starts there, so no change of another node is missed.
func (r *registry) load(ctx context.Context, fileTriggers []*Compiled, head int64) error {
	states, err := loadStates(ctx, r.store)
	if err != nil {
		return err
	}
	r.pos = head
	r.mu.Lock()
	for id, sd := range states {
		if !sd.st.registered() {
			continue
		}
		c, err := r.cfg.compile(*sd.st.Def)
		if err != nil {
			r.log.Error("registered trigger does not compile; it stays disabled", "trigger", id, "err", err)
			continue
		}
		r.entries[id] = &entry{c: c, source: SourceAPI, st: sd.st, ver: sd.version}
	}
	r.mu.Unlock()
	return r.setFileTriggers(ctx, fileTriggers, states, head, true)
}

// activeTriggers is the evaluator's snapshot: the enabled triggers sorted
// by id.
func (r *registry) activeTriggers() []activeTrigger { return *r.active.Load() }

// len is the number of triggers (file and registered).
func (r *registry) len() int { return len(*r.snap.Load()) }

// setFileErr records the outcome of the last reload for the admin view.
func (r *registry) setFileErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fileErr = ""
	if err != nil {
		r.fileErr = err.Error()
	}
}

// entry returns the published entry of trigger id (nil when unknown).
func (r *registry) entry(id string) *entry {
	return (*r.snap.Load())[id]
}

// setFileTriggers replaces the file triggers. A trigger seen for the first
// time (or again after it was gone) fires from head on; at startup a
// trigger with stored state keeps its position, so changes committed while
// the server was down still fire.
func (r *registry) setFileTriggers(ctx context.Context, list []*Compiled, states map[string]*stored, head int64, startup bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := make([]*Compiled, 0, len(list))
	for _, c := range list {
		e, ok := r.entries[c.Def.ID]
		switch {
		case !ok || e.source != SourceAPI:
			kept = append(kept, c)
		case r.cfg.builtinSet():
			// The built-in set cannot be edited, and a server that ran
			// without a file may have had its triggers registered.
			r.log.Warn("a registered trigger replaces the built-in one of the same id", "trigger", c.Def.ID)
		default:
			return fmt.Errorf("triggers: %s: triggerId %q is already used by a registered trigger", r.cfg.File, c.Def.ID)
		}
	}
	list = kept
	// The stored states of the triggers this node does not know yet. One
	// another node registered and this node has not read yet (or cannot
	// compile) is not taken over, as a known one is not.
	fresh := map[string]*stored{}
	kept = list[:0:0]
	for _, c := range list {
		id := c.Def.ID
		if r.entries[id] != nil {
			kept = append(kept, c)
			continue
		}
		sd := states[id]
		if !startup || sd == nil {
			st, ver, err := readState(ctx, r.store, id)
			if err != nil {
				return err
			}
			sd = &stored{version: ver}
			if st != nil {
				sd.st = *st
			}
			fresh[id] = sd
		}
		if sd.st.registered() {
			if r.cfg.builtinSet() {
				r.log.Warn("a registered trigger replaces the built-in one of the same id", "trigger", id)
				continue
			}
			return fmt.Errorf("triggers: %s: triggerId %q is already used by a registered trigger", r.cfg.File, id)
		}
		kept = append(kept, c)
	}
	list = kept
	keep := map[string]bool{}
	for _, c := range list {
		id := c.Def.ID
		keep[id] = true
		old := r.entries[id]
		e := &entry{c: c, source: SourceFile}
		switch {
		case old != nil:
			e.st, e.ver = old.st, old.ver
		case startup && states[id] != nil:
			e.st, e.ver = states[id].st, states[id].version
		default:
			if sd := fresh[id]; sd.version > 0 {
				e.st, e.ver = sd.st, sd.version
			}
			e.st.ActiveFrom = head
		}
		e.st.Source = SourceFile
		e.st.Def = nil
		if c.Def.Secret == "" && e.st.Secret == "" {
			e.st.Secret = NewSecret()
		}
		if e.ver == 0 || old == nil {
			v, err := r.saveEntryLocked(ctx, id, e)
			if err != nil {
				return err
			}
			e.ver = v
		}
		r.entries[id] = e
	}
	for id, e := range r.entries {
		if e.source == SourceFile && !keep[id] {
			delete(r.entries, id)
		}
	}
	r.publishLocked()
	return nil
}

// saveEntryLocked stores the state of a file trigger being set up. When
// another node changed the state meanwhile (it set up the same file, or an
// admin switched the trigger), the stored state wins — switch, secrets,
// counters — and only our setup is kept: the source and the position, and
// our generated secret if none is stored. An id another node registered
// meanwhile is refused, as one this node knows.
func (r *registry) saveEntryLocked(ctx context.Context, id string, e *entry) (int64, error) {
	v, seq, err := saveState(ctx, r.store, id, &e.st, e.ver)
	if errors.Is(err, errStateConflict) {
		cur, ver, rerr := readState(ctx, r.store, id)
		if rerr != nil {
			return 0, rerr
		}
		if cur != nil && cur.Source == SourceAPI {
			return 0, fmt.Errorf("triggers: %s: triggerId %q is already used by a registered trigger", r.cfg.File, id)
		}
		if cur != nil {
			setup := e.st
			e.st = *cur
			e.st.Source, e.st.Def, e.st.ActiveFrom = SourceFile, nil, setup.ActiveFrom
			if e.st.Secret == "" {
				e.st.Secret, e.st.SecretShown = setup.Secret, setup.SecretShown
			}
		}
		v, seq, err = saveState(ctx, r.store, id, &e.st, ver)
	}
	if err == nil {
		r.noteSeqLocked(id, seq)
	}
	return v, err
}

// noteSeqLocked records that the entries reflect id's state as of the
// change seq (a write of this node), so that follow skips it and the
// older changes of id it has not read yet.
func (r *registry) noteSeqLocked(id string, seq int64) {
	if seq > r.seen[id] {
		r.seen[id] = seq
	}
}

// publishLocked rebuilds the evaluator snapshot.
func (r *registry) publishLocked() {
	act := make([]activeTrigger, 0, len(r.entries))
	for _, e := range r.entries {
		if e.enabled() {
			act = append(act, activeTrigger{c: e.c, activeFrom: e.st.ActiveFrom})
		}
	}
	sort.Slice(act, func(i, j int) bool { return act[i].c.Def.ID < act[j].c.Def.ID })
	r.active.Store(&act)
	snap := make(map[string]*entry, len(r.entries))
	for id, e := range r.entries {
		snap[id] = e
	}
	r.snap.Store(&snap)
}

// updateEntry applies fn to a copy of a trigger's entry, stores its state
// and publishes the copy. Entries are never modified once published, so
// deliveries read them without locking.
func (r *registry) updateEntry(ctx context.Context, id string, fn func(e *entry) error) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ne, err := r.updateLocked(ctx, id, fn)
	if err != nil {
		return nil, err
	}
	r.publishLocked()
	return ne, nil
}

// maxRefresh bounds how often one update takes another node's concurrent
// change and tries again.
const maxRefresh = 5

// updateLocked applies fn to a copy of id's entry and stores it
// (version-checked). When another node changed the state meanwhile, the
// stored state is applied first, as the change log will bring it, and fn
// runs again on it: one node's change never undoes another's (a counter
// flush never re-enables a trigger another node disabled). fn may run
// more than once.
func (r *registry) updateLocked(ctx context.Context, id string, fn func(e *entry) error) (*entry, error) {
	for attempt := 0; ; attempt++ {
		cur := r.entries[id]
		if cur == nil {
			return nil, fmt.Errorf("%w: trigger %q", ErrNotFound, id)
		}
		ne := *cur
		if err := fn(&ne); err != nil {
			return nil, err
		}
		v, seq, err := saveState(ctx, r.store, id, &ne.st, ne.ver)
		if errors.Is(err, errStateConflict) && attempt < maxRefresh {
			if err := r.refreshLocked(ctx, id); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		ne.ver = v
		r.noteSeqLocked(id, seq)
		r.entries[id] = &ne
		return &ne, nil
	}
}

// refreshLocked applies id's stored state to its entry and publishes it:
// the update that called it may fail after all (the trigger is gone, or
// fn refuses the new state), and following the log will not apply this
// state again (a tombstone finds no entry; seen skips the rest).
func (r *registry) refreshLocked(ctx context.Context, id string) error {
	st, doc, err := readStateDoc(ctx, r.store, id)
	if err != nil {
		return err
	}
	if st == nil {
		if r.applyLocked(id, nil, 0) {
			r.publishLocked()
		}
		return nil
	}
	if r.applyLocked(id, st, doc.Version) {
		r.publishLocked()
	}
	r.noteSeqLocked(id, doc.Seq)
	return nil
}

// applyLocked brings id's entry to its stored state st at version ver
// (nil: the state document is gone) and reports whether the entries
// changed. A registered trigger follows its state: it appears, changes
// and goes away with it. A file trigger's definition is this node's own
// (its triggers.json); only its state (switch, secret, counters, position)
// follows, and a state of a file trigger this node's file does not have is
// ignored. Secrets are never logged.
func (r *registry) applyLocked(id string, st *state, ver int64) bool {
	cur := r.entries[id]
	switch {
	case st == nil:
		if cur == nil {
			return false
		}
		if cur.source == SourceAPI {
			delete(r.entries, id)
			r.takeDeltaOf(id)
			return true
		}
		// The file trigger stays; its next change stores its state again.
		ne := *cur
		ne.ver = 0
		r.entries[id] = &ne
		return true
	case st.registered():
		ne := &entry{source: SourceAPI, st: *st, ver: ver}
		if cur != nil && cur.source == SourceAPI && reflect.DeepEqual(cur.st.Def, st.Def) {
			ne.c = cur.c // the definition did not change (a switch, a counter flush)
		} else {
			c, err := r.cfg.compile(*st.Def)
			if err != nil {
				r.log.Error("registered trigger does not compile on this node; it stays disabled here", "trigger", id, "err", err)
				if cur != nil && cur.source == SourceAPI {
					delete(r.entries, id)
					return true
				}
				return false
			}
			if cur != nil && cur.source == SourceFile {
				r.log.Warn("a registered trigger replaces the file trigger of the same id", "trigger", id)
			}
			ne.c = c
		}
		r.entries[id] = ne
		return true
	case cur == nil:
		return false // a file trigger of another node's file
	case cur.source == SourceAPI:
		// Deleted, and its id now names a file trigger of another node.
		delete(r.entries, id)
		r.takeDeltaOf(id)
		return true
	default:
		ne := *cur
		ne.st, ne.ver = *st, ver
		ne.st.Def = nil
		r.entries[id] = &ne
		return true
	}
}

// follow applies the changes of the trigger states to the entries until
// ctx ends: the admin changes of every node (register, redefine, delete,
// enable, disable, rotate) and their counters. It starts at the head the
// registry was loaded at and wakes on Store.Notify, so another node's
// change is in force here within one notify round. (The evaluator does not
// even wait for that: it catches the registry up, syncTo, before it
// evaluates the changes committed after a state change.)
func (r *registry) follow(ctx context.Context) {
	for ctx.Err() == nil {
		wake := r.store.Notify()
		moved, err := r.stepToHead(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Error("following the trigger states", "after", r.position(), "err", err)
			sleep(ctx, time.Second)
		case !moved:
			select {
			case <-ctx.Done():
			case <-wake:
			case <-time.After(idleRecheck):
			}
		}
	}
}

// position is the seq up to which the state changes are applied.
func (r *registry) position() int64 {
	r.followMu.Lock()
	defer r.followMu.Unlock()
	return r.pos
}

// stepToHead is one step of follow: up to the head read first.
func (r *registry) stepToHead(ctx context.Context) (bool, error) {
	head, err := r.store.Head(ctx)
	if err != nil {
		return false, err
	}
	r.followMu.Lock()
	defer r.followMu.Unlock()
	return r.step(ctx, head)
}

// syncTo applies the state changes up to seq at least (fewer only when
// none is left to read); seq is committed.
func (r *registry) syncTo(ctx context.Context, seq int64) error {
	r.followMu.Lock()
	defer r.followMu.Unlock()
	for max(r.pos, r.checked) < seq {
		moved, err := r.step(ctx, seq)
		if err != nil || !moved {
			return err
		}
	}
	return nil
}

// followBatch is how many state documents one step reads.
const followBatch = 256

// step applies the trigger states changed after pos and reports whether
// pos moved; followMu is held. known is a seq committed before the call:
// when the state changes up to it are applied already (checked), step
// reads nothing, so the commits of other documents, which wake follow and
// the idle evaluator alike, cost one read per node, not one per reader. It reads the _triggers documents changed
// since pos (Store.ChangedSince: each one's latest state, a deleted one's
// tombstone, in seq order), not the whole log, so a node pays only for
// the state changes. A position past the change-log retention (deleted
// triggers' tombstones may be purged too) reloads every state instead.
func (r *registry) step(ctx context.Context, known int64) (bool, error) {
	if known <= max(r.pos, r.checked) {
		return false, nil
	}
	// An engine that knows its commits says whether a trigger state
	// changed at all since checked: most commits are of other documents.
	if sc, ok := r.store.(collections.SystemChanges); ok {
		if last, head := sc.LastSystemChange(); known <= head && last <= max(r.pos, r.checked) {
			r.checked = head
			return false, nil
		}
	}
	// Limit 0: only the position is checked. The change after pos may be
	// any document's, and this runs on every commit.
	if _, err := r.store.ReadChanges(ctx, r.pos, 0); err != nil {
		var pe *collections.PositionExpiredError
		if !errors.As(err, &pe) {
			return false, err
		}
		// Also the normal course when no trigger state changed for a
		// whole retention period (the position moves only on state
		// changes): not worth a warning.
		r.log.Info("the trigger registry's position is past the change-log retention; reloading every trigger state", "pos", r.pos, "oldest", pe.Oldest)
		return true, r.reloadStates(ctx)
	}
	// The checkpoint (pos, "") also returns the document of seq pos: seen
	// already, skipped by applyDocs.
	docs, err := r.store.ChangedSince(ctx, SystemDB, triggerColl, collections.Checkpoint{Seq: r.pos}, followBatch)
	if err != nil {
		return false, err
	}
	from := r.pos
	r.applyDocs(docs)
	if len(docs) < followBatch {
		r.checked = max(r.checked, known) // every state change up to known is read
	}
	return r.pos > from, nil
}

// isStateChange reports whether ch is a change of a trigger's state.
func isStateChange(ch *collections.Change) bool {
	return ch.DB == SystemDB && strings.HasPrefix(ch.Path, triggerColl+"/")
}

// applyDocs applies trigger state documents (tombstones included) read in
// seq order and moves pos to the last one; followMu is held.
func (r *registry) applyDocs(docs []*collections.Document) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	from := r.pos
	for _, doc := range docs {
		id := doc.ID
		if doc.Seq <= from {
			continue
		}
		r.pos = max(r.pos, doc.Seq)
		if doc.Seq <= r.seen[id] {
			continue // this node's own write, or older than it
		}
		var st *state
		if !doc.Deleted {
			s, err := decodeState(doc)
			if err != nil {
				r.log.Error("skipping a malformed trigger state", "seq", doc.Seq, "trigger", id, "err", err)
				continue
			}
			st = &s
		}
		if r.applyLocked(id, st, doc.Version) {
			changed = true
		}
	}
	// Every later state change is past pos: what seen says up to it is
	// done.
	for id, seq := range r.seen {
		if seq <= r.pos {
			delete(r.seen, id)
		}
	}
	if changed {
		r.publishLocked()
	}
}

// reloadStates replaces the state of every entry by the stored one and
// moves pos to the head read before: after a gap in the log (retention),
// the documents are the truth. Registered triggers whose state is gone are
// removed. followMu is held.
func (r *registry) reloadStates(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.store.Head(ctx)
	if err != nil {
		return err
	}
	states, err := loadStates(ctx, r.store)
	if err != nil {
		return err
	}
	for id, sd := range states {
		st := sd.st
		r.applyLocked(id, &st, sd.version)
	}
	for id := range r.entries {
		if states[id] == nil {
			r.applyLocked(id, nil, 0)
		}
	}
	clear(r.seen)
	r.pos = head
	r.publishLocked()
	return nil
}

// setEnabled switches a trigger on or off; reason explains a disable.
// Enabling does not wake the trigger's parked deliveries: the caller does
// (Service.Enable, through the deliverer).
func (r *registry) setEnabled(ctx context.Context, id string, on bool, reason string) error {
	_, err := r.updateEntry(ctx, id, func(e *entry) error {
		e.st.Enabled = &on
		e.st.DisabledReason = ""
		if !on {
			e.st.DisabledReason = reason
		} else {
			e.st.ConsecutiveDead, e.st.DeadOrigins = 0, nil
		}
		return nil
	})
	if err == nil {
		r.log.Info("trigger switched", "trigger", id, "enabled", on, "reason", reason)
	}
	return err
}

// noteError remembers a trigger's last error (stored with the next
// counter flush).
func (r *registry) noteError(e *entry, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.entries[e.c.Def.ID]
	if cur == nil {
		return
	}
	ne := *cur
	ne.st.LastError, ne.st.LastErrorAt = msg, ms(time.Now())
	r.entries[e.c.Def.ID] = &ne
	r.publishLocked()
}

// deliveredOK resets the dead streak. It looks at the trigger's current
// entry, not e: e is the snapshot the attempt started with, and a streak
// that began while the request was out must be reset too.
func (r *registry) deliveredOK(ctx context.Context, e *entry) {
	if cur := r.entry(e.c.Def.ID); cur != nil && (cur.st.ConsecutiveDead > 0 || len(cur.st.DeadOrigins) > 0) {
		_, err := r.updateEntry(ctx, e.c.Def.ID, func(e *entry) error {
			e.st.ConsecutiveDead, e.st.DeadOrigins = 0, nil
			return nil
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			r.log.Warn("resetting a trigger's dead streak", "trigger", e.c.Def.ID, "err", err)
		}
	}
}

// wentDead counts a dead delivery and disables the trigger after too many
// in a row, if they came from enough distinct origins (so one tenant's
// documents that fail the receiver cannot switch the trigger off for
// everyone) and the trigger is not one of the built-in handlers'.
func (r *registry) wentDead(ctx context.Context, e *entry, d *Delivery, msg string) {
	id := e.c.Def.ID
	origin := originOf(d)
	var disable bool
	var origins int
	_, err := r.updateEntry(ctx, id, func(e *entry) error {
		e.st.ConsecutiveDead++
		if len(e.st.DeadOrigins) < r.cfg.DisableOrigins && !slices.Contains(e.st.DeadOrigins, origin) {
			e.st.DeadOrigins = append(slices.Clip(e.st.DeadOrigins), origin)
		}
		e.st.LastError, e.st.LastErrorAt = msg, ms(time.Now())
		origins = len(e.st.DeadOrigins)
		disable = r.cfg.DisableAfterDead > 0 && e.st.ConsecutiveDead >= r.cfg.DisableAfterDead &&
			origins >= r.cfg.DisableOrigins && !r.builtin(e) && e.enabled()
		return nil
	})
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		r.log.Warn("counting a trigger's dead delivery", "trigger", id, "err", err)
	case err == nil && disable:
		if err := r.setEnabled(ctx, id, false, fmt.Sprintf("%d deliveries in a row from %d origins went dead (last: %s)", r.cfg.DisableAfterDead, origins, msg)); err != nil {
			r.log.Error("disabling a trigger whose deliveries keep going dead", "trigger", id, "err", err)
		}
	}
}

// builtin reports whether e delivers to this server's own handlers.
func (r *registry) builtin(e *entry) bool {
	return r.cfg.BuiltinURL != "" && strings.HasPrefix(e.c.Def.URL, r.cfg.BuiltinURL)
}

// count adds to a trigger's counters (flushed to its state every second).
// It has its own lock: a delivery never waits for a flush's store write.
func (r *registry) count(id string, d Counts) {
	r.deltaMu.Lock()
	c := r.deltas[id]
	if c == nil {
		c = &Counts{}
		r.deltas[id] = c
	}
	c.add(d)
	r.deltaMu.Unlock()
}

// takeDeltas removes and returns the counter deltas.
func (r *registry) takeDeltas() map[string]*Counts {
	r.deltaMu.Lock()
	defer r.deltaMu.Unlock()
	d := r.deltas
	r.deltas = map[string]*Counts{}
	return d
}

// takeDeltaOf drops a trigger's unflushed counters (it was deleted).
func (r *registry) takeDeltaOf(id string) {
	r.deltaMu.Lock()
	delete(r.deltas, id)
	r.deltaMu.Unlock()
}

// pendingDelta is the not yet flushed part of a trigger's counters.
func (r *registry) pendingDelta(id string) Counts {
	r.deltaMu.Lock()
	defer r.deltaMu.Unlock()
	if d := r.deltas[id]; d != nil {
		return *d
	}
	return Counts{}
}

func (r *registry) flushLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.flushCounts(ctx)
		}
	}
}

// flushCounts adds the counter deltas to the stored states, all in one
// commit (a flush is logged, for the nodes to follow: one commit wakes
// every consumer of the log once, and costs one sync). When another node
// changed one of the states meanwhile, each state is updated on its own,
// taking the other node's change (updateLocked). Deltas that fail to save
// are put back for the next flush.
func (r *registry) flushCounts(ctx context.Context) {
	deltas := r.takeDeltas()
	if len(deltas) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := len(deltas) > 1 && r.flushTogetherLocked(ctx, deltas)
	for id, d := range deltas {
		_, err := r.updateLocked(ctx, id, func(e *entry) error {
			e.st.Counts.add(*d)
			return nil
		})
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			r.log.Warn("saving trigger counters", "trigger", id, "err", err)
			r.count(id, *d)
		default:
			changed = true
		}
	}
	if changed {
		r.publishLocked()
	}
}

// flushTogetherLocked stores the deltas of every known trigger in one
// commit, version-checked, and removes them from deltas; false (deltas
// untouched) when the commit fails. Deltas of unknown triggers stay, for
// flushCounts to drop.
func (r *registry) flushTogetherLocked(ctx context.Context, deltas map[string]*Counts) bool {
	ids := make([]string, 0, len(deltas))
	news := make([]*entry, 0, len(deltas))
	writes := make([]collections.Write, 0, len(deltas))
	for id, d := range deltas {
		cur := r.entries[id]
		if cur == nil {
			continue
		}
		ne := *cur
		ne.st.Counts.add(*d)
		w, err := stateWrite(id, &ne.st, ne.ver)
		if err != nil {
			return false
		}
		ids, news, writes = append(ids, id), append(news, &ne), append(writes, w)
	}
	if len(writes) < 2 {
		return false
	}
	res, err := r.store.Commit(ctx, SystemDB, writes, collections.CommitOptions{})
	if err != nil {
		return false // each on its own: a state another node changed is refreshed
	}
	for i, id := range ids {
		news[i].ver = res[i].Doc.Version
		r.noteSeqLocked(id, res[i].Doc.Seq)
		r.entries[id] = news[i]
		delete(deltas, id)
	}
	return true
}
