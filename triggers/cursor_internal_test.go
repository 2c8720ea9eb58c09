package triggers

import (
	"context"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/collections/sqlite"
)

// A change that matched nothing is re-read after a crash only under the
// trigger states it was evaluated with: the evaluator makes its lazily kept
// position durable before it applies a state change. Otherwise a trigger
// enabled just after a write it missed (or whose condition changed) fires
// for that write after the restart, though it was off when it was made.
func TestCrashAfterAStateChangeDoesNotReevaluateUnderIt(t *testing.T) {
	ctx := context.Background()
	st := openFollowStore(t, sqlite.Config{})
	a := loadedRegistry(t, st)
	mustRegister(t, a, "x")
	if err := a.setEnabled(ctx, "x", false, "off"); err != nil {
		t.Fatal(err)
	}
	// y stays enabled elsewhere, so the evaluator reads every change.
	if _, _, err := a.register(ctx, Trigger{ID: "y", Collection: "other", Events: []string{"create"}, URL: "https://example.com/y"}); err != nil {
		t.Fatal(err)
	}
	b := loadedRegistry(t, st) // the evaluating node's
	m, err := newMetrics(b.cfg.Registerer, st, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	v := &evaluator{cfg: b.cfg, store: st, reg: b, intake: nopIntake{}, log: b.log, m: m, epoch: "e"}
	head, err := st.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.Cursor(ctx, cursorName)
	if err != nil {
		t.Fatal(err)
	}
	ev := &evalState{durable: stored, pos: stored}
	for i := 0; ev.pos < head && i < 3; i++ {
		if err := v.evaluateBatch(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	ev.advancedAt = time.Now() // the cursor was just stored: the next advances are lazy

	// A note while x is off, then x switched on; the evaluator reads both.
	if _, err := st.Commit(ctx, "default", []collections.Write{{Type: collections.WriteCreate, Path: "notes/n1", Data: map[string]any{}}}, collections.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.setEnabled(ctx, "x", true, ""); err != nil {
		t.Fatal(err)
	}
	if head, err = st.Head(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; ev.pos < head && i < 3; i++ {
		if err := v.evaluateBatch(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if !b.entry("x").enabled() {
		t.Fatal("the evaluator did not apply x's switch: this test checks nothing")
	}
	if got := b.takeDeltas()["x"]; got != nil && got.Matched != 0 {
		t.Fatalf("x matched %d changes, want none", got.Matched)
	}

	// The node crashes now (no shutdown stores the cursor) and restarts:
	// its registry is loaded at the head, its evaluator starts at the cursor.
	if stored, err = st.Cursor(ctx, cursorName); err != nil {
		t.Fatal(err)
	}
	c := loadedRegistry(t, st)
	w := &evaluator{cfg: c.cfg, store: st, reg: c, intake: nopIntake{}, log: c.log, m: m, epoch: "e2"}
	ev = &evalState{durable: stored, pos: stored, advancedAt: time.Now()}
	for i := 0; ev.pos < head && i < 3; i++ {
		if err := w.evaluateBatch(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.takeDeltas()["x"]; got != nil && got.Matched != 0 {
		t.Fatalf("after the restart x matched %d changes made while it was off, want none", got.Matched)
	}
}
