package triggers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// Two registries on one store stand for two nodes; nothing runs in the
// background, so each test decides when a registry reads the log.

func openFollowStore(t *testing.T, cfg sqlite.Config) collections.Store {
	t.Helper()
	cfg.Path = filepath.Join(t.TempDir(), "loom.db")
	cfg.Indexes = Indexes
	st, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func loadedRegistry(t *testing.T, st collections.Store) *registry {
	t.Helper()
	ctx := context.Background()
	cfg := &Config{Store: st}
	cfg.setDefaults()
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(cfg, st, cfg.Logger)
	if err := r.load(ctx, nil, head); err != nil {
		t.Fatal(err)
	}
	return r
}

func noteTrigger(id string) Trigger {
	return Trigger{ID: id, Collection: "notes", Events: []string{"create"}, URL: "https://example.com/" + id}
}

// mustRegister registers noteTrigger(id) through r.
func mustRegister(t *testing.T, r *registry, id string) {
	t.Helper()
	if _, _, err := r.register(context.Background(), noteTrigger(id)); err != nil {
		t.Fatal(err)
	}
}

func storedState(t *testing.T, st collections.Store, id string) *state {
	t.Helper()
	s, _, err := readState(context.Background(), st, id)
	if err != nil || s == nil {
		t.Fatalf("state of %s: %v, %v", id, s, err)
	}
	return s
}

// A counter flush on a node that has not read another node's disable yet
// takes the stored state and adds its counts to it: it never switches the
// trigger back on.
func TestFlushKeepsAnotherNodesSwitch(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	a := loadedRegistry(t, st)
	mustRegister(t, a, "x")
	b := loadedRegistry(t, st)
	if err := b.setEnabled(ctx, "x", false, "off through b"); err != nil {
		t.Fatal(err)
	}
	a.count("x", Counts{Delivered: 2})
	a.flushCounts(ctx) // a still has x enabled at the old version
	s := storedState(t, st, "x")
	if s.Enabled == nil || *s.Enabled || s.DisabledReason != "off through b" || s.Counts.Delivered != 2 {
		t.Fatalf("stored after a's flush: enabled=%v reason=%q delivered=%d, want off (b's reason) and 2", s.Enabled, s.DisabledReason, s.Counts.Delivered)
	}
	if a.entry("x").enabled() {
		t.Fatal("a still has x enabled after its flush read b's change")
	}
}

// A registry that fell behind the change-log retention reloads every
// state: a trigger registered meanwhile appears with its switch, one
// deleted meanwhile goes away.
func TestFollowPastRetentionReloads(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{Retention: time.Millisecond, PurgeInterval: -1})
	a := loadedRegistry(t, st)
	mustRegister(t, a, "gone")
	b := loadedRegistry(t, st) // knows "gone", at the head
	mustRegister(t, a, "x")
	if err := a.setEnabled(ctx, "x", false, "off"); err != nil {
		t.Fatal(err)
	}
	if err := a.remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReadChanges(ctx, b.position(), 1); err == nil {
		t.Fatal("the log was not purged past b's position: this test checks nothing")
	}
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.syncTo(ctx, head); err != nil {
		t.Fatal(err)
	}
	if e := b.entry("x"); e == nil || e.enabled() {
		t.Fatalf("b's x after the reload: %+v, want registered and disabled", e)
	}
	if e := b.entry("gone"); e != nil {
		t.Fatal("b still has the trigger deleted while it was behind")
	}
	if got := b.position(); got < head {
		t.Fatalf("b's position %d after the reload, want the head %d", got, head)
	}
}

// nopIntake holds no row: every row waits in the outbox.
type nopIntake struct{}

func (nopIntake) reserve(*Delivery, bool) bool { return false }
func (nopIntake) submit(*job)                  {}

