package mongo

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// The batch planner (txn.plan and txn.assign) decides every outcome of a
// group commit without I/O; these tests drive it on prefetched states.

func newTxn(t *testing.T, maxBytes int, existing []*collections.Document, cursors map[string]int64, batch ...*request) *txn {
	t.Helper()
	tx := &txn{s: &Store{cfg: Config{MaxDocumentBytes: maxBytes}}, batch: batch}
	tx.reset()
	// As prefetch: every path written is known, absent or not.
	for _, r := range batch {
		for _, w := range r.writes {
			tx.docs[docKey(r.db, w.Path)] = &state{}
		}
	}
	for _, d := range existing {
		data, err := collections.EncodeData(d.Data, 0)
		if err != nil {
			t.Fatal(err)
		}
		tx.docs[docKey("db", d.Path)] = &state{doc: d, data: data, db: "db", base: d.Version}
	}
	for name, seq := range cursors {
		tx.cursors[name] = &cursorS{seq: seq, present: true}
	}
	return tx
}

func commitReq(writes ...collections.Write) *request {
	return &request{ctx: context.Background(), kind: kindCommit, db: "db", writes: writes}
}

func w(typ collections.WriteType, path, data string, ifMatch ...collections.Filter) collections.Write {
	var m map[string]any
	if data != "" {
		var err error
		if m, err = collections.DecodeObject([]byte(data)); err != nil {
			panic(err)
		}
	}
	return collections.Write{Type: typ, Path: path, Data: m, IfMatch: ifMatch}
}

func wantWriteErr(t *testing.T, r *request, index int, target error) {
	t.Helper()
	var we *collections.WriteError
	if !errors.As(r.Err, &we) || we.Index != index || !errors.Is(r.Err, target) {
		t.Errorf("request err=%v, want a WriteError at %d wrapping %v", r.Err, index, target)
	}
	if r.results != nil {
		t.Errorf("failed request has results %v", r.results)
	}
}

