package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/loomdb/loom/collections"
)

const db = "default"

func testCRUD(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"Create", testCreate},
		{"CreateExisting", testCreateExisting},
		{"RecreateOverTombstone", testRecreateOverTombstone},
		{"Get", testGet},
		{"Replace", testReplace},
		{"Update", testUpdate},
		{"Delete", testDelete},
		{"Envelope", testEnvelope},
		{"Databases", testDatabases},
		{"SystemPaths", testSystemPaths},
		{"TriggerStateLogged", testTriggerStateLogged},
		{"Ready", testReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t, f, Options{}))
		})
	}
}

// wantDoc checks the envelope and data of a document returned by the store.
func wantDoc(t *testing.T, what string, d *collections.Document, path string, version int64, data string) {
	t.Helper()
	if d == nil {
		t.Fatalf("%s: document=nil, want %s", what, path)
	}
	coll, id := collections.SplitDocPath(path)
	if d.Path != path || d.Collection != coll || d.ID != id {
		t.Errorf("%s: path=%q collection=%q id=%q, want %q %q %q", what, d.Path, d.Collection, d.ID, path, coll, id)
	}
	if d.Version != version {
		t.Errorf("%s: version=%d, want %d", what, d.Version, version)
	}
	if d.Deleted {
		t.Errorf("%s: deleted=true, want a live document", what)
	}
	if want := obj(t, data); !collections.Equal(d.Data, want) && !(len(d.Data) == 0 && len(want) == 0) {
		t.Errorf("%s: data=%s, want %s", what, dataString(d.Data), data)
	}
}

// wantTime checks that a timestamp is unix ms within [before, after].
func wantTime(t *testing.T, what string, ms, before, after int64) {
	t.Helper()
	if ms < before-clockSkew || ms > after+clockSkew {
		t.Errorf("%s=%d, want unix ms within [%d, %d]", what, ms, before, after)
	}
}

// wantWriteErr checks that err is a *WriteError for write index wrapping
// target.
func wantWriteErr(t *testing.T, err error, index int, path string, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err=%v, want %v", err, target)
	}
	var we *collections.WriteError
	if !errors.As(err, &we) {
		t.Fatalf("err=%v (%T), want a *collections.WriteError", err, err)
	}
	if we.Index != index || we.Path != path {
		t.Errorf("WriteError index=%d path=%q, want %d %q", we.Index, we.Path, index, path)
	}
}

func testCreate(t *testing.T, h *harness) {
	const path = "rooms/r1/messages/m1"
	const data = `{"text":"hi","big":9007199254740993,"f":0.1,"nested":{"a":[1,"x",null,{"b":true}]},"empty":{},"null":null}`
	before := nowMs()
	res := h.mustCommit(db, h.create(path, data))
	after := nowMs()
	if !res[0].Created {
		t.Errorf("Created=false, want true")
	}
	d := res[0].Doc
	wantDoc(t, "create result", d, path, 1, data)
	wantTime(t, "createdAt", d.CreatedAt, before, after)
	if d.UpdatedAt != d.CreatedAt {
		t.Errorf("updatedAt=%d, want createdAt %d on create", d.UpdatedAt, d.CreatedAt)
	}
	if d.Seq <= 0 {
		t.Errorf("seq=%d, want > 0", d.Seq)
	}
	g := h.mustGet(db, path)
	wantDoc(t, "Get", g, path, 1, data)
	if g.CreatedAt != d.CreatedAt || g.UpdatedAt != d.UpdatedAt || g.Seq != d.Seq {
		t.Errorf("Get createdAt=%d updatedAt=%d seq=%d, want %d %d %d (the create result)", g.CreatedAt, g.UpdatedAt, g.Seq, d.CreatedAt, d.UpdatedAt, d.Seq)
	}
	// The subcollection's parent document does not exist; that is fine.
	h.mustNotFound(db, "rooms/r1")

	// Create without data.
	res = h.mustCommit(db, collections.Write{Type: collections.WriteCreate, Path: "rooms/r2"})
	wantDoc(t, "create without data", res[0].Doc, "rooms/r2", 1, `{}`)
}

