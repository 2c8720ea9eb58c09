package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/loomdb/loom/collections"
)

// tinyRetention is short enough to age data within a test.
const tinyRetention = 250 * time.Millisecond

// age waits until everything written so far is older than tinyRetention.
// This is the suite's only sleep: it ages data, it is not an expectation.
func age() { time.Sleep(3 * tinyRetention) }

func testRetention(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		opts Options
		fn   func(*testing.T, *harness)
	}{
		{"Expired", Options{Retention: tinyRetention}, testRetentionExpired},
		{"CursorHoldsBack", Options{Retention: tinyRetention}, testRetentionCursor},
		{"DefaultKeepsRecent", Options{}, testRetentionDefault},
		{"Cursors", Options{}, testCursors},
		{"CommitAdvancesCursor", Options{}, testCommitCursor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t, f, tc.opts))
		})
	}
}

// wantExpired checks that reading after `after` reports an expired position
// and returns the oldest readable one.
func (h *harness) wantExpired(after int64) int64 {
	h.t.Helper()
	cs, err := h.readChanges(after, 10)
	if !errors.Is(err, collections.ErrPositionExpired) {
		h.t.Fatalf("ReadChanges(%d) after retention=%v, %v, want ErrPositionExpired", after, changePaths(cs), err)
	}
	var pe *collections.PositionExpiredError
	if !errors.As(err, &pe) {
		h.t.Fatalf("err=%v (%T), want a *collections.PositionExpiredError", err, err)
	}
	if pe.After != after || pe.Oldest <= after {
		h.t.Errorf("PositionExpiredError after=%d oldest=%d, want after %d and oldest > %d", pe.After, pe.Oldest, after, after)
	}
	// Limit 0 checks the position alone (the trigger registries do, on
	// every commit).
	if cs, err := h.readChanges(after, 0); !errors.As(err, &pe) || len(cs) != 0 || pe.Oldest <= after {
		h.t.Errorf("ReadChanges(%d, 0) after retention=%v, %v, want no change and a *PositionExpiredError", after, changePaths(cs), err)
	}
	h.checkFilteredExpired(after, pe.Oldest)
	return pe.Oldest
}

// testRetentionExpired: once retention purged the log, reading from its start
// says so; live documents stay, tombstones go, Head and seqs never go back.
func testRetentionExpired(t *testing.T, h *harness) {
	h.mustCommit(db, h.create("r/a", `{"n":1}`))
	h.mustCommit(db, h.create("r/b", `{}`))
	h.mustCommit(db, del("r/b"))
	head := h.mustHead()
	age()
	h.mustPurge()

	oldest := h.wantExpired(0)
	if oldest > head {
		t.Errorf("oldest readable position=%d, want <= Head %d", oldest, head)
	}
	for _, c := range h.mustChangesSince(oldest) {
		if c.Seq > head {
			t.Errorf("change %d after Head %d", c.Seq, head)
		}
	}
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after Purge, want %d (never goes back)", got, head)
	}
	wantDoc(t, "live document after Purge", h.mustGet(db, "r/a"), "r/a", 1, `{"n":1}`)
	if docs := h.mustQuery(db, collections.Query{Collection: "r", ShowDeleted: true}).Docs; !slices.Equal(paths(docs), []string{"r/a"}) {
		t.Errorf("showDeleted query after Purge=%v, want [r/a] (tombstone purged)", paths(docs))
	}
	if docs := h.changedSince(db, "r", collections.Checkpoint{}, 10); !slices.Equal(paths(docs), []string{"r/a"}) {
		t.Errorf("ChangedSince after Purge=%v, want [r/a] (tombstone purged)", paths(docs))
	}
	if cs := h.mustReadChanges(head, 10); len(cs) != 0 {
		t.Errorf("ReadChanges(Head) after Purge=%v, want none", changePaths(cs))
	}

	// Seqs are never reused, even with nothing left in the log. The cursor
	// keeps the new change from a background purge while we look at it.
	h.mustSetCursor("hold", head)
	d := h.mustCommitOne(db, h.create("r/c", `{}`))
	if d.Seq <= head {
		t.Errorf("seq of a write after Purge=%d, want > %d", d.Seq, head)
	}
	cs := h.mustReadChanges(head, 10)
	if len(cs) != 1 || cs[0].Seq != d.Seq || cs[0].Path != "r/c" {
		t.Errorf("ReadChanges(%d)=%v, want the new change %d", head, changePaths(cs), d.Seq)
	}
	// Re-creating a document whose tombstone was purged works.
	h.mustCommit(db, h.create("r/b", `{"again":true}`))
}

// testRetentionCursor: a durable cursor keeps the changes after it; deleting
// the cursor lets them go.
func testRetentionCursor(t *testing.T, h *harness) {
	s1 := h.mustCommitOne(db, h.create("r/a", `{}`)).Seq
	h.mustSetCursor("c1", s1)
	h.mustCommit(db, h.create("r/b", `{}`))
	h.mustCommit(db, h.update("r/b", `{"n":1}`))
	h.mustCommit(db, h.update("r/a", `{"n":1}`))
	head := h.mustHead()
	age()
	h.mustPurge()

	cs := h.mustChangesSince(s1)
	if len(cs) != int(head-s1) || cs[len(cs)-1].Seq != head {
		t.Errorf("changes after the cursor at %d=%v, want seqs %d..%d kept", s1, changePaths(cs), s1+1, head)
	}
	if got := h.mustCursor("c1"); got != s1 {
		t.Errorf("Cursor(c1)=%d after Purge, want %d", got, s1)
	}

	ctx, cancel := ctxT()
	defer cancel()
	if err := h.s.DeleteCursor(ctx, "c1"); err != nil {
		t.Fatalf("DeleteCursor: %v", err)
	}
	h.mustPurge()
	h.wantExpired(s1)
	if cs := h.mustReadChanges(head, 10); len(cs) != 0 {
		t.Errorf("ReadChanges(Head) with everything purged=%v, want none", changePaths(cs))
	}
}