// The evaluator catches its registry up on a state change before it
// evaluates the changes after it, without waiting for follow: a trigger
// registered through another node fires for the very next change, whether
// the evaluator was idle (no trigger known: it skips to the head) or not.
func TestEvaluatorAppliesStateChangesInOrder(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	b := loadedRegistry(t, st) // evaluates; follow does not run
	a := loadedRegistry(t, st)
	m, err := newMetrics(b.cfg.Registerer, st, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	v := &evaluator{cfg: b.cfg, store: st, reg: b, intake: nopIntake{}, log: b.log, m: m, epoch: "e"}
	ev := &evalState{}
	registerThenWrite := func(id string) int64 {
		t.Helper()
		mustRegister(t, a, id)
		res, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: "notes/after-" + id, Data: map[string]any{}}}, collections.CommitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Doc.Seq
	}

	// Idle: b knows no trigger, so the evaluator would skip to the head.
	head := registerThenWrite("x")
	for i := 0; ev.pos < head && i < 3; i++ {
		if err := v.evaluateBatch(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.takeDeltas()["x"]; got == nil || got.Matched != 1 {
		t.Fatalf("x matched %v on b, want 1 change (notes/after-x)", got)
	}

	// Busy: b evaluates every change; the registration is in the batch.
	registerThenWrite("y")
	if err := v.evaluateBatch(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := b.takeDeltas()["y"]; got == nil || got.Matched != 1 {
		t.Fatalf("y matched %v on b in the batch that registered it, want 1 change (notes/after-y)", got)
	}
}

// A node setting up its file triggers from states it read before another
// node changed them takes the stored state: it does not switch back on a
// trigger the other node disabled, nor replace its secret.
func TestFileSetupKeepsAnotherNodesState(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	cfg := &Config{Store: st}
	cfg.setDefaults()
	c, err := Compile(noteTrigger("f"), cfg.Expand)
	if err != nil {
		t.Fatal(err)
	}
	a := newRegistry(cfg, st, cfg.Logger)
	if err := a.load(ctx, []*Compiled{c}, 0); err != nil {
		t.Fatal(err)
	}
	states, err := loadStates(ctx, st) // b starts: it reads the states...
	if err != nil {
		t.Fatal(err)
	}
	if err := a.setEnabled(ctx, "f", false, "off through a"); err != nil { // ...a disables f...
		t.Fatal(err)
	}
	b := newRegistry(cfg, st, cfg.Logger)
	if err := b.setFileTriggers(ctx, []*Compiled{c}, states, 0, true); err != nil { // ...b sets f up from what it read
		t.Fatal(err)
	}
	s := storedState(t, st, "f")
	if s.Enabled == nil || *s.Enabled || s.Secret != a.entry("f").st.Secret {
		t.Fatalf("stored after b's setup: enabled=%v, secret kept=%v; want off and a's secret", s.Enabled, s.Secret == a.entry("f").st.Secret)
	}
	if b.entry("f").enabled() {
		t.Fatal("b has f enabled after its setup met a's disable")
	}
}

// A node that has not read another node's registration yet must not take
// over its state document: a second registration of the id, or a file
// trigger of that id appearing on a reload, is refused (the first admin
// got a secret for it), not written over the registered definition.
func TestNoNodeReplacesAnotherNodesRegistration(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	a := loadedRegistry(t, st)
	b := loadedRegistry(t, st) // at the head: has not read a's registration
	mustRegister(t, a, "x")
	other := noteTrigger("x")
	other.URL = "https://example.org/b"
	if _, _, err := b.register(ctx, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("b registers x again: err=%v, want ErrConflict", err)
	}
	c, err := Compile(noteTrigger("x"), b.cfg.Expand)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.setFileTriggers(ctx, []*Compiled{c}, nil, 0, false); err == nil {
		t.Fatal("b reloads a file with x: no error, want x refused as a registered trigger's id")
	}
	s := storedState(t, st, "x")
	if s.Source != SourceAPI || s.Def == nil || s.Def.URL != "https://example.com/x" || s.Secret != a.entry("x").st.Secret {
		t.Fatalf("stored x after b's attempts: source=%q def=%+v, secret kept=%v; want a's registration", s.Source, s.Def, s.Secret == a.entry("x").st.Secret)
	}
	if e := b.entry("x"); e != nil {
		t.Fatalf("b has x as %s before it read a's registration", e.source)
	}
}

// A generated secret is shown once across the nodes: a node that has not
// read another node's showing yet finds it when it stores its own, and
// shows nothing.
func TestGeneratedSecretShownOnceAcrossNodes(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	cfg := &Config{Store: st}
	cfg.setDefaults()
	c, err := Compile(noteTrigger("f"), cfg.Expand) // no secret: one is generated
	if err != nil {
		t.Fatal(err)
	}
	a := newRegistry(cfg, st, cfg.Logger)
	if err := a.load(ctx, []*Compiled{c}, 0); err != nil {
		t.Fatal(err)
	}
	b := newRegistry(cfg, st, cfg.Logger)
	if err := b.load(ctx, []*Compiled{c}, 0); err != nil {
		t.Fatal(err)
	}
	if _, secret, err := a.get(ctx, "f"); err != nil || secret == "" {
		t.Fatalf("a shows f: secret=%q, %v, want the generated secret", secret, err)
	}
	if _, secret, err := b.get(ctx, "f"); err != nil || secret != "" {
		t.Fatalf("b shows f after a did: secret shown=%v, %v, want none", secret != "", err)
	}
	if !storedState(t, st, "f").SecretShown {
		t.Fatal("f's stored state does not record the showing")
	}
}

// A store write that finds another node's newer state applies it to the
// entries and to what the evaluator and the deliveries read, even when the
// write then fails: a counter flush of a trigger deleted through another
// node, then following the log (which skips what the write already
// applied), leaves no trace of the trigger.
func TestRefreshedStateIsPublished(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	a := loadedRegistry(t, st)
	mustRegister(t, a, "x")
	b := loadedRegistry(t, st)
	if err := a.remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	b.count("x", Counts{Delivered: 1})
	b.flushCounts(ctx) // finds x gone
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.syncTo(ctx, head); err != nil {
		t.Fatal(err)
	}
	if e := b.entry("x"); e != nil {
		t.Fatal("b's deliveries still see x, deleted through a")
	}
	if act := b.activeTriggers(); len(act) != 0 {
		t.Fatalf("b's evaluator still has %d active triggers, want none", len(act))
	}
}

// commitCounter counts the commits made through it.
type commitCounter struct {
	collections.Store
	n atomic.Int64
}

func (c *commitCounter) Commit(ctx context.Context, db string, ws []collections.Write, o collections.CommitOptions) ([]collections.WriteResult, error) {
	c.n.Add(1)
	return c.Store.Commit(ctx, db, ws, o)
}

// A counter flush stores every trigger's counters in one commit: the
// flushes are logged for the nodes to follow, and each commit wakes every
// consumer of the log on every node (and costs a sync). When another node
// changed one of the states meanwhile, each is flushed on its own, taking
// the other node's change.
func TestFlushIsOneCommit(t *testing.T) {
	ctx := context.Background()
	st := &commitCounter{Store: openFollowStore(t, sqlite.Config{})}
	a := loadedRegistry(t, st)
	ids := []string{"x", "y", "z"}
	for _, id := range ids {
		mustRegister(t, a, id)
	}
	b := loadedRegistry(t, st)
	for round, want := range []int64{1, 5} { // then: the batch fails, y takes two tries
		for _, id := range ids {
			a.count(id, Counts{Delivered: 1})
		}
		st.n.Store(0)
		a.flushCounts(ctx)
		if got := st.n.Load(); got != want {
			t.Fatalf("round %d: the flush of 3 triggers made %d commits, want %d", round, got, want)
		}
		for _, id := range ids {
			if s := storedState(t, st, id); s.Counts.Delivered != int64(round+1) {
				t.Fatalf("round %d: %s stored delivered=%d, want %d", round, id, s.Counts.Delivered, round+1)
			}
		}
		if round == 0 {
			if err := b.setEnabled(ctx, "y", false, "off through b"); err != nil { // a has not read it
				t.Fatal(err)
			}
		}
	}
	if s := storedState(t, st, "y"); s.Enabled == nil || *s.Enabled {
		t.Fatal("a's flush switched y back on")
	}
	if len(a.takeDeltas()) != 0 {
		t.Fatal("deltas left after the flushes")
	}
}

// changeReads records the changes read from the log through it.
type changeReads struct {
	collections.Store
	n atomic.Int64
}

func (c *changeReads) ReadChanges(ctx context.Context, after int64, limit int) ([]collections.Change, error) {
	cs, err := c.Store.ReadChanges(ctx, after, limit)
	c.n.Add(int64(len(cs)))
	return cs, err
}

// Following reads the state documents, never a change of the log: the
// change after the registry's position is any document's, up to twice
// the largest document size, and following reads on every commit of
// every node.
func TestFollowReadsNoChange(t *testing.T) {
	ctx := context.Background()
	st := &changeReads{Store: openFollowStore(t, sqlite.Config{})}
	a := loadedRegistry(t, st)
	b := loadedRegistry(t, st)
	mustRegister(t, a, "x")
	if _, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: "notes/big", Data: map[string]any{"text": strings.Repeat("x", 1<<16)}}}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // one notify round each
		if _, err := b.stepToHead(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if b.entry("x") == nil {
		t.Fatal("b did not follow a's registration")
	}
	if n := st.n.Load(); n != 0 {
		t.Fatalf("following read %d changes of the log, want none", n)
	}
}

// stateReads counts the reads of the trigger state documents.
type stateReads struct {
	collections.Store
	n atomic.Int64
}

func (c *stateReads) ChangedSince(ctx context.Context, db, coll string, cp collections.Checkpoint, limit int) ([]*collections.Document, error) {
	c.n.Add(1)
	return c.Store.ChangedSince(ctx, db, coll, cp, limit)
}

// A commit of another document wakes both follow and the idle evaluator
// (syncTo the head): the state documents are read once for it, not once
// per reader, and not at all by a reader that comes after.
func TestFollowReadsStatesOncePerCommit(t *testing.T) {
	ctx := context.Background()
	st := &stateReads{Store: openFollowStore(t, sqlite.Config{})}
	a := loadedRegistry(t, st)
	b := loadedRegistry(t, st)
	if _, _, err := a.register(ctx, noteTrigger("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.stepToHead(ctx); err != nil {
		t.Fatal(err)
	}
	if b.entry("x") == nil {
		t.Fatal("b did not follow a's registration")
	}
	for i := range 3 {
		if _, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: fmt.Sprintf("notes/n%d", i), Data: map[string]any{}}}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
		head, err := st.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := st.n.Load()
		if _, err := b.stepToHead(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.syncTo(ctx, head); err != nil {
			t.Fatal(err)
		}
		if _, err := b.stepToHead(ctx); err != nil {
			t.Fatal(err)
		}
		if n := st.n.Load() - before; n != 1 {
			t.Fatalf("commit %d: the state documents were read %d times, want 1", i, n)
		}
	}
	// A state change past the checked head is still read.
	if err := a.setEnabled(ctx, "x", false, "test"); err != nil {
		t.Fatal(err)
	}
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.syncTo(ctx, head); err != nil {
		t.Fatal(err)
	}
	if e := b.entry("x"); e == nil || e.enabled() {
		t.Fatal("b did not follow a's disable")
	}
}

// systemStateReads counts the state reads of a store that vouches for its
// system changes (collections.SystemChanges), as the SQLite engine does.
type systemStateReads struct {
	stateReads
	sc collections.SystemChanges
}

func (c *systemStateReads) LastSystemChange() (last, head int64) { return c.sc.LastSystemChange() }

// On an engine that knows its commits, a commit of another document costs
// following no read at all, while every state change, of this node or
// another, is still read and applied.
func TestFollowSkipsCommitsOfOtherDocuments(t *testing.T) {
	ctx := context.Background()
	raw := openFollowStore(t, sqlite.Config{})
	st := &systemStateReads{stateReads: stateReads{Store: raw}, sc: raw.(collections.SystemChanges)}
	a := loadedRegistry(t, st)
	b := loadedRegistry(t, st)
	mustRegister(t, a, "x")
	if _, err := b.stepToHead(ctx); err != nil {
		t.Fatal(err)
	}
	if b.entry("x") == nil {
		t.Fatal("b did not follow a's registration")
	}
	for i := range 3 {
		if _, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: fmt.Sprintf("notes/n%d", i), Data: map[string]any{}}}, collections.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
		head, err := st.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := st.n.Load()
		if _, err := b.stepToHead(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.syncTo(ctx, head); err != nil {
			t.Fatal(err)
		}
		if n := st.n.Load() - before; n != 0 {
			t.Fatalf("commit %d of another document: the state documents were read %d times, want 0", i, n)
		}
	}
	// Another node's state change after those commits is read, by follow
	// and by the evaluator's syncTo alike.
	if err := a.setEnabled(ctx, "x", false, "test"); err != nil {
		t.Fatal(err)
	}
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.syncTo(ctx, head); err != nil {
		t.Fatal(err)
	}
	if e := b.entry("x"); e == nil || e.enabled() {
		t.Fatal("b did not follow a's disable")
	}
	mustRegister(t, a, "y")
	if _, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: "notes/after-y", Data: map[string]any{}}}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.stepToHead(ctx); err != nil {
		t.Fatal(err)
	}
	if b.entry("y") == nil {
		t.Fatal("b did not follow a's registration behind a later commit")
	}
}