func testCreateExisting(t *testing.T, h *harness) {
	h.mustCommit(db, h.create("rooms/r1", `{"a":1}`))
	head := h.mustHead()
	_, err := h.commit(db, h.create("rooms/r1", `{"a":2}`))
	wantWriteErr(t, err, 0, "rooms/r1", collections.ErrAlreadyExists)
	wantDoc(t, "after the failed create", h.mustGet(db, "rooms/r1"), "rooms/r1", 1, `{"a":1}`)
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after a failed create, want %d", got, head)
	}
}

func testRecreateOverTombstone(t *testing.T, h *harness) {
	const path = "rooms/r1"
	h.mustCommit(db, h.create(path, `{"a":1}`))
	h.mustCommit(db, h.update(path, `{"b":2}`))
	if d := h.mustCommitOne(db, del(path)); d.Version != 3 || !d.Deleted {
		t.Fatalf("delete result version=%d deleted=%v, want 3 true", d.Version, d.Deleted)
	}
	res := h.mustCommit(db, h.create(path, `{"c":3}`))
	if !res[0].Created {
		t.Errorf("Created=false for a create over a tombstone, want true")
	}
	wantDoc(t, "re-create", res[0].Doc, path, 4, `{"c":3}`)
	wantDoc(t, "Get after re-create", h.mustGet(db, path), path, 4, `{"c":3}`)

	// replace (upsert) over a tombstone continues the count too.
	h.mustCommit(db, del(path))
	res = h.mustCommit(db, h.replace(path, `{"d":4}`))
	if !res[0].Created {
		t.Errorf("Created=false for a replace over a tombstone, want true")
	}
	wantDoc(t, "replace over a tombstone", res[0].Doc, path, 6, `{"d":4}`)
}

func testGet(t *testing.T, h *harness) {
	h.mustNotFound(db, "rooms/absent")
	h.mustCommit(db, h.create("rooms/r1", `{"a":1}`))
	h.mustNotFound("other", "rooms/r1")
	h.mustNotFound(db, "rooms/r2")
	h.mustNotFound(db, "rooms/r1/sub/x")
	h.mustCommit(db, del("rooms/r1"))
	h.mustNotFound(db, "rooms/r1")
}

func testReplace(t *testing.T, h *harness) {
	const path = "rooms/r1"
	res := h.mustCommit(db, h.replace(path, `{"a":1,"keep":{"x":1}}`))
	if !res[0].Created {
		t.Errorf("replace of an absent document: Created=false, want true")
	}
	first := res[0].Doc
	wantDoc(t, "replace (create)", first, path, 1, `{"a":1,"keep":{"x":1}}`)

	clockPast(first.UpdatedAt)
	res = h.mustCommit(db, h.replace(path, `{"b":2}`))
	if res[0].Created {
		t.Errorf("replace of a live document: Created=true, want false")
	}
	d := res[0].Doc
	wantDoc(t, "replace", d, path, 2, `{"b":2}`)
	if d.CreatedAt != first.CreatedAt {
		t.Errorf("createdAt=%d after replace, want %d (kept)", d.CreatedAt, first.CreatedAt)
	}
	if d.UpdatedAt <= first.UpdatedAt {
		t.Errorf("updatedAt=%d after replace, want > %d (the clock moved)", d.UpdatedAt, first.UpdatedAt)
	}
	if d.Seq <= first.Seq {
		t.Errorf("seq=%d after replace, want > %d", d.Seq, first.Seq)
	}
	wantDoc(t, "Get after replace", h.mustGet(db, path), path, 2, `{"b":2}`)

	// Replacing with empty data clears every user field.
	res = h.mustCommit(db, h.replace(path, `{}`))
	wantDoc(t, "replace with {}", res[0].Doc, path, 3, `{}`)
}