// testRetentionDefault: with the default retention, Purge keeps recent
// changes and tombstones.
func testRetentionDefault(t *testing.T, h *harness) {
	h.mustCommit(db, h.create("r/a", `{}`))
	h.mustCommit(db, del("r/a"))
	h.mustPurge()
	if cs := h.mustChangesSince(0); len(cs) != 2 {
		t.Errorf("change log after Purge=%v, want both changes", changePaths(cs))
	}
	if docs := h.mustQuery(db, collections.Query{Collection: "r", ShowDeleted: true}).Docs; len(docs) != 1 || !docs[0].Deleted {
		t.Errorf("showDeleted query after Purge=%v, want the tombstone", docStrings(docs))
	}
}

func testCursors(t *testing.T, h *harness) {
	ctx, cancel := ctxT()
	defer cancel()
	if got := h.mustCursor("nope"); got != 0 {
		t.Errorf("Cursor(unknown)=%d, want 0", got)
	}
	h.mustCommit(db, h.create("r/a", `{}`), h.create("r/b", `{}`), h.create("r/c", `{}`))
	head := h.mustHead()
	h.mustSetCursor("a", head-1)
	if got := h.mustCursor("a"); got != head-1 {
		t.Errorf("Cursor(a)=%d, want %d", got, head-1)
	}
	h.mustSetCursor("a", head)
	h.mustSetCursor("b", head-2)
	if got := h.mustCursor("a"); got != head {
		t.Errorf("Cursor(a) after moving it=%d, want %d", got, head)
	}
	if err := h.s.DeleteCursor(ctx, "a"); err != nil {
		t.Fatalf("DeleteCursor(a): %v", err)
	}
	if got := h.mustCursor("a"); got != 0 {
		t.Errorf("Cursor(a) after DeleteCursor=%d, want 0", got)
	}
	for _, name := range []string{"a", "never"} {
		if err := h.s.DeleteCursor(ctx, name); err != nil {
			t.Errorf("DeleteCursor(%s) of an unknown cursor: %v, want nil", name, err)
		}
	}
	if got := h.mustCursor("b"); got != head-2 {
		t.Errorf("Cursor(b)=%d, want %d", got, head-2)
	}
}

// testCommitCursor: a CursorAdvance commits with the writes or not at all.
func testCommitCursor(t *testing.T, h *harness) {
	h1 := h.mustCommitOne(db, h.create("r/a", `{}`)).Seq
	advance := func(from, to int64, ws ...collections.Write) error {
		_, err := h.commitOpts(db, collections.CommitOptions{Cursor: &collections.CursorAdvance{Name: "trig", From: from, To: to}}, ws...)
		return err
	}
	if err := advance(0, h1, h.create("_outbox/o1", `{}`), h.create("r/x", `{}`)); err != nil {
		t.Fatalf("Commit with a new cursor: %v", err)
	}
	if got := h.mustCursor("trig"); got != h1 {
		t.Errorf("Cursor(trig)=%d, want %d", got, h1)
	}
	h.mustGet(db, "_outbox/o1")
	h.mustGet(db, "r/x")

	head := h.mustHead()
	err := advance(0, head, h.create("_outbox/o2", `{}`), h.create("r/y", `{}`))
	if !errors.Is(err, collections.ErrCursorConflict) {
		t.Fatalf("Commit with a stale From err=%v, want ErrCursorConflict", err)
	}
	h.mustNotFound(db, "_outbox/o2")
	h.mustNotFound(db, "r/y")
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after a cursor conflict, want %d", got, head)
	}
	if got := h.mustCursor("trig"); got != h1 {
		t.Errorf("Cursor(trig)=%d after a conflict, want %d", got, h1)
	}

	if err := advance(h1, head, h.create("_outbox/o2", `{}`)); err != nil {
		t.Fatalf("Commit with the right From: %v", err)
	}
	if got := h.mustCursor("trig"); got != head {
		t.Errorf("Cursor(trig)=%d, want %d", got, head)
	}
	h.mustGet(db, "_outbox/o2")

	// A cursor moved by SetCursor is seen by the next advance.
	h.mustSetCursor("trig", h1)
	if err := advance(head, head, h.create("_outbox/o3", `{}`)); !errors.Is(err, collections.ErrCursorConflict) {
		t.Errorf("Commit after SetCursor moved the cursor err=%v, want ErrCursorConflict", err)
	}
	h.mustNotFound(db, "_outbox/o3")
	// A failing write also leaves the cursor where it was.
	err = advance(h1, head, h.create("_outbox/o4", `{}`), h.create("r/a", `{}`))
	if !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("Commit with a failing write err=%v, want ErrAlreadyExists", err)
	}
	if got := h.mustCursor("trig"); got != h1 {
		t.Errorf("Cursor(trig)=%d after a failed commit, want %d", got, h1)
	}
	h.mustNotFound(db, "_outbox/o4")
}