func TestPlan_Batch(t *testing.T) {
	version2 := collections.Filter{Field: "version", Op: collections.OpEq, Value: int64(2)}
	r1 := commitReq(w(collections.WriteCreate, "a/1", `{"n":1}`))
	r2 := commitReq(w(collections.WriteCreate, "a/1", `{}`))
	r3 := commitReq(w(collections.WriteUpdate, "a/1", `{"m":2}`))
	r4 := commitReq(w(collections.WriteCreate, "b/1", `{}`), w(collections.WriteUpdate, "b/missing", `{}`))
	r5 := commitReq(w(collections.WriteDelete, "a/1", "", version2))
	r6 := commitReq(w(collections.WriteReplace, "a/1", `{}`, version2))
	r7 := commitReq(w(collections.WriteCreate, "_outbox/o", `{}`))
	r8 := commitReq(w(collections.WriteReplace, "_triggers/t", `{"on":true}`))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r9 := commitReq(w(collections.WriteCreate, "c/1", `{}`))
	r9.ctx = gone
	old := &collections.Document{Path: "e/1", Collection: "e", ID: "1", Version: 4, CreatedAt: 5, UpdatedAt: 6, Seq: 3,
		Data: map[string]any{"x": map[string]any{"y": "z"}}}
	r10 := commitReq(w(collections.WriteUpdate, "e/1", `{"x":{"w":1}}`))

	tx := newTxn(t, 1<<20, []*collections.Document{old}, nil, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10)
	if n := tx.plan(1000); n != 6 {
		t.Errorf("plan applied %d requests, want 6 (r1 r3 r5 r7 r8 r10)", n)
	}
	tx.assign(11)

	wantWriteErr(t, r2, 0, collections.ErrAlreadyExists)
	wantWriteErr(t, r4, 1, collections.ErrNotFound)
	if d := tx.docs[docKey("db", "b/1")]; d.dirty || d.doc != nil {
		t.Errorf("b/1 of a failed request was staged: %+v", d)
	}
	var pe *collections.PreconditionError
	if !errors.As(r6.Err, &pe) || pe.Current != nil {
		t.Errorf("r6 err=%v, want a PreconditionError without Current (a/1 is a tombstone by then)", r6.Err)
	}
	if !errors.Is(r9.Err, context.Canceled) || r9.results != nil || tx.docs[docKey("db", "c/1")].dirty {
		t.Errorf("cancelled request: err=%v results=%v, want context.Canceled and nothing staged", r9.Err, r9.results)
	}

	if d := r3.results[0].Doc; d.Version != 2 || d.Data["n"] == nil || d.Data["m"] == nil || d.Seq != 12 {
		t.Errorf("r3 result %+v, want version 2 with n and m, seq 12", d)
	}
	if d := r5.results[0].Doc; !d.Deleted || d.Version != 3 || d.Seq != 13 {
		t.Errorf("r5 result %+v, want the tombstone at version 3, seq 13", d)
	}
	if d := r7.results[0].Doc; d.Seq != 0 {
		t.Errorf("system document seq=%d, want 0 (not logged)", d.Seq)
	}
	var got []string
	for _, c := range tx.changes {
		before := int64(-1)
		if c.Before != nil {
			before = c.Before.Seq
		}
		got = append(got, c.Op+" "+c.Path+" "+itoa(c.Seq)+" after.seq="+itoa(c.After.Seq)+" before.seq="+itoa(before))
	}
	want := []string{
		"create a/1 11 after.seq=11 before.seq=-1",
		"update a/1 12 after.seq=12 before.seq=11",
		"delete a/1 13 after.seq=13 before.seq=12",
		"create _triggers/t 14 after.seq=14 before.seq=-1",
		"update e/1 15 after.seq=15 before.seq=3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if tx.logged != 5 {
		t.Errorf("logged=%d, want 5", tx.logged)
	}
	st := tx.docs[docKey("db", "a/1")]
	if !st.dirty || st.base != 0 || !st.doc.Deleted || st.doc.Seq != 13 {
		t.Errorf("a/1 final state %+v (doc %+v), want a dirty tombstone with seq 13 inserted (base 0)", st, st.doc)
	}
	if e := tx.docs[docKey("db", "e/1")]; e.base != 4 || e.doc.Version != 5 || e.doc.CreatedAt != 5 {
		t.Errorf("e/1 state base=%d doc=%+v, want a CAS on version 4 writing version 5 with createdAt kept", e.base, e.doc)
	}
	// The prefetched document is not modified by the patch (a retried
	// attempt starts from the database's state, not from this one's).
	if x := old.Data["x"].(map[string]any); len(x) != 1 {
		t.Errorf("the prefetched document was modified: %v", old.Data)
	}
	if tx.changes[4].Before.Data != `{"x":{"y":"z"}}` {
		t.Errorf("before data=%s", tx.changes[4].Before.Data)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func TestPlan_Cursor(t *testing.T) {
	adv := func(from, to int64, writes ...collections.Write) *request {
		r := commitReq(writes...)
		r.opts.Cursor = &collections.CursorAdvance{Name: "trig", From: from, To: to}
		return r
	}
	r1 := adv(5, 7, w(collections.WriteCreate, "_outbox/1", `{}`))
	r2 := adv(5, 8, w(collections.WriteCreate, "_outbox/2", `{}`)) // r1 moved it
	r3 := &request{ctx: context.Background(), kind: kindSetCursor, name: "trig", seq: 9}
	r4 := adv(9, 10)
	r5 := adv(10, 11, w(collections.WriteCreate, "_outbox/1", `{}`)) // exists: the cursor stays
	r6 := &request{ctx: context.Background(), kind: kindDeleteCursor, name: "other"}
	tx := newTxn(t, 1<<20, nil, map[string]int64{"trig": 5, "other": 1}, r1, r2, r3, r4, r5, r6)
	if n := tx.plan(1000); n != 4 {
		t.Errorf("plan applied %d, want 4", n)
	}
	if !errors.Is(r2.Err, collections.ErrCursorConflict) || tx.docs[docKey("db", "_outbox/2")].dirty {
		t.Errorf("r2 err=%v, want ErrCursorConflict with nothing staged", r2.Err)
	}
	wantWriteErr(t, r5, 0, collections.ErrAlreadyExists)
	if c := tx.cursors["trig"]; c.seq != 10 || !c.present || !c.dirty {
		t.Errorf("cursor trig %+v, want 10 (r4), dirty", c)
	}
	if c := tx.cursors["other"]; c.present || !c.dirty {
		t.Errorf("cursor other %+v, want deleted", c)
	}
	if len(tx.changes) != 0 {
		t.Errorf("system writes logged %d changes", len(tx.changes))
	}
}

func TestPlan_TooLarge(t *testing.T) {
	big := `{"s":"` + strings.Repeat("x", 200) + `"}`
	r1 := commitReq(w(collections.WriteCreate, "a/1", big))
	r2 := commitReq(w(collections.WriteCreate, "_outbox/1", big)) // system documents get the allowance
	tx := newTxn(t, 100, nil, nil, r1, r2)
	tx.plan(1)
	wantWriteErr(t, r1, 0, collections.ErrTooLarge)
	if r2.Err != nil {
		t.Errorf("system document of %d bytes with a 100-byte limit: %v, want the system allowance", len(big), r2.Err)
	}
}

// TestPlan_Retry: a re-run attempt recomputes everything (reset, then a
// fresh prefetch), so it ends exactly as a first attempt would.
func TestPlan_Retry(t *testing.T) {
	old := &collections.Document{Path: "a/1", Collection: "a", ID: "1", Version: 1, Seq: 1, Data: map[string]any{"n": "1"}}
	r1 := commitReq(w(collections.WriteUpdate, "a/1", `{"m":1}`))
	r2 := commitReq(w(collections.WriteCreate, "a/1", `{}`))
	run := func() string {
		tx := newTxn(t, 1<<20, []*collections.Document{old}, nil, r1, r2)
		tx.plan(7)
		tx.assign(2)
		st := tx.docs[docKey("db", "a/1")]
		return itoa(st.doc.Version) + " " + string(st.data) + " " + itoa(st.doc.Seq) + " " + itoa(int64(len(tx.changes)))
	}
	first, second := run(), run()
	if first != second || first != `2 {"m":1,"n":"1"} 2 1` {
		t.Errorf("first attempt %q, retried attempt %q, want both %q", first, second, `2 {"m":1,"n":"1"} 2 1`)
	}
	wantWriteErr(t, r2, 0, collections.ErrAlreadyExists)
}
