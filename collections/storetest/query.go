package storetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/loomdb/loom/collections"
)

// queryItems is the fixed data set of testQuery: every JSON type class, equal
// numbers written differently (1 and 1.0), integers around 2^53, missing and
// null fields, arrays, nested objects.
var queryItems = []struct{ id, data string }{
	{"i01", `{"n":1,"s":"apple","b":true,"tags":["x","y"],"o":{"k":1},"mixed":1}`},
	{"i02", `{"n":"1","s":"apricot","b":false,"tags":["y"],"o":{"k":2},"mixed":"1"}`},
	{"i03", `{"n":2.5,"s":"banana","tags":[],"z":null,"mixed":true}`},
	{"i04", `{"n":null,"s":5,"mixed":null}`},
	{"i05", `{}`},
	{"i06", `{"n":true,"tags":"x","mixed":[1]}`},
	{"i07", `{"n":1.0,"s":"Apple","o":{"k":"1"},"mixed":{"a":1}}`},
	{"i08", `{"n":-3,"s":"","tags":[["x"],{"k":1},null],"o":{"k":null}}`},
	{"i09", `{"n":9007199254740993,"s":"é"}`},
	{"i10", `{"n":9007199254740992,"s":"ap"}`},
}

// jf builds a filter whose value is given as JSON.
func jf(t *testing.T, field string, op collections.Op, value string) collections.Filter {
	t.Helper()
	v, err := collections.DecodeJSON([]byte(value))
	if err != nil {
		t.Fatalf("bad filter value %s: %v", value, err)
	}
	return filter(field, op, v)
}