func testUpdate(t *testing.T, h *harness) {
	const path = "rooms/r1"
	const start = `{"a":{"x":1,"y":2},"b":1,"c":"keep","arr":[1,2],"n":9007199254740993}`
	first := h.mustCommitOne(db, h.create(path, start))
	for i, patch := range []string{
		`{"a":{"y":3,"z":{"deep":true}},"b":null,"d.e":5}`,
		`{"arr":[3],"a.z.deep":null,"a.w":"new","c":null}`,
		`{}`,
		`{"a":"scalar now","f":0.5}`,
	} {
		want, err := collections.ApplyPatch(h.mustGet(db, path).Data, obj(t, patch))
		if err != nil {
			t.Fatal(err)
		}
		clockPast(first.CreatedAt)
		res := h.mustCommit(db, h.update(path, patch))
		if res[0].Created {
			t.Errorf("update %d: Created=true, want false", i)
		}
		d := res[0].Doc
		wantDoc(t, "update "+patch, d, path, int64(i+2), dataString(want))
		if d.CreatedAt != first.CreatedAt {
			t.Errorf("update %d: createdAt=%d, want %d (kept)", i, d.CreatedAt, first.CreatedAt)
		}
		wantDoc(t, "Get after update "+patch, h.mustGet(db, path), path, int64(i+2), dataString(want))
	}

	_, err := h.commit(db, h.update("rooms/absent", `{"a":1}`))
	wantWriteErr(t, err, 0, "rooms/absent", collections.ErrNotFound)
	h.mustNotFound(db, "rooms/absent")

	h.mustCommit(db, del(path))
	_, err = h.commit(db, h.update(path, `{"a":1}`))
	wantWriteErr(t, err, 0, path, collections.ErrNotFound)
	h.mustNotFound(db, path)
}

func testDelete(t *testing.T, h *harness) {
	const path = "rooms/r1"
	h.mustCommit(db, h.create(path, `{"a":1}`))
	res := h.mustCommit(db, del(path))
	d := res[0].Doc
	if !d.Deleted || d.Version != 2 || d.Path != path {
		t.Errorf("delete result path=%q deleted=%v version=%d, want %q true 2", d.Path, d.Deleted, d.Version, path)
	}
	if res[0].Created {
		t.Errorf("delete: Created=true, want false")
	}
	h.mustNotFound(db, path)

	_, err := h.commit(db, del(path))
	wantWriteErr(t, err, 0, path, collections.ErrNotFound)
	_, err = h.commit(db, del("rooms/never"))
	wantWriteErr(t, err, 0, "rooms/never", collections.ErrNotFound)

	// The tombstone stays visible to showDeleted queries.
	docs := h.mustQuery(db, collections.Query{Collection: "rooms", ShowDeleted: true}).Docs
	if len(docs) != 1 || docs[0].Path != path || !docs[0].Deleted || docs[0].Version != 2 {
		t.Errorf("showDeleted query=%v, want the tombstone of %s at version 2", docStrings(docs), path)
	}
	if docs := h.mustQuery(db, collections.Query{Collection: "rooms"}).Docs; len(docs) != 0 {
		t.Errorf("query without showDeleted=%v, want none", paths(docs))
	}
}

func docStrings(ds []*collections.Document) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = docString(d)
	}
	return out
}

// testEnvelope walks one document through every kind of write: the version
// counts up by one, createdAt stays, updatedAt and seq never go back.
func testEnvelope(t *testing.T, h *harness) {
	const path = "rooms/r1"
	before := nowMs()
	writes := []collections.Write{
		h.create(path, `{"a":1}`),
		h.update(path, `{"b":2}`),
		h.replace(path, `{"c":3}`),
		h.update(path, `{"c":null}`),
		del(path),
		h.create(path, `{"d":4}`),
	}
	var prev *collections.Document
	for i, w := range writes {
		d := h.mustCommitOne(db, w)
		after := nowMs()
		if d.Version != int64(i+1) {
			t.Errorf("write %d (%s): version=%d, want %d", i, w.Type, d.Version, i+1)
		}
		wantTime(t, "updatedAt", d.UpdatedAt, before, after)
		wantTime(t, "createdAt", d.CreatedAt, before, after)
		if prev != nil {
			if d.UpdatedAt < prev.UpdatedAt {
				t.Errorf("write %d (%s): updatedAt=%d, want >= %d", i, w.Type, d.UpdatedAt, prev.UpdatedAt)
			}
			if d.Seq <= prev.Seq {
				t.Errorf("write %d (%s): seq=%d, want > %d", i, w.Type, d.Seq, prev.Seq)
			}
			if w.Type != collections.WriteCreate && d.CreatedAt != prev.CreatedAt {
				t.Errorf("write %d (%s): createdAt=%d, want %d (kept)", i, w.Type, d.CreatedAt, prev.CreatedAt)
			}
		}
		if d.UpdatedAt < d.CreatedAt {
			t.Errorf("write %d (%s): updatedAt=%d < createdAt=%d", i, w.Type, d.UpdatedAt, d.CreatedAt)
		}
		prev = d
	}
}

