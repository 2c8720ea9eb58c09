package storetest

import (
	"errors"
	"testing"

	"github.com/loomdb/loom/collections"
)

// wantPrecondition checks that err is a precondition failure of write index
// carrying the current document (nil when wantCurrent is 0).
func wantPrecondition(t *testing.T, err error, index int, path string, wantCurrent int64) {
	t.Helper()
	wantWriteErr(t, err, index, path, collections.ErrPreconditionFailed)
	var pe *collections.PreconditionError
	if !errors.As(err, &pe) {
		t.Fatalf("err=%v, want a *collections.PreconditionError", err)
	}
	switch {
	case wantCurrent == 0 && pe.Current != nil && !pe.Current.Deleted:
		t.Errorf("PreconditionError.Current=%s, want nil (no live document)", docString(pe.Current))
	case wantCurrent != 0 && pe.Current == nil:
		t.Errorf("PreconditionError.Current=nil, want the document at version %d", wantCurrent)
	case wantCurrent != 0 && (pe.Current.Version != wantCurrent || pe.Current.Path != path):
		t.Errorf("PreconditionError.Current=%s, want %s at version %d", docString(pe.Current), path, wantCurrent)
	}
}

func testPreconditions(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	const path = "tasks/t1"
	h.mustCommit(db, h.create(path, `{"status":"open","n":1,"meta":{"owner":"ann"}}`))

	// version ==, as json.Number (from the API) and as int64 (from Claim).
	d := h.mustCommitOne(db, h.update(path, `{"n":2}`, filter("version", "==", num(1))))
	if d.Version != 2 {
		t.Fatalf("version=%d, want 2", d.Version)
	}
	h.mustCommit(db, h.update(path, `{"n":3}`, filter("version", "==", int64(2))))

	head := h.mustHead()
	_, err := h.commit(db, h.update(path, `{"n":99}`, filter("version", "==", num(2))))
	wantPrecondition(t, err, 0, path, 3)
	var pe *collections.PreconditionError
	if errors.As(err, &pe) && pe.Current != nil && !collections.Equal(pe.Current.Data, obj(t, `{"status":"open","n":3,"meta":{"owner":"ann"}}`)) {
		t.Errorf("PreconditionError.Current data=%s, want the stored data", dataString(pe.Current.Data))
	}
	wantDoc(t, "after a failed precondition", h.mustGet(db, path), path, 3, `{"status":"open","n":3,"meta":{"owner":"ann"}}`)
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after a failed precondition, want %d", got, head)
	}

	// Data-field predicates, AND-ed.
	for _, tc := range []struct {
		name    string
		ifMatch []collections.Filter
		ok      bool
	}{
		{"FieldEq", []collections.Filter{filter("status", "==", "open")}, true},
		{"FieldEqWrongClass", []collections.Filter{filter("n", "==", "4")}, false},
		{"Dotted", []collections.Filter{filter("meta.owner", "==", "ann")}, true},
		{"AllTrue", []collections.Filter{filter("status", "==", "open"), filter("n", "<", num(100)), filter("meta.owner", "in", []any{"bob", "ann"})}, true},
		{"OneFalse", []collections.Filter{filter("status", "==", "open"), filter("n", ">", num(100))}, false},
		{"LastFalse", []collections.Filter{filter("version", ">=", num(1)), filter("meta.owner", "!=", "ann")}, false},
		{"MissingEqNull", []collections.Filter{filter("nope", "==", nil)}, false},
		{"MissingNe", []collections.Filter{filter("nope", "!=", num(1))}, true},
		{"Prefix", []collections.Filter{filter("status", "prefix", "op")}, true},
	} {
		cur := h.mustGet(db, path)
		_, err := h.commit(db, h.update(path, `{"touched":"`+tc.name+`"}`, tc.ifMatch...))
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: err=%v, want success", tc.name, err)
		case !tc.ok:
			if !errors.Is(err, collections.ErrPreconditionFailed) {
				t.Errorf("%s: err=%v, want ErrPreconditionFailed", tc.name, err)
			} else if got := h.mustGet(db, path); got.Version != cur.Version {
				t.Errorf("%s: version=%d after a failed precondition, want %d", tc.name, got.Version, cur.Version)
			}
		}
	}

	// replace and delete honour IfMatch too.
	cur := h.mustGet(db, path)
	_, err = h.commit(db, h.replace(path, `{"status":"closed"}`, filter("version", "==", num(cur.Version-1))))
	wantPrecondition(t, err, 0, path, cur.Version)
	h.mustCommit(db, h.replace(path, `{"status":"closed"}`, filter("status", "==", "open")))
	_, err = h.commit(db, del(path, filter("status", "==", "open")))
	wantPrecondition(t, err, 0, path, cur.Version+1)
	h.mustCommit(db, del(path, filter("status", "==", "closed"), filter("version", "==", num(cur.Version+1))))

	// No live document: replace with IfMatch is not an upsert.
	_, err = h.commit(db, h.replace("tasks/absent", `{"a":1}`, filter("version", "==", num(1))))
	wantPrecondition(t, err, 0, "tasks/absent", 0)
	h.mustNotFound(db, "tasks/absent")
	_, err = h.commit(db, h.replace(path, `{"a":1}`, filter("version", ">=", num(0))))
	wantPrecondition(t, err, 0, path, 0) // path is a tombstone now
	h.mustNotFound(db, path)
	// update and delete of an absent document fail either way.
	for _, w := range []collections.Write{
		h.update("tasks/absent", `{"a":1}`, filter("version", "==", num(1))),
		del("tasks/absent", filter("version", "==", num(1))),
	} {
		_, err := h.commit(db, w)
		if !errors.Is(err, collections.ErrPreconditionFailed) && !errors.Is(err, collections.ErrNotFound) {
			t.Errorf("%s of an absent document with IfMatch: err=%v, want ErrPreconditionFailed or ErrNotFound", w.Type, err)
		}
	}
	h.mustNotFound(db, "tasks/absent")
}