func ids(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

const allItems = "i01,i02,i03,i04,i05,i06,i07,i08,i09,i10"

func testQuery(t *testing.T, f Factory) {
	h := open(t, f, Options{})
	h.raw = true
	var ref []*collections.Document // every document, as the store returned it
	for _, it := range queryItems {
		ref = append(ref, h.mustCommitOne(db, h.create("items/"+it.id, it.data)))
	}
	h.mustCommit(db, h.update("items/i02", `{"u":1}`))
	h.mustCommit(db, h.update("items/i02", `{"u":2}`))
	h.mustCommit(db, h.create("items/i11", `{"n":1,"s":"apple"}`))
	ref = append(ref, h.mustCommitOne(db, del("items/i11")))
	// Neighbours that no query on "items" may return.
	h.mustCommit(db, h.create("items2/i01", `{"n":1}`), h.create("items/i01/sub/x", `{"n":1}`))
	h.mustCommit("other", h.create("items/i01", `{"n":1}`))
	for i, d := range ref {
		if !d.Deleted {
			ref[i] = h.mustGet(db, d.Path)
		}
	}

	q := func(filters ...collections.Filter) collections.Query {
		return collections.Query{Collection: "items", Filters: filters}
	}
	ordered := func(order ...collections.Order) collections.Query {
		return collections.Query{Collection: "items", OrderBy: order}
	}
	asc := func(f string) collections.Order { return collections.Order{Field: f, Direction: "asc"} }
	desc := func(f string) collections.Order { return collections.Order{Field: f, Direction: "desc"} }

	t.Run("Filters", func(t *testing.T) {
		for _, tc := range []struct {
			q    collections.Query
			want string
		}{
			{q(), allItems},
			{q(jf(t, "n", "==", `1`)), "i01,i07"},
			{q(jf(t, "n", "==", `1.0`)), "i01,i07"},
			{q(jf(t, "n", "==", `"1"`)), "i02"},
			{q(jf(t, "n", "==", `true`)), "i06"},
			{q(jf(t, "n", "==", `null`)), "i04"},
			{q(jf(t, "n", "==", `9007199254740992`)), "i10"},
			{q(jf(t, "n", "!=", `1`)), "i02,i03,i04,i05,i06,i08,i09,i10"},
			{q(jf(t, "n", "!=", `null`)), "i01,i02,i03,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "n", "<", `2`)), "i01,i07,i08"},
			{q(jf(t, "n", "<=", `2.5`)), "i01,i03,i07,i08"},
			{q(jf(t, "n", ">", `9007199254740992`)), "i09"},
			{q(jf(t, "n", ">=", `9007199254740992`)), "i09,i10"},
			{q(jf(t, "n", ">", `9007199254740992.0`)), "i09"},
			{q(jf(t, "n", ">", `"0"`)), "i02"},
			{q(jf(t, "n", "<=", `true`)), "i06"},
			{q(jf(t, "n", "<", `false`)), ""},
			{q(jf(t, "n", "in", `[1,"1",null]`)), "i01,i02,i04,i07"},
			{q(jf(t, "n", "in", `[]`)), ""},
			{q(jf(t, "n", "not-in", `[1,null]`)), "i02,i03,i05,i06,i08,i09,i10"},
			{q(jf(t, "n", "not-in", `[]`)), allItems},
			{q(jf(t, "tags", "array-contains", `"x"`)), "i01"},
			{q(jf(t, "tags", "array-contains", `null`)), "i08"},
			{q(jf(t, "tags", "array-contains", `["x"]`)), "i08"},
			{q(jf(t, "tags", "array-contains", `{"k":1}`)), "i08"},
			{q(jf(t, "tags", "contains", `"y"`)), "i01,i02"},
			{q(jf(t, "tags", "array-contains-any", `["x","y"]`)), "i01,i02"},
			{q(jf(t, "tags", "array-contains-any", `[1,"z"]`)), ""},
			{q(jf(t, "tags", "array-contains-any", `[]`)), ""},
			{q(jf(t, "tags", "==", `[]`)), "i03"},
			{q(jf(t, "tags", "==", `["y"]`)), "i02"},
			{q(jf(t, "s", "prefix", `"ap"`)), "i01,i02,i10"},
			{q(jf(t, "s", "prefix", `""`)), "i01,i02,i03,i07,i08,i09,i10"},
			{q(jf(t, "s", "prefix", `"é"`)), "i09"},
			{q(jf(t, "s", ">", `"b"`)), "i03,i09"},
			{q(jf(t, "s", "<", `"a"`)), "i07,i08"},
			{q(jf(t, "o.k", "==", `1`)), "i01"},
			{q(jf(t, "o.k", "==", `null`)), "i08"},
			{q(jf(t, "o.k", "==", `"1"`)), "i07"},
			{q(jf(t, "o.k", "!=", `1`)), "i02,i03,i04,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "o", "==", `{"k":2}`)), "i02"},
			{q(jf(t, "z", "==", `null`)), "i03"},
			{q(jf(t, "z", "!=", `null`)), "i01,i02,i04,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "mixed", "==", `{"a":1}`)), "i07"},
			{q(jf(t, "mixed", "==", `[1]`)), "i06"},
			{q(jf(t, "mixed", "in", `[true,[1]]`)), "i03,i06"},
			{q(jf(t, "b", "==", `false`)), "i02"},
			{q(jf(t, "b", "!=", `true`)), "i02,i03,i04,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "id", "==", `"i03"`)), "i03"},
			{q(jf(t, "id", "in", `["i01","i05","nope"]`)), "i01,i05"},
			{q(jf(t, "id", "prefix", `"i0"`)), "i01,i02,i03,i04,i05,i06,i07,i08,i09"},
			{q(jf(t, "id", ">", `"i08"`)), "i09,i10"},
			{q(jf(t, "id", "not-in", `["i01"]`)), "i02,i03,i04,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "version", "==", `1`)), "i01,i03,i04,i05,i06,i07,i08,i09,i10"},
			{q(jf(t, "version", ">", `1`)), "i02"},
			{q(jf(t, "version", "==", `3`)), "i02"},
			{q(jf(t, "version", "==", `"3"`)), ""},
			{q(jf(t, "n", ">=", `1`), jf(t, "n", "<", `3`)), "i01,i03,i07"},
			{q(jf(t, "n", ">=", `1`), jf(t, "n", "<", `3`), jf(t, "s", "prefix", `"a"`)), "i01"},
			{q(jf(t, "tags", "array-contains", `"y"`), jf(t, "b", "==", `false`)), "i02"},
			{q(jf(t, "n", "==", `1`), jf(t, "n", "==", `"1"`)), ""},
		} {
			h.expectQuery(t, db, tc.q, tc.want, ref)
		}
	})

	t.Run("OrderBy", func(t *testing.T) {
		for _, tc := range []struct {
			q    collections.Query
			want string
		}{
			{ordered(asc("n")), "i05,i04,i06,i08,i01,i07,i03,i10,i09,i02"},
			{ordered(desc("n")), "i02,i09,i10,i03,i01,i07,i08,i06,i04,i05"},
			{ordered(asc("mixed")), "i05,i08,i09,i10,i04,i03,i01,i02,i06,i07"},
			{ordered(desc("mixed")), "i07,i06,i02,i01,i03,i04,i05,i08,i09,i10"},
			{ordered(asc("s"), desc("n")), "i06,i05,i04,i08,i07,i10,i01,i02,i03,i09"},
			{ordered(desc("id")), "i10,i09,i08,i07,i06,i05,i04,i03,i02,i01"},
			{ordered(desc("version"), asc("id")), "i02,i01,i03,i04,i05,i06,i07,i08,i09,i10"},
			{ordered(asc("o.k")), "i03,i04,i05,i06,i09,i10,i08,i01,i02,i07"},
			{ordered(asc("tags")), "i04,i05,i07,i09,i10,i06,i01,i02,i03,i08"},
			{collections.Query{Collection: "items", Filters: []collections.Filter{jf(t, "tags", "array-contains-any", `["x","y"]`)}, OrderBy: []collections.Order{desc("n")}}, "i02,i01"},
			{collections.Query{Collection: "items", Filters: []collections.Filter{jf(t, "n", "in", `[1,2.5,9007199254740993]`)}, OrderBy: []collections.Order{desc("n")}}, "i09,i03,i01,i07"},
		} {
			h.expectQuery(t, db, tc.q, tc.want, ref)
		}
	})

	t.Run("EnvelopeFields", func(t *testing.T) {
		mid := ref[4] // i05
		for _, eq := range []collections.Query{
			ordered(asc("createdAt")),
			ordered(desc("updatedAt"), desc("id")),
			q(filter("createdAt", ">=", num(mid.CreatedAt))),
			q(filter("updatedAt", ">", num(mid.UpdatedAt))),
			q(filter("createdAt", "<=", num(mid.CreatedAt)), filter("version", "==", num(1))),
			{Collection: "items", Filters: []collections.Filter{filter("updatedAt", ">=", num(0))}, OrderBy: []collections.Order{desc("createdAt"), asc("n")}},
		} {
			h.expectQuery(t, db, eq, strings.Join(idsOf(reference(ref, eq)), ","), ref)
		}
	})

	t.Run("Paging", func(t *testing.T) {
		for _, tc := range []struct {
			q     collections.Query
			pages []string
		}{
			{collections.Query{Collection: "items", OrderBy: []collections.Order{asc("n")}, Limit: 3},
				[]string{"i05,i04,i06", "i08,i01,i07", "i03,i10,i09", "i02"}},
			{collections.Query{Collection: "items", Limit: 5},
				[]string{"i01,i02,i03,i04,i05", "i06,i07,i08,i09,i10"}},
			{collections.Query{Collection: "items", Limit: 10}, []string{allItems}},
			{collections.Query{Collection: "items", Limit: 11}, []string{allItems}},
			{collections.Query{Collection: "items", OrderBy: []collections.Order{desc("mixed")}, Limit: 4},
				[]string{"i07,i06,i02,i01", "i03,i04,i05,i08", "i09,i10"}},
			{collections.Query{Collection: "items", Filters: []collections.Filter{jf(t, "n", "==", `1`)}, OrderBy: []collections.Order{desc("n")}, Limit: 1},
				[]string{"i01", "i07"}},
			{collections.Query{Collection: "items", Filters: []collections.Filter{jf(t, "n", "==", `"none"`)}, Limit: 1},
				[]string{""}},
		} {
			h.expectPages(t, db, tc.q, tc.pages)
		}
		// Every page size pages through exactly what one big query returns.
		for _, order := range [][]collections.Order{nil, {asc("n")}, {desc("s"), asc("mixed")}, {desc("id")}} {
			big := collections.Query{Collection: "items", OrderBy: order, ShowDeleted: true}
			want := paths(h.mustQuery(db, big).Docs)
			for limit := 1; limit <= 4; limit++ {
				q := big
				q.Limit = limit
				if got := paths(h.mustQueryAll(db, q)); !slices.Equal(got, want) {
					t.Errorf("orderBy %v limit %d: pages=%v, want %v", order, limit, got, want)
				}
			}
		}
	})

	t.Run("ShowDeleted", func(t *testing.T) {
		h.expectQuery(t, db, collections.Query{Collection: "items", ShowDeleted: true}, allItems+",i11", ref)
		h.expectQuery(t, db, collections.Query{Collection: "items", ShowDeleted: true, Filters: []collections.Filter{jf(t, "id", "==", `"i11"`)}}, "i11", ref)
		h.expectQuery(t, db, collections.Query{Collection: "items", Filters: []collections.Filter{jf(t, "id", "==", `"i11"`)}}, "", ref)
		docs := h.mustQuery(db, collections.Query{Collection: "items", ShowDeleted: true, Filters: []collections.Filter{jf(t, "id", "==", `"i11"`)}}).Docs
		if len(docs) == 1 && (!docs[0].Deleted || docs[0].Version != 2) {
			t.Errorf("tombstone=%s, want deleted at version 2", docString(docs[0]))
		}
	})

	t.Run("CollectionGroups", func(t *testing.T) { testCollectionGroups(t, h) })
}

func idsOf(ds []*collections.Document) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// expectQuery runs q through every page and compares the ids (or, when
// want names paths with "/", the paths) with want. It also checks that the
// reference evaluator agrees with want, so that a wrong expectation in this
// suite is told apart from an engine bug.
func (h *harness) expectQuery(t *testing.T, dbName string, q collections.Query, want string, ref []*collections.Document) {
	t.Helper()
	key := idsOf
	if strings.Contains(want, "/") {
		key = paths
	}
	got := key(h.mustQueryAll(dbName, q))
	if !slices.Equal(got, ids(want)) {
		t.Errorf("Query(%s)=%v, want %v", queryString(q), got, ids(want))
	}
	if ref != nil {
		if err := q.Normalize(); err != nil {
			t.Fatal(err)
		}
		if r := key(reference(ref, q)); !slices.Equal(r, ids(want)) {
			t.Errorf("reference evaluator for %s=%v, but the suite expects %v", queryString(q), r, ids(want))
		}
	}
}

// expectPages checks every page of q and that NextCursor is empty exactly
// on the last one.
func (h *harness) expectPages(t *testing.T, dbName string, q collections.Query, pages []string) {
	t.Helper()
	for i, want := range pages {
		res := h.mustQuery(dbName, q)
		if got := idsOf(res.Docs); !slices.Equal(got, ids(want)) {
			t.Errorf("Query(%s) page %d=%v, want %v", queryString(q), i, got, ids(want))
			return
		}
		last := i == len(pages)-1
		if last != (res.NextCursor == "") {
			t.Errorf("Query(%s) page %d of %d: NextCursor=%q, want it empty only on the last page", queryString(q), i, len(pages), res.NextCursor)
			return
		}
		if !last {
			h.checkCursor(t, q, res)
		}
		q.StartAfter = res.NextCursor
	}
}

// checkCursor checks that a page's NextCursor decodes for the query's order
// and points at the page's last document.
func (h *harness) checkCursor(t *testing.T, q collections.Query, res collections.QueryResult) {
	t.Helper()
	if err := q.Normalize(); err != nil {
		t.Fatal(err)
	}
	c, err := collections.DecodeCursor(res.NextCursor, q.OrderBy)
	if err != nil {
		t.Errorf("NextCursor %q does not decode for %s: %v", res.NextCursor, queryString(q), err)
		return
	}
	if n := len(res.Docs); n > 0 && c.Path != res.Docs[n-1].Path {
		t.Errorf("NextCursor points at %s, want the page's last document %s", c.Path, res.Docs[n-1].Path)
	}
}

func testCollectionGroups(t *testing.T, h *harness) {
	const g = "groups"
	h.mustCommit(g,
		h.create("users/u1", `{}`),
		h.create("users/u1/orch-chats/c1", `{}`),
		h.create("users/u1/orch-chats/c1/tasks/t1", `{"status":"open","prio":2}`),
		h.create("users/u1/orch-chats/c2/tasks/t2", `{"status":"done","prio":1}`),
		h.create("users/u2/orch-chats/c3/tasks/t3", `{"status":"open","prio":3}`),
		h.create("users/u1/orch-chats/c1/tasks/t1/sub/s1", `{"status":"open"}`),
		h.create("users/u1/orch-chats/c1/notes/n1", `{"status":"open"}`),
		h.create("users/u1/tasks/t4", `{"status":"open"}`),
		h.create("tasks/t5", `{"status":"open"}`),
		h.create("users/u2/orch-chats/c3/tasks/t6", `{"status":"open"}`),
	)
	h.mustCommit(g, del("users/u2/orch-chats/c3/tasks/t6"))
	const (
		t1 = "users/u1/orch-chats/c1/tasks/t1"
		t2 = "users/u1/orch-chats/c2/tasks/t2"
		t3 = "users/u2/orch-chats/c3/tasks/t3"
		t6 = "users/u2/orch-chats/c3/tasks/t6"
	)
	for _, tc := range []struct {
		q    collections.Query
		want string
	}{
		{collections.Query{Collection: "users/*/orch-chats/*/tasks"}, t1 + "," + t2 + "," + t3},
		{collections.Query{Collection: "users/u1/orch-chats/*/tasks"}, t1 + "," + t2},
		{collections.Query{Collection: "users/*/orch-chats/c1/tasks"}, t1},
		{collections.Query{Collection: "users/u1/orch-chats/c1/tasks"}, t1},
		{collections.Query{Collection: "users/*/orch-chats"}, "users/u1/orch-chats/c1"},
		{collections.Query{Collection: "users/*/tasks"}, "users/u1/tasks/t4"},
		{collections.Query{Collection: "*/u1/tasks"}, "users/u1/tasks/t4"},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks/*/sub"}, "users/u1/orch-chats/c1/tasks/t1/sub/s1"},
		{collections.Query{Collection: "*"}, "tasks/t5,users/u1"},
		{collections.Query{Collection: "users"}, "users/u1"},
		{collections.Query{Collection: "users/*/orch-chats/*/notes"}, "users/u1/orch-chats/c1/notes/n1"},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", ShowDeleted: true}, t1 + "," + t2 + "," + t3 + "," + t6},
		{collections.Query{
			Collection: "users/*/orch-chats/*/tasks",
			Filters:    []collections.Filter{filter("status", "==", "open")},
			OrderBy:    []collections.Order{{Field: "prio", Direction: "desc"}},
		}, t3 + "," + t1},
		{collections.Query{Collection: "users/*/orch-chats/*/tasks", OrderBy: []collections.Order{{Field: "id", Direction: "desc"}}, Limit: 2}, t3 + "," + t2 + "," + t1},
		{collections.Query{Collection: "users/*/orch-chats/*/projects"}, ""},
	} {
		h.expectQuery(t, g, tc.q, tc.want, nil)
	}
	if docs := h.mustQuery(db, collections.Query{Collection: "users/*/orch-chats/*/tasks"}).Docs; len(docs) != 0 {
		t.Errorf("group query in another database=%v, want none", paths(docs))
	}
}