// testDatabases writes the same path in two databases: they never see each
// other.
func testDatabases(t *testing.T, h *harness) {
	const path = "rooms/r1"
	h.mustCommit("a", h.create(path, `{"v":"a"}`))
	h.mustCommit("b", h.create(path, `{"v":"b"}`))
	h.mustCommit("a", h.update(path, `{"w":1}`))
	wantDoc(t, "db a", h.mustGet("a", path), path, 2, `{"v":"a","w":1}`)
	wantDoc(t, "db b", h.mustGet("b", path), path, 1, `{"v":"b"}`)
	h.mustNotFound(db, path)

	h.mustCommit("a", del(path))
	h.mustNotFound("a", path)
	wantDoc(t, "db b after delete in a", h.mustGet("b", path), path, 1, `{"v":"b"}`)
	if _, err := h.commit("b", h.create(path, `{}`)); !errors.Is(err, collections.ErrAlreadyExists) {
		t.Errorf("create in b err=%v, want ErrAlreadyExists", err)
	}
	h.mustCommit("a", h.create(path, `{"v":"a2"}`))

	for _, tc := range []struct{ db, want string }{{"a", `{"v":"a2"}`}, {"b", `{"v":"b"}`}} {
		docs := h.mustQuery(tc.db, collections.Query{Collection: "rooms", ShowDeleted: true}).Docs
		if len(docs) != 1 || !collections.Equal(docs[0].Data, obj(t, tc.want)) {
			t.Errorf("query in db %s=%v, want one document %s", tc.db, docStrings(docs), tc.want)
		}
	}
	var dbs []string
	for _, c := range h.mustChangesSince(0) {
		dbs = append(dbs, c.DB)
	}
	if want := []string{"a", "b", "a", "a", "a"}; !equalStrings(dbs, want) {
		t.Errorf("change DBs=%v, want %v", dbs, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testSystemPaths: system collections are written through Commit like any
// other, but never reach the change log.
func testSystemPaths(t *testing.T, h *harness) {
	head := h.mustHead()
	res := h.mustCommit(db, h.create("_outbox/x", `{"url":"http://127.0.0.1/hook","attempt":0}`))
	if d := res[0].Doc; d.Version != 1 || d.Seq != 0 {
		t.Errorf("system create: version=%d seq=%d, want 1 0", d.Version, d.Seq)
	}
	h.mustCommit(db, h.update("_outbox/x", `{"attempt":1}`))
	h.mustCommit(db, h.replace("_cursors/triggers", `{"pos":1}`))
	wantDoc(t, "Get system doc", h.mustGet(db, "_outbox/x"), "_outbox/x", 2, `{"url":"http://127.0.0.1/hook","attempt":1}`)
	docs := h.mustQuery(db, collections.Query{Collection: "_outbox", Filters: []collections.Filter{filter("attempt", collections.OpEq, num(1))}}).Docs
	if len(docs) != 1 || docs[0].Path != "_outbox/x" {
		t.Errorf("query on _outbox=%v, want [_outbox/x]", paths(docs))
	}
	h.mustCommit(db, del("_outbox/x"))
	h.mustNotFound(db, "_outbox/x")
	if got := h.mustHead(); got != head {
		t.Errorf("Head=%d after system writes only, want %d", got, head)
	}
	if cs := h.mustReadChanges(head, 100); len(cs) != 0 {
		t.Errorf("system writes logged %d changes, want none (first: %s %s)", len(cs), cs[0].Op, cs[0].Path)
	}

	// Mixed commit: only the user writes are logged, in write order.
	res = h.mustCommit(db,
		h.create("_outbox/y", `{}`),
		h.create("rooms/a", `{}`),
		h.update("_outbox/y", `{"n":1}`),
		h.create("rooms/b", `{}`),
	)
	cs := h.mustChangesSince(head)
	if len(cs) != 2 || cs[0].Path != "rooms/a" || cs[1].Path != "rooms/b" {
		t.Fatalf("changes of a mixed commit=%v, want rooms/a then rooms/b", changePaths(cs))
	}
	if res[1].Doc.Seq != cs[0].Seq || res[3].Doc.Seq != cs[1].Seq {
		t.Errorf("result seqs=%d,%d, want %d,%d", res[1].Doc.Seq, res[3].Doc.Seq, cs[0].Seq, cs[1].Seq)
	}
}

// testTriggerStateLogged: _triggers is the one system collection whose
// writes are logged (collections.IsLogged), so every node can follow the
// trigger admin changes; the other system writes of the same commits are
// not, and a commit of _triggers writes wakes Notify.
func testTriggerStateLogged(t *testing.T, h *harness) {
	head := h.mustHead()
	wake := h.s.Notify()
	res := h.mustCommit(db,
		h.create("_triggers/t1", `{"source":"api","secret":"whsec_a"}`),
		h.create("_outbox/o1", `{}`),
		h.replace("_cursors/c1", `{"pos":1}`),
	)
	h.waitNotify(wake, "a commit of a _triggers write")
	if d := res[0].Doc; d.Seq != head+1 {
		t.Errorf("_triggers create: seq=%d, want %d", d.Seq, head+1)
	}
	if d := res[1].Doc; d.Seq != 0 {
		t.Errorf("_outbox create: seq=%d, want 0 (not logged)", d.Seq)
	}
	h.mustCommit(db, h.update("_triggers/t1", `{"enabled":false}`), h.update("_outbox/o1", `{"n":1}`))
	h.mustCommit(db, del("_triggers/t1"))
	h.mustCommit(db, h.create("_users/u1", `{}`))
	cs := h.mustChangesSince(head)
	want := []string{"create _triggers/t1", "update _triggers/t1", "delete _triggers/t1"}
	if got := changePaths(cs); !slices.Equal(got, want) {
		t.Fatalf("changes=%v, want %v", got, want)
	}
	if cs[1].Before == nil || cs[1].After == nil || cs[1].After.Data["enabled"] != false || cs[1].Before.Data["secret"] != "whsec_a" {
		t.Errorf("update change: Before=%s After=%s, want the state before and after", docString(cs[1].Before), docString(cs[1].After))
	}
	if !cs[2].After.Deleted || cs[2].DB != db {
		t.Errorf("delete change: After=%s DB=%q, want a tombstone in %q", docString(cs[2].After), cs[2].DB, db)
	}
	if got := h.mustHead(); got != cs[2].Seq {
		t.Errorf("Head=%d, want %d (the last _triggers change)", got, cs[2].Seq)
	}
	// The trigger registries read the states changed since a position.
	h.mustCommit(db, h.create("_triggers/t2", `{"source":"file"}`))
	docs := h.changedSince(db, "_triggers", collections.Checkpoint{Seq: head}, 10)
	if len(docs) != 2 || docs[0].Path != "_triggers/t1" || !docs[0].Deleted || docs[0].Seq != cs[2].Seq || docs[1].Path != "_triggers/t2" || docs[1].Seq != cs[2].Seq+1 {
		t.Errorf("ChangedSince(_triggers, %d)=%v, want the t1 tombstone at %d and t2 at %d", head, docStrings(docs), cs[2].Seq, cs[2].Seq+1)
	}
}

func changePaths(cs []collections.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c.Op) + " " + c.Path
	}
	return out
}

func testReady(t *testing.T, h *harness) {
	ctx, cancel := ctxT()
	defer cancel()
	if err := h.s.Ready(ctx); err != nil {
		t.Errorf("Ready on a fresh store: %v", err)
	}
}
