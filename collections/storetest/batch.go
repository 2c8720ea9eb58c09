package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/loomdb/loom/collections"
)

func testBatch(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"FailingWriteAppliesNothing", testBatchAtomic},
		{"ChangesInWriteOrder", testBatchOrder},
		{"SeesEarlierWrites", testBatchVisibility},
		{"Large", testBatchLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t, f, Options{}))
		})
	}
}

// state is what Get says about a path, for before/after comparisons.
func (h *harness) state(path string) string {
	d, err := h.get(db, path)
	switch {
	case errors.Is(err, collections.ErrNotFound):
		return "absent"
	case err != nil:
		return "error: " + err.Error()
	}
	return fmt.Sprintf("v%d %s", d.Version, dataString(d.Data))
}

// testBatchAtomic: when write k of a commit fails, the error names k and
// nothing of the commit is applied: documents and the change log are as
// before.
func testBatchAtomic(t *testing.T, h *harness) {
	h.mustCommit(db,
		h.create("b/exists", `{"n":1}`),
		h.create("b/victim", `{"n":1}`),
	)
	watched := []string{"b/exists", "b/victim", "b/new1", "b/new2", "b/new3", "b/missing", "_outbox/o1"}
	for _, tc := range []struct {
		name   string
		writes []collections.Write
		index  int
		target error
	}{
		{"FirstAlreadyExists", []collections.Write{
			h.create("b/exists", `{}`),
			h.create("b/new1", `{}`),
		}, 0, collections.ErrAlreadyExists},
		{"LastNotFound", []collections.Write{
			h.create("b/new1", `{}`),
			h.update("b/victim", `{"n":2}`),
			h.update("b/missing", `{"n":2}`),
		}, 2, collections.ErrNotFound},
		{"MiddlePrecondition", []collections.Write{
			del("b/victim"),
			h.replace("b/exists", `{"n":9}`, filter("version", "==", num(99))),
			h.create("b/new1", `{}`),
		}, 1, collections.ErrPreconditionFailed},
		{"DeleteTwiceInCommit", []collections.Write{
			h.create("b/new2", `{}`),
			del("b/new2"),
			del("b/new2"),
		}, 2, collections.ErrNotFound},
		{"CreateTwiceInCommit", []collections.Write{
			h.create("b/new3", `{}`),
			h.create("b/new3", `{}`),
		}, 1, collections.ErrAlreadyExists},
		{"UpdateAfterDeleteInCommit", []collections.Write{
			del("b/victim"),
			h.update("b/victim", `{"n":3}`),
		}, 1, collections.ErrNotFound},
		{"PreconditionSeesEarlierWrite", []collections.Write{
			h.update("b/victim", `{"n":5}`),
			h.update("b/victim", `{"n":6}`, filter("n", "==", num(1))),
		}, 1, collections.ErrPreconditionFailed},
		{"WithSystemWrites", []collections.Write{
			h.create("_outbox/o1", `{}`),
			h.create("b/new1", `{}`),
			h.update("b/victim", `{"n":4}`),
			h.create("b/exists", `{}`),
		}, 3, collections.ErrAlreadyExists},
	} {
		before := make(map[string]string)
		for _, p := range watched {
			before[p] = h.state(p)
		}
		head := h.mustHead()
		_, err := h.commit(db, tc.writes...)
		t.Run(tc.name, func(t *testing.T) {
			wantWriteErr(t, err, tc.index, tc.writes[tc.index].Path, tc.target)
			for _, p := range watched {
				if got := h.state(p); got != before[p] {
					t.Errorf("%s=%s after the failed commit, want %s", p, got, before[p])
				}
			}
			if got := h.mustHead(); got != head {
				t.Errorf("Head=%d after the failed commit, want %d", got, head)
			}
			if cs := h.mustReadChanges(head, 10); len(cs) != 0 {
				t.Errorf("failed commit logged %v", changePaths(cs))
			}
		})
	}
}

// testBatchOrder: a successful commit appends its changes in write order
// with consecutive seqs, and each result carries its change's seq.
func testBatchOrder(t *testing.T, h *harness) {
	h.mustCommit(db, h.create("b/victim", `{"n":1}`), h.create("b/exists", `{}`))
	head := h.mustHead()
	writes := []collections.Write{
		h.create("b/m1", `{"i":1}`),
		h.create("b/m2", `{"i":2}`),
		h.update("b/victim", `{"n":2}`),
		del("b/exists"),
		h.replace("b/m3", `{"i":3}`),
		h.replace("b/m1", `{"i":4}`),
	}
	res := h.mustCommit(db, writes...)
	wantCreated := []bool{true, true, false, false, true, false}
	wantOps := []collections.ChangeOp{collections.OpCreate, collections.OpCreate, collections.OpUpdate, collections.OpDelete, collections.OpCreate, collections.OpUpdate}
	cs := h.mustChangesSince(head)
	if len(cs) != len(writes) {
		t.Fatalf("commit of %d writes logged %d changes: %v", len(writes), len(cs), changePaths(cs))
	}
	for i, w := range writes {
		if res[i].Created != wantCreated[i] {
			t.Errorf("write %d (%s %s): Created=%v, want %v", i, w.Type, w.Path, res[i].Created, wantCreated[i])
		}
		c := cs[i]
		if c.Seq != head+int64(i)+1 || c.Path != w.Path || c.Op != wantOps[i] || c.DB != db {
			t.Errorf("change %d=%d %s %s db %q, want %d %s %s db %q", i, c.Seq, c.Op, c.Path, c.DB, head+int64(i)+1, wantOps[i], w.Path, db)
		}
		if res[i].Doc.Seq != c.Seq {
			t.Errorf("write %d result seq=%d, want %d (its change)", i, res[i].Doc.Seq, c.Seq)
		}
		if i > 0 && c.Time < cs[0].Time {
			t.Errorf("change %d time=%d, before change 0 of the same commit (%d)", i, c.Time, cs[0].Time)
		}
	}
	if got := h.mustHead(); got != head+int64(len(writes)) {
		t.Errorf("Head=%d, want %d", got, head+int64(len(writes)))
	}
	wantDoc(t, "b/m1 written twice", h.mustGet(db, "b/m1"), "b/m1", 2, `{"i":4}`)
}

// testBatchVisibility: writes within one commit see the earlier ones.
func testBatchVisibility(t *testing.T, h *harness) {
	head := h.mustHead()
	res := h.mustCommit(db,
		h.create("b/w", `{"a":1}`),
		h.update("b/w", `{"b":2}`),
		h.update("b/w", `{"a":null}`, filter("b", "==", num(2)), filter("version", "==", num(2))),
	)
	for i, r := range res {
		if r.Doc.Version != int64(i+1) {
			t.Errorf("result %d version=%d, want %d", i, r.Doc.Version, i+1)
		}
	}
	wantDoc(t, "result 1", res[1].Doc, "b/w", 2, `{"a":1,"b":2}`)
	wantDoc(t, "Get", h.mustGet(db, "b/w"), "b/w", 3, `{"b":2}`)
	cs := h.mustChangesSince(head)
	if len(cs) != 3 {
		t.Fatalf("changes=%v, want 3", changePaths(cs))
	}
	if cs[0].Before != nil {
		t.Errorf("create change Before=%s, want nil", docString(cs[0].Before))
	}
	if cs[1].Before == nil || cs[1].Before.Version != 1 || !collections.Equal(cs[1].Before.Data, obj(t, `{"a":1}`)) {
		t.Errorf("second change Before=%s, want version 1 {\"a\":1}", docString(cs[1].Before))
	}

	// create, delete, create again in one commit.
	res = h.mustCommit(db, h.create("b/z", `{"x":1}`), del("b/z"), h.create("b/z", `{"x":2}`))
	if !res[2].Created || res[2].Doc.Version != 3 {
		t.Errorf("re-create in the same commit: Created=%v version=%d, want true 3", res[2].Created, res[2].Doc.Version)
	}
	wantDoc(t, "b/z", h.mustGet(db, "b/z"), "b/z", 3, `{"x":2}`)
}

// testBatchLarge commits the API's maximum of 500 writes at once.
func testBatchLarge(t *testing.T, h *harness) {
	head := h.mustHead()
	writes := make([]collections.Write, 500)
	for i := range writes {
		writes[i] = h.create(fmt.Sprintf("big/d%03d", i), fmt.Sprintf(`{"i":%d}`, i))
	}
	res := h.mustCommit(db, writes...)
	for i, r := range res {
		if r.Doc.Seq != head+int64(i)+1 {
			t.Fatalf("write %d seq=%d, want %d", i, r.Doc.Seq, head+int64(i)+1)
		}
	}
	q := collections.Query{Collection: "big", Limit: collections.MaxLimit}
	if docs := h.mustQuery(db, q).Docs; len(docs) != 500 {
		t.Errorf("query returned %d documents, want 500", len(docs))
	}
	// 499 good updates and a bad last one: nothing applied.
	head = h.mustHead()
	for i := range writes {
		writes[i] = h.update(fmt.Sprintf("big/d%03d", i), `{"touched":true}`)
	}
	writes[499] = h.update("big/absent", `{}`)
	_, err := h.commit(db, writes...)
	wantWriteErr(t, err, 499, "big/absent", collections.ErrNotFound)
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after the failed commit, want %d", got, head)
	}
	if d := h.mustGet(db, "big/d000"); d.Version != 1 {
		t.Errorf("big/d000 version=%d after the failed commit, want 1", d.Version)
	}
}
